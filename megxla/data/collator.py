"""Collator: stack a list of samples into one batch of NumPy arrays.

Mirrors ``megengine.data.collator``: the first sample decides how a field is collated, and values of other dtypes
are upcast as ``np.stack`` / ``np.array`` do (int32 and int64 labels of a ``ConcatDataset`` give int64; a dict's
keys are the first sample's). Where MegEngine's would fail with NumPy's positional message (arrays of other
shapes) or silently drop data (tuples of other lengths: ``zip`` keeps the shortest), a :class:`CollateError` names
the sample of the dataset that differs.
"""
import collections.abc
import re

import numpy as np

__all__ = ["Collator", "CollateError"]

# dtype.str codes of the arrays MegEngine's collator refuses: object arrays (and the old ``a`` code). String and
# bytes arrays stack (a sample's ``np.array(["cat"])``: a batch ``(n, 1)`` of ``<U3``), as in MegEngine 1.13.
_np_str_obj_array_pattern = re.compile(r"[aO]")


class CollateError(ValueError):
    r"""Raised by :class:`Collator` when samples of a batch do not agree.

    ``position`` and ``reference`` are the positions (within the batch) of the
    offending sample and of the first sample it was compared with; the
    ``DataLoader`` uses them to name dataset indices instead.

    Args:
        template: message with ``{bad}`` and ``{ref}`` placeholders.
        position: batch position of the offending sample.
        reference: batch position of the sample it disagrees with.
        indices: the batch's dataset indices; when given the message names
            them instead of batch positions.
        index_name: what ``indices`` are called in the message.
            Default: ``"dataset index"``.

    Examples:
        >>> e = CollateError("sample {bad} differs from sample {ref}", 2, 0)
        >>> str(e)
        'sample at batch position 2 differs from sample at batch position 0'
        >>> str(CollateError(e.template, 2, 0, indices=[7, 8, 9]))
        'sample with dataset index 9 differs from sample with dataset index 7'
    """

    def __init__(
        self, template, position, reference, indices=None, index_name="dataset index"
    ):
        self.template = template
        self.position = position
        self.reference = reference
        self.indices = None if indices is None else list(indices)
        self.index_name = index_name
        super().__init__(self._render())

    def __reduce__(self):
        # default exception pickling replays only the message, which does not
        # fit this signature; workers send these across processes
        return (
            type(self),
            (
                self.template,
                self.position,
                self.reference,
                self.indices,
                self.index_name,
            ),
        )

    def _render(self):
        indices = self.indices
        if indices is None:
            bad = "at batch position {}".format(self.position)
            ref = "at batch position {}".format(self.reference)
        else:
            bad = "with {} {}".format(self.index_name, indices[self.position])
            ref = "with {} {}".format(self.index_name, indices[self.reference])
        return self.template.format(bad=bad, ref=ref)


class CollateKeyError(CollateError, KeyError):
    """A :class:`CollateError` for a dict sample lacking one of the first sample's keys: also a ``KeyError``, what
    MegEngine's collator raises there (``d[key]``)."""

    __str__ = CollateError.__str__  # (the message, not KeyError's repr of it)


# MegEngine's text for a value the collator cannot batch (code may match it)
_UNSUPPORTED = (
    "default_collator: inputs must contain numpy arrays, numbers, Unicode strings, bytes, dicts or lists; found {}"
)


def _unsupported(found, path):
    where = " (element {} of the samples)".format(path) if path else ""
    return TypeError(_UNSUPPORTED.format(found) + where)


def _escape(text):
    # the message is a str.format template; keep user-provided keys literal
    return text.replace("{", "{{").replace("}", "}}")


def _describe_value(x):
    if isinstance(x, np.ndarray):
        return "an array of shape {} and dtype {}".format(x.shape, x.dtype)
    if isinstance(x, np.generic) and not isinstance(x, (np.str_, np.bytes_)):
        return "a scalar of dtype {}".format(x.dtype)
    if isinstance(x, collections.abc.Mapping):
        return "a {} with keys {}".format(type(x).__name__, list(x.keys()))
    if isinstance(x, collections.abc.Sequence) and not isinstance(x, (str, bytes)):
        return "a {} of length {}".format(type(x).__name__, len(x))
    return "a value of type {}".format(type(x).__name__)


def _is_number(x):
    return isinstance(x, (bool, int, float, np.bool_, np.number)) or (
        isinstance(x, np.ndarray) and x.shape == () and x.dtype.kind in "biuf")


