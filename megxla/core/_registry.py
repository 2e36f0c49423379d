"""Small registries that the layers above ``core`` fill, so that ``core`` (and ``jit``) never import them.

Layers only look down (``core < functional, random < autodiff, module, optimizer < jit, amp, distributed,
data``). Where a lower layer must reach something an upper layer owns, the upper layer registers it here at
import time:

* **implicit state** (:func:`register_implicit_state`): Tensors a step reads and rebinds without their being
  reachable from its arguments -- the global RNG key. A tracer swaps them per traced function.
* **state walkers** (:func:`register_state_walker`): for a class (``Module``, ``Optimizer``, ``GradScaler``)
  a function listing the ``(name, Tensor)`` state of an instance, so a tracer can find every tensor a step
  may read or write without knowing the class.
* **structure epoch** (:func:`bump_epoch` / :func:`epoch`): a counter that every change of state *structure*
  (a new optimizer slot or param group, a loaded state dict, a module attribute rebound) increments, so a
  cached plan can check one integer instead of re-walking all state.
* **gradient gates** (:func:`set_grad_gate` / :func:`grad_gate`): a 0-d bool Tensor attached to gradient
  values (by ``GradScaler`` inside a compiled step) that tells the optimizer to skip its update in-graph.
* **callback runners** (:func:`register_callback_runner` / :func:`callback_runners`): functions that may run a
  GradManager's callbacks of one tensor themselves (``jit.partial_trace`` records them to compile them in).
* **context** (:func:`register_context` / :func:`context_key`): global switches the ops a body records depend on
  without their being arguments (``amp.autocast``, the float32 matmul precision); a traced function keys its
  recordings by them, so a call under another context records again instead of running the old executable.
* **kernel compiler** (:func:`register_kernel_compiler` / :func:`kernel_compiler`): compiles eager kernels ahead on
  worker threads (``jit._kernels_ahead``), for a GradManager's eager backward walk, whose gradient ops are known
  before it runs them.
* **graph builder** (:func:`register_graph_builder`, read by ``apply`` from :data:`GRAPH_BUILDER`; :func:`graph_of`):
  the function that finds the hand-built graph (``utils.network.Network``) an op's inputs are variables of, so
  the graph records what is applied to them.

Example:
    >>> from megxla.core import _registry
    >>> e = _registry.epoch(); _registry.bump_epoch(); _registry.epoch() == e + 1
    True
"""
from __future__ import annotations

__all__ = ["register_implicit_state", "implicit_state", "register_state_walker", "state_walker",
           "bump_epoch", "epoch", "set_grad_gate", "grad_gate", "register_callback_runner", "callback_runners",
           "register_context", "context_key", "register_kernel_compiler", "kernel_compiler", "register_graph_builder",
           "GRAPH_BUILDER", "graph_of"]

# ---- implicit state ---------------------------------------------------------------------------------------
_IMPLICIT: dict = {}


def register_implicit_state(name: str, get, set):
    """Register implicit state ``name``: ``get()`` returns its current Tensor, ``set(t)`` replaces it.

    Args:
        name: unique name, e.g. ``"rng_key"``.
        get: function of no arguments returning the Tensor.
        set: function taking the Tensor that becomes the state.

    Example:
        >>> holder = {}
        >>> register_implicit_state("doc_example", lambda: holder.get("t"), lambda t: holder.update(t=t))
        >>> "doc_example" in implicit_state()
        True
    """
    _IMPLICIT[name] = (get, set)


def implicit_state() -> dict:
    """``{name: (get, set)}`` of the registered implicit state (a copy).

    Example:
        >>> "rng_key" in implicit_state()  # registered by megxla.random
        True
    """
    return dict(_IMPLICIT)


# ---- state walkers ------------------------------------------------------------------------------------------
_WALKERS: dict = {}


def register_state_walker(cls: type, walker):
    """Register ``walker(obj) -> iterable of (name, Tensor)`` for instances of ``cls`` (and subclasses).

    Example:
        >>> class Holder:
        ...     pass
        >>> register_state_walker(Holder, lambda h: [])
        >>> state_walker(Holder())(Holder())
        []
    """
    _WALKERS[cls] = walker


def state_walker(obj):
    """The walker registered for ``type(obj)`` or its nearest registered base class, or None.

    Example:
        >>> state_walker(3) is None
        True
    """
    for cls in type(obj).__mro__:
        w = _WALKERS.get(cls)
        if w is not None:
            return w
    return None


# ---- structure epoch -----------------------------------------------------------------------------------------
_epoch = [0]


def bump_epoch():
    """Record that some state structure changed (invalidates plans cached against the previous epoch).

    Example:
        >>> bump_epoch()
    """
    _epoch[0] += 1


def epoch() -> int:
    """The current structure epoch.

    Example:
        >>> isinstance(epoch(), int)
        True
    """
    return _epoch[0]


