"""Auto-jit: constants a project computes at its first step and keeps (RIFE's warp grid in a dict, anchors cached
by feature size, a positional table made on first use).

Such a project's first cluster computes the constant, where every later step's cluster takes it as an input: the
first cluster never recurs, and a large one compiled at its first sight was compiled again at the second (RIFE, a
1,725-op step: 19 s twice on 2 cores). So at a site's first compiled cluster, the ops computing a result that
outlives it from no array input (Python numbers' 0-d tensors, or nothing: ``linspace``, ``full``) -- or only from
arrays the setup made and nothing changed since (a module's buffers: RoPE's ``inv_freq``) -- are taken out and
run op by op before the rest -- eager's own kernels, so the values are eager's -- and the rest is compiled in a
canonical numbering: inputs numbered at their first use in op order, then each op's results. The site's second
cluster, taken apart and numbered the same way, is the same program when the constant was kept: the first
executable serves it, and every later step.
"""
from __future__ import annotations

import weakref

__all__ = ["constant_ops", "Canonical", "kept_inputs"]


def constant_ops(ops, avals, in_ids, out_ids, setup_ids=()):
    """Positions of the ops computing a result in ``out_ids`` (an array: not 0-d) from no array input -- inputs of
    the cluster that are 0-d, or none -- but those in ``setup_ids`` (made in the setup and unchanged since: a
    module's buffers), with the ops of the same kind it needs; empty where there is none.

    Example:
        >>> a, s = ((2, 3), "float32", False), ((), "float32", True)
        >>> ops = [("full", (), (1,)), ("mul", (1, 0), (2,)), ("add", (2, 3), (4,))]
        >>> constant_ops(ops, [s, a, a, a, a], [0, 3], [2, 4])   # (op 2 reads input 3, an array)
        [0, 1]
        >>> constant_ops(ops, [s, a, a, a, a], [0, 3], [4])      # (the constant does not outlive the cluster)
        []
        >>> constant_ops(ops, [s, a, a, a, a], [0, 3], [2, 4], [3])  # (input 3 a module's buffer)
        [0, 1, 2]
    """
    const = {i for i in in_ids if not avals[i][0]}
    const.update(setup_ids)
    made_by = {}
    for k, (_, ins, outs) in enumerate(ops):
        if all(i in const for i in ins):
            const.update(outs)
            for o in outs:
                made_by[o] = k
    need = [o for o in out_ids if o in made_by and avals[o][0]]
    cone = set()
    while need:
        k = made_by.get(need.pop())
        if k is not None and k not in cone:
            cone.add(k)
            need.extend(ops[k][1])
    return sorted(cone)


class Canonical:
    """The cluster ``ops`` without the ops at positions ``hoisted``, numbered canonically (see the module): ``key``
    names the program (with ``donate``, positions of donated inputs, and ``extra``); ``ops``, ``avals``, ``in_ids``,
    ``out_ids`` and ``donate`` are what a compiler takes. :meth:`wrap` makes an executable of the raw cluster from
    the canonical one's."""

    def __init__(self, ops, avals, in_ids, out_ids, donate, hoisted, extra=None):
        skip = set(hoisted)
        made = {o for k in skip for o in ops[k][2]}  # (results of the hoisted ops)
        new, c_avals, c_ins, src, c_ops = {}, [], [], [], []
        for k, (op, ins, outs) in enumerate(ops):
            if k in skip:
                continue
            c_in = []
            for i in ins:
                j = new.get(i)
                if j is None:  # (an input: the cluster's own, or a hoisted result)
                    j = new[i] = len(c_avals)
                    c_avals.append(avals[i])
                    c_ins.append(j)
                    src.append(i)
                c_in.append(j)
            c_out = []
            for o in outs:
                new[o] = len(c_avals)
                c_avals.append(avals[o])
                c_out.append(new[o])
            c_ops.append((op, tuple(c_in), tuple(c_out)))
        position = {i: p for p, i in enumerate(src)}
        raw_donated = [in_ids[k] for k in donate]
        self.ops, self.avals, self.in_ids = c_ops, c_avals, c_ins
        self.out_ids = [new[o] for o in out_ids if o not in made]
        self.donate = tuple(sorted(position[i] for i in raw_donated if i in position))
        self.key = (tuple(c_ops), tuple([c_avals[j] for j in c_ins]), tuple(self.out_ids), self.donate, extra)
        self._src, self._made = src, made
        self._hoisted = [ops[k] for k in sorted(skip)]

    def wrap(self, executable, in_ids, out_ids, run_ops, kept=None):
        """An executable of the raw cluster (inputs in ``in_ids`` order, results in ``out_ids`` order) that runs the
        hoisted ops by ``run_ops(ops, env, keep)`` and then ``executable``, the canonical program's. ``kept``: a list
        that each run fills with weak references to the hoisted results it returns (the constants kept: see
        :func:`kept_inputs`)."""
        hoisted, made = self._hoisted, self._made
        raw_pos = {i: p for p, i in enumerate(in_ids)}
        args = [raw_pos.get(i, -1) for i in self._src]  # (-1: a hoisted result)
        wanted = [i for i in self._src if i in made]
        c_pos = {o: p for p, o in enumerate(o for o in out_ids if o not in made)}
        results = [c_pos.get(o, -1) for o in out_ids]
        keep = [o for o in out_ids if o in made] + wanted
        reads = sorted({i for _, ins, _ in hoisted for i in ins if i in raw_pos})

        def run(*inputs):
            env = {i: inputs[raw_pos[i]] for i in reads}
            if hoisted:
                run_ops(hoisted, env, keep)
            res = executable(*[inputs[p] if p >= 0 else env[i] for p, i in zip(args, self._src)])
            if kept is not None:
                kept[:] = [_weak(env[o]) for c, o in zip(results, out_ids) if c < 0]
            return [res[c] if c >= 0 else env[o] for c, o in zip(results, out_ids)]

        return run


def _weak(value):
    try:
        return weakref.ref(value)
    except TypeError:  # (a NumPy scalar: no kept array)
        return lambda: None


def kept_inputs(kept, in_ids, inputs):
    """The inputs (local ids) whose value is one of the results ``kept`` refers to (see :meth:`Canonical.wrap`):
    constants the site's first executable took out and the project kept (YOLOX's grid in ``self.grids``). What the
    second cluster makes from them at every step (the grid reshaped, its columns: the anchors' shifts) was taken out
    of the first too, where it was made from Python numbers: taken out of the second, it is the same program.

    Example:
        >>> import numpy as np
        >>> grid, x = np.zeros(3), np.ones(3)
        >>> kept_inputs([weakref.ref(grid)], [4, 7], [x, grid])
        [7]
    """
    ids = {id(v) for r in kept if (v := r()) is not None}
    return [i for i, v in zip(in_ids, inputs) if id(v) in ids]
