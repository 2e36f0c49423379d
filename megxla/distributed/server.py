"""The key-value store of a distributed run (MegEngine's ``Client`` of its "py server"), on JAX's distributed
runtime: the coordination service's key-value store, reached through this process's runtime client.

MegEngine's separate "mm server" (NCCL bootstrap) has no counterpart: JAX's runtime bootstraps gloo and NCCL
itself. ``Server`` is the coordination service (see :mod:`megxla.distributed._runtime`).
"""
from __future__ import annotations

import base64
import io
import pickle

from . import _runtime
from ._runtime import Server

__all__ = ["Server", "Client"]

_SAFE_GLOBALS = {
    ("builtins", n) for n in ("complex", "set", "frozenset", "slice", "range", "bytearray")
} | {
    ("numpy", "ndarray"), ("numpy", "dtype"),
    ("numpy._core.numeric", "_frombuffer"), ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "scalar"), ("numpy.core.multiarray", "scalar"),
}


class _SafeUnpickler(pickle.Unpickler):
    # Values are plain Python data and NumPy arrays: a value stored by another process cannot run code here.
    def find_class(self, module, name):
        if (module, name) in _SAFE_GLOBALS or module.startswith("numpy.dtypes"):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"distributed store: refusing to load {module}.{name}")


def _as_sent(obj):
    """``obj`` as MegEngine's store gives it back: its XML-RPC transport makes tuples -- a Tensor's ``shape``
    among them, here a tuple subclass the store would refuse to load -- lists, in lists and dicts alike.

    Example:
        >>> _as_sent({"shape": (2, 3), "rows": [(1,), 2]})
        {'shape': [2, 3], 'rows': [[1], 2]}
    """
    if isinstance(obj, (tuple, list)):
        return [_as_sent(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _as_sent(v) for k, v in obj.items()}
    return obj


def _dumps(obj) -> str:
    return base64.b64encode(pickle.dumps(_as_sent(obj), protocol=4)).decode("ascii")


def _loads(text):
    return _SafeUnpickler(io.BytesIO(base64.b64decode(text))).load()


class Client:
    r"""This process's handle on the run's key-value store (``dist.get_client()``).

    Values are Python data or NumPy arrays. ``user_get`` waits for a key that another rank has not set yet,
    up to ``MEGXLA_DIST_TIMEOUT`` seconds.

    Args:
        master_ip: accepted for MegEngine compatibility (the store is the one this process joined).
        port: accepted for MegEngine compatibility.
        timeout: seconds ``user_get`` waits; default ``MEGXLA_DIST_TIMEOUT``.

    Example:
        >>> c = dist.get_client()          # after init_process_group  # doctest: +SKIP
        >>> c.user_set("lr", 0.1)  # doctest: +SKIP
        >>> c.user_get("lr")  # doctest: +SKIP
        0.1
    """

    def __init__(self, master_ip=None, port=None, timeout=None):
        self.master_ip, self.port = master_ip, port
        self.timeout = _runtime.timeout() if timeout is None else float(timeout)

    @staticmethod
    def _key(key):
        if not isinstance(key, str):
            raise TypeError(f"distributed store: keys are str, got {type(key).__name__}")
        return "megxla/user/" + key

    def connect(self):
        """Check that this process has joined a run."""
        _runtime.client()
        return self

    def get_mm_server_port(self):
        """The coordination service's port."""
        return _runtime._st.key[0].rsplit(":", 1)[1] and int(_runtime._st.key[0].rsplit(":", 1)[1])

    def user_set(self, key, val):
        r"""Store ``val`` under ``key`` (overwriting).

        Args:
            key: a str.
            val: Python data or NumPy arrays (tuples come back as lists, as from MegEngine's store).
        """
        _runtime.client().key_value_set(self._key(key), _dumps(val), allow_overwrite=True)

    def user_get(self, key):
        r"""The value stored under ``key``, waiting for it up to the timeout.

        Args:
            key: a str.

        Returns:
            the value.
        """
        try:
            text = _runtime.client().blocking_key_value_get(self._key(key), int(self.timeout * 1000))
        except Exception as exc:
            if "DEADLINE" in str(exc).upper() or "timed out" in str(exc).lower():
                raise TimeoutError(f"distributed store: key {key!r} was not set within {self.timeout:g} s") from None
            raise
        return _loads(text)

    def user_pop(self, key):
        r"""Like :meth:`user_get`, then delete the key.

        Args:
            key: a str.

        Returns:
            the value.
        """
        val = self.user_get(key)
        _runtime.client().key_value_delete(self._key(key))
        return val

    def group_barrier(self, key, size):
        r"""Wait until the processes of a group reach the barrier ``key``.

        Args:
            key: the barrier's name (the same on every member, unique per use).
            size: accepted for MegEngine compatibility.
        """
        _runtime.client().wait_at_barrier("megxla/barrier/" + key, int(self.timeout * 1000))

    def bcast_val(self, val, key, size):
        r"""Rank 0 of the group passes ``val``, every member receives it.

        Args:
            val: the root's value (ignored elsewhere; pass None).
            key: a unique key for this broadcast.
            size: accepted for MegEngine compatibility.

        Returns:
            the root's value.
        """
        if val is not None:
            self.user_set("bcast/" + key, val)
            return val
        return self.user_get("bcast/" + key)