# ---- gradient gates --------------------------------------------------------------------------------------------
# value id of a gradient -> 0-d bool Tensor. Keyed by value id: rebinding the gradient (a new value) drops the
# association by itself; bounded, since only the gradients of the latest steps are ever looked up.
_GATES: dict = {}


def set_grad_gate(grad, gate):
    """Attach the skip flag ``gate`` to the current value of the gradient Tensor ``grad``.

    Example:
        >>> import megxla as mge
        >>> g = mge.Tensor([1.0]); flag = mge.Tensor(False)
        >>> set_grad_gate(g, flag); grad_gate(g) is flag
        True
    """
    if len(_GATES) > 4096:
        _GATES.clear()
    _GATES[grad._vid] = gate


def grad_gate(grad):
    """The skip flag attached to ``grad``'s current value, or None (also for ``grad=None``).

    Example:
        >>> grad_gate(None) is None
        True
    """
    if grad is None or not _GATES:
        return None
    return _GATES.get(grad._vid)


# ---- GradManager callback runners ------------------------------------------------------------------------------
_CALLBACK_RUNNERS: list = []


def register_callback_runner(runner):
    """Register ``runner(tensor, grad, callbacks) -> new grad or None``: ``GradManager.backward`` asks each
    runner before calling an attached tensor's callbacks itself (None: not this runner's tensor).

    Example:
        >>> register_callback_runner(lambda t, g, cbs: None); len(callback_runners()) > 0
        True
    """
    if runner not in _CALLBACK_RUNNERS:
        _CALLBACK_RUNNERS.append(runner)


def callback_runners() -> list:
    """The registered callback runners, in registration order.

    Example:
        >>> isinstance(callback_runners(), list)
        True
    """
    return _CALLBACK_RUNNERS


# ---- context a recording depends on ----------------------------------------------------------------------------
_CONTEXT: list = []


def register_context(name: str, get):
    """Register ``get() -> hashable``, a global switch that decides which ops code records (``amp.autocast``).

    Example:
        >>> register_context("example", lambda: 1); context_key()[-1]
        1
    """
    for i, (n, _) in enumerate(_CONTEXT):
        if n == name:
            _CONTEXT[i] = (name, get)
            return
    _CONTEXT.append((name, get))


def context_key() -> tuple:
    """The current value of every registered context switch, in registration order.

    Example:
        >>> isinstance(context_key(), tuple)
        True
    """
    return tuple(get() for _, get in _CONTEXT)


# ---- eager kernels compiled ahead ------------------------------------------------------------------------------
_KERNEL_COMPILER: list = [None]


def register_kernel_compiler(compile_kernels):
    """Register ``compile_kernels(jobs, guessed=False) -> list of futures (or None) | None``: start compiling the
    eager kernels ``jobs`` ``[(op, input types ((shape, dtype, weak_type), ...))]`` on worker threads
    (``guessed``: while the calling thread compiles kernels of its own).

    Example:
        >>> saved = kernel_compiler(); register_kernel_compiler(None); kernel_compiler() is None
        True
        >>> register_kernel_compiler(saved)
    """
    _KERNEL_COMPILER[0] = compile_kernels


def kernel_compiler():
    """The registered eager-kernel compiler (``jit`` registers one at import), or None.

    Example:
        >>> compile_kernels = kernel_compiler()
        >>> compile_kernels is None or compile_kernels([]) is None  # (no kernels: nothing started)
        True
    """
    return _KERNEL_COMPILER[0]


# ---- hand-built graphs ------------------------------------------------------------------------------------------
# NOTE: a list cell that ``apply`` reads on every call (one index and a None test): it stays None until the first
# variable of a hand-built graph exists, so eager code that never builds one pays nothing else.
GRAPH_BUILDER: list = [None]


def register_graph_builder(find):
    """Register ``find(op, inputs) -> graph | None``: the hand-built graph whose variables are among ``inputs``
    (None when none is; an error naming the op when they belong to two graphs), which ``apply`` calls before
    computing ``op`` and whose ``_applied(op, inputs, outputs)`` it calls after, to record the operator and make
    the outputs variables of that graph. ``utils.network`` registers it when it makes its first variable.

    Example:
        >>> saved = GRAPH_BUILDER[0]; register_graph_builder(None); GRAPH_BUILDER[0] is None
        True
        >>> register_graph_builder(saved)
    """
    GRAPH_BUILDER[0] = find


def graph_of(what, *tensors):
    """The hand-built graph whose variables are among ``tensors`` (None when none is; ``what`` names the caller
    in the error for two graphs). A function that computes part of its result on the host (not by ops) asks, so
    that for graph variables it computes by ops, which the graph records; the graph's ``_constant(tensor)`` makes
    a Tensor a constant variable of it.

    Example:
        >>> from megxla import Tensor
        >>> graph_of("example", Tensor([1.0])) is None
        True
    """
    find = GRAPH_BUILDER[0]
    return None if find is None else find(what, tensors)
