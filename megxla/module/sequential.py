"""A container that chains modules."""
from collections import OrderedDict

from .module import Module

__all__ = ["Sequential"]


class Sequential(Module):
    r"""Chains modules: the output of each is the input of the next.

    Modules are given positionally (named ``"0"``, ``"1"``, ...) or as one ``OrderedDict`` of
    ``{name: module}``; they become attributes, so parameter names read like ``"0.weight"``.
    Supports ``len``, iteration, indexing (``seq[1]``), slicing (a new Sequential sharing the layers),
    item assignment and deletion.

    Args:
        *args: modules, or a single OrderedDict of named modules.

    Example:
        >>> net = M.Sequential(M.Linear(4, 8), M.ReLU(), M.Linear(8, 2))
        >>> net(mge.Tensor(np.ones((3, 4), "float32"))).shape
        (3, 2)
        >>> len(net), type(net[1]).__name__
        (3, 'ReLU')
    """

    def __init__(self, *args, **kwargs):
        super().__init__(**kwargs)
        self.layer_keys = []
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for key, module in args[0].items():
                setattr(self, key, module)
                self.layer_keys.append(key)
        else:
            for idx, module in enumerate(args):
                # String keys: attribute names, and what MegEngine checkpoints use.
                setattr(self, str(idx), module)
                self.layer_keys.append(str(idx))

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return self.__class__(OrderedDict(zip(self.layer_keys[idx], self.layer_values[idx])))
        return getattr(self, self.layer_keys[idx])

    def __setitem__(self, idx, module):
        setattr(self, self.layer_keys[idx], module)

    def __delitem__(self, idx):
        if isinstance(idx, slice):
            for key in self.layer_keys[idx]:
                delattr(self, key)
            del self.layer_keys[idx]
        else:
            delattr(self, self.layer_keys[idx])
            del self.layer_keys[idx]

    def __len__(self):
        return len(self.layer_keys)

    def __iter__(self):
        return iter(self.layer_values)

    @property
    def layer_values(self):
        """The layers, in order."""
        return [getattr(self, key) for key in self.layer_keys]

    def forward(self, inp):
        """Apply each layer in turn."""
        for layer in self.layer_values:
            inp = layer(inp)
        return inp
