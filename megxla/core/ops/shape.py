"""Shape manipulation and creation primitives (all shapes and axes are static parameters)."""
import jax
import jax.numpy as jnp
import numpy as np

from .._op import Primitive
from .elemwise import broadcast_wide, gather_wide, promote_dtype

reshape = Primitive("reshape", lambda x, *, shape: jnp.reshape(x, shape))
transpose = Primitive("transpose", lambda x, *, perm: jnp.transpose(x, perm))
# (float16/bfloat16 through float32: the gradient, a sum over the broadcast axes, accumulates in float32)
broadcast_to = Primitive("broadcast_to", lambda x, *, shape: jnp.broadcast_to(broadcast_wide(x, shape), shape))
expand_dims = Primitive("expand_dims", lambda x, *, axis: jnp.expand_dims(x, axis))
squeeze = Primitive("squeeze", lambda x, *, axis: jnp.squeeze(x, axis))
def _promoted(xs):
    # MegEngine's Concat promotes mixed inputs as its elementwise ops do (float16 with int32 is float32, bool
    # with int32 is float32); jnp.concatenate would keep the "wider" NumPy type.
    dt = xs[0].dtype
    for x in xs[1:]:
        dt = promote_dtype(dt, x.dtype)
    return [x if x.dtype == dt else x.astype(dt) for x in xs]


concat = Primitive("concat", lambda *xs, axis: jnp.concatenate(_promoted(xs), axis=axis))
stack = Primitive("stack", lambda *xs, axis: jnp.stack(_promoted(xs), axis=axis))
split = Primitive("split", lambda x, *, indices, axis: tuple(jnp.split(x, indices, axis=axis)),
                  multiple_results=True)


def _meshgrid(*xs, indexing):
    n = len(xs)
    sizes, pos = [x.shape[0] for x in xs], list(range(n))
    if indexing == "xy" and n > 1:
        sizes[0], sizes[1] = sizes[1], sizes[0]
        pos[0], pos[1] = 1, 0
    return tuple(jnp.broadcast_to(jnp.reshape(x, [x.shape[0] if i == p else 1 for i in range(n)]), sizes)
                 for x, p in zip(xs, pos))


# One op with one output per input, as MegEngine's MeshGrid: when any output reaches a loss, every input of the
# op gets a gradient (zeros for those whose outputs do not), as MegEngine's autodiff gives an op's inputs.
meshgrid = Primitive("meshgrid", _meshgrid, multiple_results=True)
flip = Primitive("flip", lambda x, *, axis: jnp.flip(x, axis))
roll = Primitive("roll", lambda x, *, shift, axis: jnp.roll(x, shift, axis))
# (float16/bfloat16 through float32: the gradient, a sum over the copies, accumulates in float32)
tile = Primitive("tile", lambda x, *, reps: gather_wide(lambda t: jnp.tile(t, reps), x))
repeat = Primitive("repeat", lambda x, *, repeats, axis: gather_wide(lambda t: jnp.repeat(t, repeats, axis=axis), x))
# Identity that gradients do not flow through (Tensor.detach); GradManagers skip it when taping.
detach = Primitive("detach", jax.lax.stop_gradient)
copy = Primitive("copy", lambda x: jnp.array(x, copy=True))


def _device_put(x, *, device):
    # Inside one jax.jit (eager kernel or a compiled step) this is a placement of a new buffer, never an alias.
    return jax.device_put(x, device)


def _tensor_copy(x, *, dtype, device):
    # ``Tensor(t, dtype=, device=)`` / ``Parameter(t)``: a differentiable copy, as in MegEngine, where
    # ``Tensor(x * 2)`` inside a GradManager recording passes x's gradient on (issue 32: a CLIP step built its
    # token embeddings so). Only ``detach()``, ``copy.copy`` / ``deepcopy`` and host round trips cut it.
    x = jnp.array(x, dtype=dtype, copy=True)
    if device is not None:
        x = jax.device_put(x, device)
    return x