def _compatible(elem, x):
    """Whether ``x`` collates with the batch's first sample ``elem`` as MegEngine's collator takes it (dtypes
    are upcast; shapes, structures and lengths must agree)."""
    if isinstance(elem, np.ndarray):
        if elem.shape == ():  # (np.stack: a 0-d array stacks with NumPy / Python scalars)
            return (isinstance(x, np.ndarray) or _is_number(x)) and np.shape(x) == ()
        if isinstance(x, np.ndarray):
            return x.shape == elem.shape
        if isinstance(x, (list, tuple)):  # (np.stack takes a list of the array's shape too, as in MegEngine)
            try:
                return np.shape(x) == elem.shape
            except Exception:  # (a ragged list: ValueError)
                return False
        return False
    if isinstance(elem, (str, bytes, np.str_, np.bytes_)):
        return True  # (gathered as they come, unchecked, as MegEngine's: a file name beside a None)
    if isinstance(elem, (bool, int, float, np.number, np.bool_)):
        return _is_number(x)  # (np.array upcasts: [True, 2] -> [1, 2], [1, np.int64(2)] -> int64)
    if isinstance(elem, np.generic):  # (datetime64, timedelta64: np.array of the same kind, as MegEngine)
        return isinstance(x, np.generic) and x.dtype.kind == elem.dtype.kind
    if isinstance(elem, collections.abc.Mapping):
        return isinstance(x, collections.abc.Mapping) and all(k in x for k in elem)  # (the first one's keys)
    if isinstance(elem, collections.abc.Sequence):
        if isinstance(x, np.ndarray):  # (MegEngine's zip walks an array's rows as a list's items)
            return x.ndim >= 1 and len(x) == len(elem)
        return isinstance(x, collections.abc.Sequence) and not isinstance(x, (str, bytes)) and len(x) == len(elem)
    return True  # (an unsupported first sample: the TypeError below names it)


class Collator:
    r"""Combine a list of samples into a batch.

    NumPy arrays are stacked along a new first axis, Python/NumPy scalars
    become 1-D arrays, strings are gathered unstacked (a tuple for a field of
    tuple/list samples, as MegEngine), and tuples, lists, namedtuples and
    dicts are collated element-wise, the first sample deciding how. Dtypes
    are upcast as NumPy does (int32 beside int64 labels: int64); samples of
    other shapes, structures or lengths raise a :class:`CollateError` naming
    the offending sample.

    Examples:
        >>> import numpy as np
        >>> batch = [(np.zeros((2,), np.float32), 0), (np.ones((2,), np.float32), 1)]
        >>> data, label = Collator().apply(batch)
        >>> data.shape, label.tolist()
        ((2, 2), [0, 1])
    """

    def apply(self, inputs):
        r"""Collate a list of samples.

        Args:
            inputs: a non-empty list of samples with the same structure.

        Returns:
            the batch, with the samples' structure and arrays stacked.
        """
        if not isinstance(inputs, collections.abc.Sequence):
            inputs = list(inputs)  # (a batch of plain strings comes back as given: a tuple from apply_batch)
        if len(inputs) == 0:
            raise ValueError("cannot collate an empty batch")
        return self._collate(inputs, "")

    def _collate(self, inputs, path):
        elem = inputs[0]
        for pos, x in enumerate(inputs):
            if not _compatible(elem, x):
                got, want = _escape(_describe_value(x)), _escape(_describe_value(elem))
                if path:
                    template = (
                        "cannot collate batch: element {} of the sample {{bad}} is {}, "
                        "but in the sample {{ref}} it is {}".format(_escape(path), got, want)
                    )
                else:
                    template = (
                        "cannot collate batch: the sample {{bad}} is {}, "
                        "but the sample {{ref}} is {}".format(got, want)
                    )
                missing_key = isinstance(elem, collections.abc.Mapping) and isinstance(x, collections.abc.Mapping)
                raise (CollateKeyError if missing_key else CollateError)(template, pos, 0)

        if isinstance(elem, np.ndarray):
            if _np_str_obj_array_pattern.search(elem.dtype.str) is not None:
                raise _unsupported(elem.dtype, path)
            return np.ascontiguousarray(np.stack(inputs))
        if isinstance(elem, (str, bytes, np.str_, np.bytes_)):
            # as MegEngine: the strings as gathered -- a tuple for a field of tuple/list samples (the
            # transposed samples), a list for a dict's values or a batch of plain strings
            return inputs
        if isinstance(elem, np.generic):
            return np.array(inputs)
        if isinstance(elem, float):
            return np.array(inputs, dtype=np.float64)
        if isinstance(elem, int):  # (bools too: all bools stay bool, a bool beside ints is 0 / 1, as np.array)
            return np.array(inputs)
        if isinstance(elem, collections.abc.Mapping):
            return {
                key: self._collate([d[key] for d in inputs], "{}[{!r}]".format(path, key))
                for key in elem
            }
        if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
            return type(elem)(
                *(
                    self._collate(samples, "{}.{}".format(path, name))
                    for name, samples in zip(elem._fields, zip(*inputs))
                )
            )
        if isinstance(elem, collections.abc.Sequence):
            return [
                self._collate(samples, "{}[{}]".format(path, i))
                for i, samples in enumerate(zip(*inputs))
            ]
        raise _unsupported(type(elem), path)
