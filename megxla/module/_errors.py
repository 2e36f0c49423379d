"""Exception types of the layers' argument checks."""

__all__ = ["LayerArgumentError", "LayerModeError"]


class LayerArgumentError(ValueError, AssertionError):
    """A layer argument MegEngine 1.13 rejects with an ``assert`` (``AssertionError`` there); still a
    ``ValueError``, as megxla raised before, so either ``except`` catches it.

    Example:
        >>> try:
        ...     M.Conv2d(2, 2, 0)
        ... except AssertionError as e:
        ...     print(str(e))
        invalid value: (0, 0) (kernel_size must be positive)
    """


class LayerModeError(ValueError, RuntimeError):
    """A mode name MegEngine 1.13's op binding cannot cast (a ``RuntimeError`` there, at the first call); megxla
    refuses it when the layer is built.

    Example:
        >>> try:
        ...     M.Elemwise("foo")
        ... except RuntimeError as e:
        ...     print(type(e).__name__)
        LayerModeError
    """