def _eager_transfer(device):
    # Eagerly a real transfer (and a new buffer, never an alias of the source): inside jax.jit a device_put to
    # another device than the computation's is not one (on a GPU machine ``x.to("cpu0")`` stayed on gpu0).
    return lambda x: jax.device_put(x, device, may_alias=False)


def _eager_tensor_copy(dtype, device):
    if device is None:
        return None  # the jitted copy
    return lambda x: jax.device_put(x if dtype is None else x.astype(dtype), device, may_alias=False)


# Tensor.to / F.copy(x, device): the device transfer as an op, so traces follow the moved value. ``device`` is a
# jax Device (hashable, static).
device_put = Primitive("device_put", _device_put, eager_kernel=_eager_transfer)
tensor_copy = Primitive("tensor_copy", _tensor_copy, eager_kernel=_eager_tensor_copy)


def _pad(x, *value, pad_width, mode, constant_value=None):
    # (a float tensor's fill value is an input, the cached 0-d tensor of that number: one kernel for every value;
    # ``constant_value``: the parameter form, an integer tensor's and earlier recordings')
    if mode == "constant":
        return jnp.pad(x, pad_width, mode="constant", constant_values=value[0] if value else constant_value)
    return jnp.pad(x, pad_width, mode={"replicate": "edge", "reflect": "reflect", "edge": "edge"}[mode])


pad = Primitive("pad", _pad)

full = Primitive("full", lambda *, shape, value, dtype: jnp.full(shape, value, dtype))

def _full_like(x, *value_in, value=None):
    # The value is an input where the front end gives one (the cached 0-d tensor of that Python number, in ``x``'s
    # dtype), so one kernel serves every value: a GAN's ``full_like(pred, uniform(0.8, 1.0))`` soft labels, drawn
    # every step, compiled a kernel a step. ``value``: the parameter form (constant fills: zeros_like, gradients).
    return jnp.full(x.shape, value_in[0] if value_in else value, x.dtype)


full_like = Primitive("full_like", _full_like)


def _arange(*, start, step, num, dtype):
    # MegEngine computes arange in float32 then casts; ``start + i * step`` keeps integer grids exact.
    if isinstance(start, int) and isinstance(step, int) and jnp.issubdtype(dtype, jnp.integer):
        return start + step * jnp.arange(num, dtype=dtype)
    return (start + step * jnp.arange(num, dtype=jnp.float32)).astype(dtype)


arange = Primitive("arange", _arange)


def _linspace(*, start, stop, num, dtype):
    # MegEngine's kernel (megdnn LinspaceImpl): value i is ``start + i * step`` in double, cast to float32 (then to
    # ``dtype``). jnp.linspace computes in float32, one ulp off in places: ``linspace(0, 1, W) * (W - 1)`` then
    # missed integers (16.999998), and a remap grid built that way took the other one-sided difference in its
    # gradient (DMVFN's first-step gradients 1.5e-3 from MegEngine's). A constant, computed on the host.
    step = (stop - start) / max(num - 1, 1)
    values = (start + np.arange(num, dtype=np.float64) * step).astype(np.float32)
    return jnp.asarray(values.astype(dtype))


linspace = Primitive("linspace", _linspace)
eye = Primitive("eye", lambda *, n, m, k, dtype: jnp.eye(n, m, k, dtype=dtype))
one_hot = Primitive("one_hot", lambda x, *, num_classes, dtype: jax.nn.one_hot(x, num_classes, dtype=dtype))

# ``autodiff.Function``'s node: identity on the forward's outputs (``xs[n_in:]``), taking the Function's inputs
# too so that GradManagers tape it (and a trace records it) as depending on them; its gradient is the user's
# ``backward``, which the GradManager calls instead of a vjp.
autodiff_function = Primitive("autodiff_function", lambda *xs, n_in: tuple(xs[n_in:]), multiple_results=True)
