#!/usr/bin/env bash
# Issue 30's GPU rows in one command, for a CUDA machine whose python3 has JAX's CUDA plugin and torch: the
# eager-written loops (eager vs auto-jit vs xla_trace), again with auto-jit cutting at gm.backward (the overlap
# experiment: off by default because it loses on the CPU), again without early launches, the data-dependent loops, then run.py's auto-jit column beside PyTorch eager, then
# (last: the first thing to cut when time is short) MobileNetV2's first eager step, eager vs auto-jit, cold and warm
# cache (the warm one reads the kept lowered programs). Results go to ${1:-gpu_autojit_out}/. About 6-9 minutes on
# an H100.
#   bash scripts/gpu_autojit.sh [out_dir] [python]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu_autojit_out}
py=${2:-python3}
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
"$py" -c "import jax; print(jax.__version__, jax.devices())"
only=mlp,convnet_b8,convnet_b64,transformer
timeout 150 "$py" benchmarks/eager_loop.py --only $only --rounds 1 > "$out/eager_loop.md" 2>&1
tail -8 "$out/eager_loop.md"
timeout 150 "$py" benchmarks/eager_loop.py --only $only --rounds 1 --cut-backward > "$out/eager_loop_cut_backward.md" 2>&1
tail -7 "$out/eager_loop_cut_backward.md"
# early launch off (each cluster runs once collected in full): what the overlap of host and device gives
timeout 150 "$py" benchmarks/eager_loop.py --only $only --rounds 1 --no-early > "$out/eager_loop_no_early.md" 2>&1
tail -7 "$out/eager_loop_no_early.md"
# the data-dependent steps (a count read on the host, then cond_take; the zoo's detection losses): clusters in parts
timeout 120 "$py" benchmarks/eager_loop.py --only hostread,detection --rounds 1 > "$out/eager_loop_data_dependent.md" 2>&1
tail -4 "$out/eager_loop_data_dependent.md"
timeout 200 "$py" benchmarks/run.py --device gpu --only mlp,convnet_b64,transformer_b64 \
    --columns eager,auto_jit,xla_trace,torch --steps 30 --out "$out/bench" > "$out/bench.log" 2>&1
sed -n '/Steady-state/,/## min/p' "$out/bench/results.md" 2>/dev/null || tail -30 "$out/bench.log"
timeout 180 "$py" benchmarks/build_time.py --eager-first-step mobilenetv2 > "$out/first_step.md" 2>&1
tail -4 "$out/first_step.md"
