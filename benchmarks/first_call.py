"""Time to the first step: ``xla_trace``'s first call vs the hand-written ``jax.jit`` step's (issue 13).

For one workload of ``benchmarks/models.py`` it prints, for ``xla_trace`` (or another megxla column of
``run.py``), the wall time of the first three calls, the tracer's compile time (lowering + XLA compile) and the
number of lines of the lowered StableHLO; for ``jax_jit``: lowering, compile and the whole first call (lowering +
compile + one step). Run each in a fresh process, with the persistent compilation cache off so both compile::

    MEGXLA_COMPILATION_CACHE=0 python benchmarks/first_call.py resnet18 xla_trace
    MEGXLA_COMPILATION_CACHE=0 python benchmarks/first_call.py resnet18 jax_jit
    MEGXLA_COMPILATION_CACHE=0 python benchmarks/first_call.py resnet18 auto_jit  # per call: compiles, op-by-op runs
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
import run  # noqa: E402


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    wl = models.WORKLOADS[argv[0] if argv else "resnet18"]
    column = argv[1] if len(argv) > 1 else "xla_trace"
    if column == "jax_jit":
        step, _ = run.make_jax(wl)
        state, (x, y) = step.state, step.xy
        t0 = time.perf_counter()
        lowered = step.jitted.lower(*state["args"], x, y)
        t1 = time.perf_counter()
        state["compiled"] = lowered.compile()
        t2 = time.perf_counter()
        state["compile_time_s"] = t2 - t1
        step()
        t3 = time.perf_counter()
        print(f"{wl.name} jax_jit: lower {t1 - t0:.2f}s compile {t2 - t1:.2f}s first call (all) {t3 - t0:.2f}s "
              f"stablehlo lines {lowered.as_text().count(' = ')}")
        return
    step, _ = run.make_megxla(wl, column)
    if column == "auto_jit":
        # what each of the first calls compiled and ran op by op: a slow first call is compiles or cold eager kernels
        from megxla.jit import auto_jit_stats
        for i in range(4):
            s0, t0 = auto_jit_stats(), time.perf_counter()
            step()
            dt, s1 = time.perf_counter() - t0, auto_jit_stats()
            d = {k: s1[k] - s0[k] for k in ("clusters", "ops", "compiled", "early_compiled", "eager_clusters",
                                             "split_clusters", "chunked_clusters", "tiered")}
            print(f"{wl.name} auto_jit: call {i} {dt:.2f}s compile {s1['compile_time'] - s0['compile_time']:.2f}s "
                  + " ".join(f"{k} {v}" for k, v in d.items() if v), flush=True)
        print("cuts:", auto_jit_stats()["cuts"], "changes:", auto_jit_stats()["changes"])
        return
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    tr = step.traced
    print(f"{wl.name} {column}: calls {' / '.join(f'{t:.2f}s' for t in times)} compile (lower+XLA) "
          f"{tr.compile_time:.2f}s compiles {tr.num_compiled} stablehlo lines {tr.compiler_ir().count(' = ')}")


if __name__ == "__main__":
    main()
