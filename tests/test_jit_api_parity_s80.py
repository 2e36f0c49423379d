"""``megengine.jit``'s user-facing API against MegEngine 1.13's (session 80's differential probes): ``trace``'s
constructor options, ``trace.dump``'s checks and result, ``is_tracing`` and the package's submodules.

Every expected value, exception type and message below is what MegEngine 1.13.0 printed for the same code.
"""
import io
import os
import subprocess
import sys

import numpy as np
import pytest

import megxla as mge
from megxla.jit import GraphOptimizationConfig, trace


def _x():
    return mge.Tensor(np.array([1.0, 2.0, 3.0], "float32"))


def test_options_may_be_positional():
    # MegEngine: trace(f, True) is trace(f, symbolic=True) ([6. 9. 12.] at every call); megxla raised
    # "trace.__new__() takes from 1 to 2 positional arguments but 3 were given"
    f = trace(lambda a, b: a * 2 + b, True)
    assert f.symbolic is True
    for _ in range(3):
        np.testing.assert_array_equal(f(_x(), _x() + 3).numpy(), [6.0, 9.0, 12.0])


def test_unknown_option_is_a_type_error():
    # MegEngine: TypeError "trace.__init__() got an unexpected keyword argument 'bogus'", called directly or as
    # @trace(bogus=1); megxla ignored it (a misspelt option did nothing)
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        trace(lambda a: a, bogus=1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        trace(bogus=1)(lambda a: a)


@pytest.mark.parametrize("option, message", [
    ("sublinear_memory_config", "'int' object has no attribute 'lb_memory_mb'"),
    ("dtr_config", "'int' object has no attribute 'eviction_threshold'"),
    ("graph_opt_config", "'int' object has no attribute 'jit_fuse_dimshuffle'"),
])
def test_a_wrong_config_object_raises_megengine_s_attribute_error(option, message):
    # MegEngine's __init__ reads the config's fields; megxla accepted any object (remat turned on silently)
    with pytest.raises(AttributeError, match=message):
        trace(lambda a: a, **{option: 1})


def test_an_invalid_fusion_switch_is_megengine_s_key_error():
    # MegEngine maps None / False / True; another value is its KeyError (here 3)
    cfg = GraphOptimizationConfig()
    cfg.jit_fuse_reduce = 3
    with pytest.raises(KeyError):
        trace(lambda a: a, graph_opt_config=cfg)


def test_dump_requires_capture_as_const():
    # MegEngine: ValueError "you must specify capture_as_const=True at __init__ to use dump"; megxla dumped
    for f in (trace(lambda a: a * 2), trace(lambda a: a * 2, symbolic=True)):
        f(_x())
        with pytest.raises(ValueError, match="^you must specify capture_as_const=True at __init__ to use dump$"):
            f.dump(io.BytesIO())


def test_dump_before_any_call_is_megengine_s_value_error():
    # MegEngine: ValueError "the traced function without return values cannot be dumped, ..."; megxla raised a
    # RuntimeError
    f = trace(lambda a: a * 2, capture_as_const=True)
    with pytest.raises(ValueError, match="^the traced function without return values cannot be dumped"):
        f.dump(io.BytesIO())


def test_dump_refuses_unknown_options_unless_not_optimizing():
    # MegEngine: ValueError "unknown options: ['bogus_option']" (its optimize_for_inference's), nothing written;
    # with optimize_for_inference=False the options are not looked at; megxla ignored them
    f = trace(lambda a: a * 3, capture_as_const=True)
    f(_x())
    buf = io.BytesIO()
    with pytest.raises(ValueError, match=r"^unknown options: \['bogus_option'\]$"):
        f.dump(buf, bogus_option=True)
    assert buf.getvalue() == b""
    assert f.dump(io.BytesIO(), optimize_for_inference=False, bogus=1).outputs
    assert f.dump(io.BytesIO(), enable_nchw44=True, enable_fuse_grain=False, keep_var_name=2, no_assert=True,
                  dump_format="FBS", model_version=2, enable_metadata=False).outputs


def test_dump_inputs_are_sorted_and_a_none_name_is_the_default():
    # MegEngine lists the inputs' names sorted: ['a', 'm', 'z'] for arg_names=["z", "a", "m"], ['b', 'c', 'z'] for
    # arg_names=["z"] and keyword tensors c, b; megxla listed them in argument order (['z', 'a', 'm']).
    # arg_names=[None, "b"]: MegEngine leaves the first unnamed (['b', 'h2d[0]']); megxla named an input None
    x = _x()
    f = trace(lambda p, q, r: p + q + r, capture_as_const=True)
    f(x, x + 1, x * 2)
    assert f.dump(io.BytesIO(), arg_names=["z", "a", "m"]).inputs == ["a", "m", "z"]
    g = trace(lambda p, b=None, c=None: p + b + c, capture_as_const=True)
    g(x, c=x + 1, b=x * 2)
    assert g.dump(io.BytesIO(), arg_names=["z"]).inputs == ["b", "c", "z"]
    h = trace(lambda a, b: a * 2 + b, capture_as_const=True)
    h(x, x + 1)
    assert h.dump(io.BytesIO(), arg_names=[None, "b"]).inputs == ["arg_0", "b"]


def test_dump_append_adds_to_the_file(tmp_path):
    # MegEngine opens a path "ab" with append=True: the file holds both dumps; megxla overwrote it
    f = trace(lambda a: a * 3, capture_as_const=True)
    f(_x())
    path = str(tmp_path / "f.mge")
    f.dump(path)
    n = os.path.getsize(path)
    f.dump(path, append=True)
    assert os.path.getsize(path) == 2 * n
    f.dump(path)
    assert os.path.getsize(path) == n


def test_dump_to_an_int_is_megengine_s_attribute_error_and_closes_no_descriptor():
    # MegEngine: AttributeError "'int' object has no attribute 'write'"; megxla took the int for a file
    # descriptor: wrote the dump there and closed it
    f = trace(lambda a: a * 3, capture_as_const=True)
    f(_x())
    r, w = os.pipe()
    try:
        with pytest.raises(AttributeError, match="^'int' object has no attribute 'write'$"):
            f.dump(w)
        os.fstat(w)  # still open
    finally:
        os.close(r)
        os.close(w)


def test_capture_as_const_non_tensor_argument_is_an_assertion_error():
    # MegEngine asserts: AssertionError "Only support tensor type args when capture_as_const is enabled", also
    # for record_only=True (it captures as const); megxla raised a TypeError (still one), and not for record_only
    x = _x()
    with pytest.raises(AssertionError, match="^Only support tensor type args when capture_as_const is enabled$"):
        trace(lambda a, n: a * n, capture_as_const=True)(x, 2)
    with pytest.raises(AssertionError, match="^Only support tensor type args when capture_as_const is enabled$"):
        trace(lambda a, n: a * n, record_only=True)(x, 2)


@pytest.mark.parametrize("symbolic", [False, True])
def test_is_tracing(symbolic):
    # MegEngine: is_tracing() is True in the body, False in exclude_from_trace blocks (nested too) and outside:
    # [True, False, False] at each call; megxla's jit.tracing had no is_tracing
    from megxla.jit import exclude_from_trace
    from megxla.jit.tracing import is_tracing
    seen = []

    def body(x):
        seen.append(is_tracing())
        if not symbolic:
            with exclude_from_trace():
                seen.append(is_tracing())
                with exclude_from_trace():
                    seen.append(is_tracing())
        return x + 1

    f = trace(body, symbolic=symbolic)
    for _ in range(3):
        f(_x())
    # (MegEngine's symbolic=True trace runs the body at every call: [True, True])
    assert seen == ([True, False, False] * 3 if not symbolic else [True] * len(seen)) and seen
    assert is_tracing() is False


def test_jit_submodules_are_attributes_of_the_package():
    # MegEngine's jit/__init__ imports them: after `import megengine.jit as jit`, jit.dtr_config.DTRConfig etc.
    # resolve; megxla's raised AttributeError (fresh interpreter: another test may have imported them)
    code = ("import megxla.jit as jit; print(jit.dtr_config.DTRConfig is jit.DTRConfig, "
            "jit.sublinear_memory_config.SublinearMemoryConfig is jit.SublinearMemoryConfig, "
            "jit.graph_opt_config.GraphOptimizationConfig is jit.GraphOptimizationConfig, "
            "jit.partial_tracing.partial_trace is jit.partial_trace, jit.xla_backend.xla_trace is jit.xla_trace)")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root,
                         env=dict(os.environ, PYTHONPATH=root, JAX_PLATFORMS="cpu"), timeout=300)
    assert out.stdout.split() == ["True"] * 5, out.stderr[-2000:]


