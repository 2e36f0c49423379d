"""Every public function and class of the user-facing namespaces carries a ``>>>`` example in its own docstring
(STYLE.md rule 5: one-line summary, Args, Returns, a short runnable example). That the examples *run* is
``pytest --doctest-modules megxla`` (tests/test_upstream_style.py::test_every_docstring_example_of_the_package_runs);
this test makes sure there is one to run."""
import importlib
import inspect

# MegEngine's public module paths, as users import them
NAMESPACES = [
    "megxla", "megxla.functional", "megxla.functional.nn", "megxla.functional.vision", "megxla.functional.math",
    "megxla.functional.tensor", "megxla.functional.elemwise", "megxla.functional.loss", "megxla.functional.quantized",
    "megxla.functional.distributed", "megxla.functional.debug_param",
    "megxla.module", "megxla.module.init", "megxla.module.qat", "megxla.module.quantized",
    "megxla.optimizer", "megxla.autodiff", "megxla.jit", "megxla.amp", "megxla.quantization", "megxla.random",
    "megxla.data", "megxla.data.dataset", "megxla.data.sampler", "megxla.data.transform", "megxla.data.collator",
    "megxla.distributed", "megxla.hub", "megxla.utils.module_stats", "megxla.traced_module", "megxla.dtr",
    "megxla.logger", "megxla.serialization", "megxla.device", "megxla.config", "megxla.utils.network",
]

# Objects for which an example is truly impossible, each with the reason. Keep it empty if at all possible.
ALLOWED_WITHOUT_EXAMPLE = set()


def _public_objects():
    """``{qualified public name: object}`` of the functions and classes megxla defines, each object once (under the
    first namespace exporting it)."""
    seen, out = set(), {}
    for name in NAMESPACES:
        mod = importlib.import_module(name)
        names = getattr(mod, "__all__", None) or [n for n in dir(mod) if not n.startswith("_")]
        for attr in names:
            obj = getattr(mod, attr, None)
            if not (inspect.isfunction(obj) or inspect.isclass(obj)) or id(obj) in seen:
                continue
            if not getattr(obj, "__module__", "").startswith("megxla"):
                continue  # re-exported from NumPy, JAX or the standard library
            seen.add(id(obj))
            out[f"{name}.{attr}"] = obj
    return out


def test_the_scan_sees_the_public_surface():
    # a guard against a scan that passes by finding nothing (a renamed namespace, an emptied __all__)
    objects = _public_objects()
    assert len(objects) > 450, len(objects)
    for name in ("megxla.Tensor", "megxla.functional.conv2d", "megxla.module.qat.Conv2d",
                 "megxla.data.dataset.MNIST", "megxla.hub.load", "megxla.get_allocated_memory"):
        assert name in objects, name


def test_every_public_object_has_a_docstring_example():
    # the object's OWN docstring: doctest runs only that one (inspect.getdoc would lend a subclass its base's)
    missing = sorted(name for name, obj in _public_objects().items()
                     if ">>>" not in (obj.__doc__ or "") and name not in ALLOWED_WITHOUT_EXAMPLE)
    assert not missing, f"{len(missing)} public objects have no >>> example in their docstring:\n" + "\n".join(missing)


def test_the_allow_list_names_real_objects_still_without_an_example():
    objects = _public_objects()
    stale = sorted(n for n in ALLOWED_WITHOUT_EXAMPLE if n not in objects or ">>>" in (objects[n].__doc__ or ""))
    assert not stale, f"remove from ALLOWED_WITHOUT_EXAMPLE: {stale}"
