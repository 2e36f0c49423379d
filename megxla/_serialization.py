"""``save`` / ``load``: pickle with Tensors stored as NumPy arrays (portable across devices and machines)."""
import pickle


def save(obj, f, pickle_module=pickle, pickle_protocol=4):
    """Save ``obj`` (a state dict, Tensor, or any picklable) to a path or file object.

    Example:
        >>> save(model.state_dict(), "model.pkl")
    """
    if isinstance(f, (str, bytes)) or hasattr(f, "__fspath__"):
        with open(f, "wb") as fh:
            return pickle_module.dump(obj, fh, protocol=pickle_protocol)
    return pickle_module.dump(obj, f, protocol=pickle_protocol)


def load(f, map_location=None, pickle_module=pickle):
    """Load an object saved by :func:`save`; ``map_location`` (a device name) moves Tensors there.

    Example:
        >>> model.load_state_dict(load("model.pkl"))
    """
    if isinstance(f, (str, bytes)) or hasattr(f, "__fspath__"):
        with open(f, "rb") as fh:
            obj = pickle_module.load(fh)
    else:
        obj = pickle_module.load(f)
    if map_location is not None:
        from .core._tensor import Tensor
        obj = _map(obj, lambda t: t.to(map_location) if isinstance(t, Tensor) else t)
    return obj


def _map(obj, fn):
    if isinstance(obj, dict):
        return type(obj)((k, _map(v, fn)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map(v, fn) for v in obj)
    return fn(obj)
