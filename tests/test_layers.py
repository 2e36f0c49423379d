"""Layers only look down: an ast scan of every import in megxla (module-level and deferred ones alike).

    base (logger, _device) < core, config < functional, random < autodiff, module, optimizer, quantization
        < jit, amp, distributed, data, hub, dtr, serialization < the package root and the rest (aliases, ...)

A module may import its own layer and any lower one. ``core`` imports nothing above itself: what it needs from
above is registered into it (``core._registry``, the Tensor methods that ``functional`` installs).
"""
import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "megxla"

LAYERS = {
    "logger": 0, "_device": 0,
    "core": 1, "config": 1,  # megengine.config: the settings core reads (config sets them in core)
    "functional": 2, "random": 2,
    "autodiff": 3, "module": 3, "optimizer": 3, "quantization": 3,
    "jit": 4, "amp": 4, "distributed": 4, "data": 4, "hub": 4, "dtr": 4, "_serialization": 4,
}
TOP = 9  # the package root and modules outside the layers (serialization, quantization, hub, aliases...)

# megengine.functional.distributed is the distributed layer's functional API at MegEngine's path: it builds on
# megxla.distributed (groups, the collective ops) and is not imported by megxla.functional itself.
MODULE_LAYER = {"functional.distributed": 4,
                # megengine.core.autodiff.grad.Grad: MegEngine's path, built on megxla.autodiff's tape; core
                # never imports it
                "core.autodiff": 3,
                # megengine.core._imperative_rt.ops: MegEngine's path for its op descriptors and the global RNG seed
                # functions (megxla.random's); core never imports it
                "core._imperative_rt.ops": 2,
                # megengine.core._imperative_rt.imperative.make_backward_graph: built on Grad; core never imports it
                "core._imperative_rt.imperative": 3}

# jit should import only core (it reaches Module/Optimizer state and the RNG key through core._registry); these
# are its imports that predate the registries. NOTE: the jit owner removes entries as jit adopts the registries;
# a new upward import anywhere fails the test.
JIT_ONLY_CORE_EXCEPTIONS = {
    ("jit._state", "module"),
    ("jit.tracing", "random._rng"),
    ("jit.tracing", "random"),
    ("jit.tracing", "dtr"),
}


# Upward imports that are known and owned elsewhere; each names why. Remove an entry when its import goes.
KNOWN_EXCEPTIONS = {
    # SyncBatchNorm / F.sync_batch_norm reach the collectives lazily, only when distributed (distributed's owner:
    # a registry in core, filled by megxla.distributed, would remove these).
    ("functional.nn", "functional.distributed"),
    ("module.batchnorm", "functional.distributed"),
    # observers synchronise statistics across processes lazily, only when distributed (quantization's owner)
    ("quantization.observer", "distributed"),
    ("quantization.observer", "functional.distributed"),
}


def _layer(mod):
    """Layer of a dotted module name relative to megxla ("" is the package root)."""
    if mod in MODULE_LAYER:
        return MODULE_LAYER[mod]
    for prefix, layer in MODULE_LAYER.items():
        if mod.startswith(prefix + "."):
            return layer
    head = mod.split(".")[0] if mod else ""
    return LAYERS.get(head, TOP)


def _modules():
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        yield ".".join(parts), is_pkg, path


def _imports(mod, is_pkg, path):
    """Dotted megxla-relative names of every megxla module ``path`` imports (``from x import y`` counts ``x``
    and, where ``x.y`` is a module, ``x.y``)."""
    tree = ast.parse(path.read_text(), str(path))
    package = mod.split(".") if is_pkg else mod.split(".")[:-1]
    if mod == "":
        package = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "megxla" or alias.name.startswith("megxla."):
                    yield alias.name[len("megxla."):] if "." in alias.name else "", node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)] if node.level > 1 else list(package)
                target = base + (node.module.split(".") if node.module else [])
            elif node.module and (node.module == "megxla" or node.module.startswith("megxla.")):
                target = node.module.split(".")[1:]
            else:
                continue
            name = ".".join(target)
            if name:  # `from .. import functional` imports the submodule, not the package root's contents
                yield name, node.lineno
            for alias in node.names:
                sub = ROOT.joinpath(*target, alias.name)
                if sub.with_suffix(".py").exists() or (sub / "__init__.py").exists():
                    yield ".".join(target + [alias.name]), node.lineno


