"""``megengine.utils.dlpack``: exchange tensors with other frameworks (PyTorch, NumPy, CuPy...) through DLPack,
without a copy where the producer allows it (JAX's ``jax.dlpack`` does the work)."""
from __future__ import annotations

import ctypes

import jax

from ..core._tensor import Tensor

__all__ = ["to_dlpack", "from_dlpack"]


def to_dlpack(tensor: Tensor, stream=None):
    """A DLPack capsule of ``tensor`` (consumed once by e.g. ``torch.utils.dlpack.from_dlpack``).

    Args:
        tensor: the tensor to share.
        stream: the consumer's stream (GPU), or None.

    Returns:
        a ``PyCapsule`` named ``"dltensor"``.

    Example:
        >>> import numpy as np
        >>> cap = to_dlpack(mge.Tensor([1.0, 2.0]))
        >>> from_dlpack(cap).numpy()
        array([1., 2.], dtype=float32)
    """
    if stream is not None and stream != -1:
        return tensor.__dlpack__(stream)
    return tensor.__dlpack__()


class _Capsule:
    """A bare DLPack capsule (MegEngine's ``from_dlpack`` takes one) given the array protocol JAX reads: the
    device comes from the capsule's own DLTensor."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, stream=None, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        ptr = get(self.capsule, b"dltensor")  # raises ValueError for a used or foreign capsule
        # DLTensor: void* data, then DLDevice {int32 device_type, int32 device_id}
        device = (ctypes.c_int32 * 2).from_address(ptr + ctypes.sizeof(ctypes.c_void_p))
        return int(device[0]), int(device[1])


def from_dlpack(ext_tensor, stream=None) -> Tensor:
    """A Tensor sharing the buffer of ``ext_tensor``: any object with ``__dlpack__`` (a PyTorch tensor, a NumPy
    array) or a DLPack capsule.

    Args:
        ext_tensor: the producer's array or capsule.
        stream: accepted for MegEngine compatibility (JAX synchronises with the producer itself).

    Returns:
        the Tensor.

    Example:
        >>> import numpy as np
        >>> from_dlpack(np.arange(3, dtype="float32")).numpy()
        array([0., 1., 2.], dtype=float32)
    """
    if isinstance(stream, int) and stream < 0:
        raise ValueError(f"from_dlpack: stream must be >= 0, got {stream}")
    if not hasattr(ext_tensor, "__dlpack__"):
        if type(ext_tensor).__name__ != "PyCapsule":
            raise TypeError(f"from_dlpack: expected an array with __dlpack__ or a DLPack capsule, got "
                            f"{type(ext_tensor).__name__}")
        ext_tensor = _Capsule(ext_tensor)
    return Tensor(jax.dlpack.from_dlpack(ext_tensor))
