"""``megengine.utils.network_node``: the node classes of a loaded graph (:class:`VarNode`, :class:`OpNode`).

MegEngine's module also holds one editable node class per operator type, for building and rewriting MegBrain
graphs by hand. megxla's graphs are what ``jit.trace`` records and dumps (a compiled XLA module with a
read-only view, see :mod:`megxla.utils.network`), so only the view's node classes live here: code that checks
``isinstance(x, VarNode)`` or walks a :class:`~megxla.utils.network.Network` imports them from this path.

Example:
    >>> import io, megxla as mge
    >>> from megxla.jit import trace
    >>> from megxla.utils.network import Network
    >>> f = trace(lambda x: x + 1, symbolic=True, capture_as_const=True)
    >>> _ = f(mge.Tensor([1.0]))
    >>> buf = io.BytesIO(); _ = f.dump(buf); _ = buf.seek(0)
    >>> all(isinstance(v, VarNode) for v in Network.load(buf).all_vars)
    True
"""
from ..core.tensor.megbrain_graph import OpNode, VarNode

__all__ = ["VarNode", "OpNode"]