# ---- the configuration objects (megxla/jit/config.py; expected: MegEngine 1.13's output) ----
from megxla.jit import DTRConfig, GraphOptimizationConfig, SublinearMemoryConfig  # noqa: E402


@pytest.mark.parametrize("kw, message", [
    (dict(thresh_nr_try=-1), "thresh_nr_try must be greater or equal to zero"),
    (dict(genetic_nr_iter=-1), "genetic_nr_iter must be greater or equal to zero"),
    (dict(genetic_pool_size=-1), "genetic_pool_size must be greater or equal to zero"),
    (dict(num_worker=0), "num_worker must be greater or equal to one")])
def test_sublinear_config_checks(kw, message):
    with pytest.raises(AssertionError, match=message):
        SublinearMemoryConfig(**kw)


@pytest.mark.parametrize("args, message", [
    ((5, -1), "evictee_minimum_size must be greater or equal to zero"),
    ((5, 1, -1), "recomp_memory_factor must be greater or equal to zero"),
    ((5, 1, 1, -1), "recomp_time_factor must be greater or equal to zero")])
def test_dtr_config_checks(args, message):
    with pytest.raises(AssertionError, match=message):
        DTRConfig(*args)


def test_configs_are_plain_objects():
    # MegEngine: compared by identity, hashable, default object repr
    assert SublinearMemoryConfig() != SublinearMemoryConfig() and DTRConfig(5) != DTRConfig(5)
    hash(SublinearMemoryConfig()), hash(DTRConfig(5))
    assert repr(DTRConfig(5)).startswith("<") and " object at 0x" in repr(SublinearMemoryConfig())


def test_graph_opt_config_repr():
    g = GraphOptimizationConfig()
    assert repr(g) == str(g) == "GraphOptimizationConfig { jit_fuse_dimshuffle = UNSET, jit_fuse_reduce = UNSET }"
    g.jit_fuse_dimshuffle, g.jit_fuse_reduce = True, False
    assert repr(g) == "GraphOptimizationConfig { jit_fuse_dimshuffle = ON, jit_fuse_reduce = OFF }"
    g.jit_fuse_reduce = 3
    with pytest.raises(KeyError):
        repr(g)