def _violations():
    out = []
    for mod, is_pkg, path in _modules():
        src = _layer(mod)
        if src == TOP:
            continue
        for target, line in _imports(mod, is_pkg, path):
            dst = _layer(target)
            if dst > src and (mod, target) not in KNOWN_EXCEPTIONS:
                out.append((mod, target, f"megxla/{path.relative_to(ROOT)}:{line}: layer {mod or 'megxla'} "
                                         f"({src}) imports {target or 'megxla'} ({dst})"))
            elif mod.startswith("jit") and target.split(".")[0] not in ("core", "jit", "") and \
                    (mod, target) not in JIT_ONLY_CORE_EXCEPTIONS:
                out.append((mod, target, f"megxla/{path.relative_to(ROOT)}:{line}: jit imports {target} "
                                         f"(jit imports only core; use core._registry)"))
    return out


def test_layers_only_import_downwards():
    bad = [msg for _, _, msg in _violations()]
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_core_imports_nothing_above_itself():
    for mod, is_pkg, path in _modules():
        if _layer(mod) == 1:
            for target, line in _imports(mod, is_pkg, path):
                assert _layer(target) <= 1, f"megxla/{path.relative_to(ROOT)}:{line} imports {target}"


@pytest.mark.parametrize("src,dst,bad", [
    ("core._tensor", "functional", True), ("functional.nn", "amp._state", True), ("optimizer.sgd", "jit", True),
    ("functional.nn", "random", False), ("module.init", "random", False), ("jit.tracing", "core._op", False),
])
def test_layer_rule_itself(src, dst, bad):
    # the rule the scan applies, on known pairs (so that a broken scan cannot pass by finding nothing)
    assert (_layer(dst) > _layer(src)) == bad


def test_scan_finds_imports():
    found = dict(((mod, t), True) for mod, is_pkg, path in _modules() for t, _ in _imports(mod, is_pkg, path))
    assert ("optimizer.optimizer", "core._tensor") in found
    assert ("module.batchnorm", "functional.nn") in found
    assert ("functional", "functional.elemwise") in found


def test_known_jit_exceptions_are_still_needed():
    # an exception that no import uses any more must be deleted from the list
    jit_imports = {(mod, t) for mod, is_pkg, path in _modules() if mod.startswith("jit")
                   for t, _ in _imports(mod, is_pkg, path)}
    stale = JIT_ONLY_CORE_EXCEPTIONS - jit_imports
    assert not stale, f"delete these from JIT_ONLY_CORE_EXCEPTIONS: {sorted(stale)}"


def test_upper_layers_fill_the_core_registries():
    import megxla as mge
    import megxla.module as M
    import megxla.optimizer as optim
    from megxla.amp import GradScaler
    from megxla.core import _registry
    from megxla.random import _rng

    get, set_ = _registry.implicit_state()["rng_key"]
    key = get()
    assert key is _rng._global._state
    set_(mge.Tensor(key.numpy()))
    assert _rng._global._state is not key
    set_(key)
    model = M.Sequential(M.Linear(2, 3), M.BatchNorm1d(3))
    names = [k for k, _ in _registry.state_walker(model)(model)]
    assert {"0.weight", "1.running_mean"} <= set(names)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    e = _registry.epoch()
    opt.add_param_group({"params": [mge.Parameter([1.0])]})  # a structure change bumps the epoch
    assert _registry.epoch() > e
    walked = _registry.state_walker(opt)(opt)
    assert sum(k.endswith("momentum_buffer") for k, _ in walked) == 5
    scaler = GradScaler()
    assert [k for k, _ in _registry.state_walker(scaler)(scaler)] == ["scale", "growth_tracker", "found"]
