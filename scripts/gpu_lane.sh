#!/usr/bin/env bash
# The GPU lane in one command, for a CUDA machine whose python3 already has JAX's CUDA plugin (and, for the
# PyTorch columns, torch): the test suite on the GPU, host time per compiled call, then the GPU benchmark.
# Results go to ${1:-gpu_lane_out}/ (tests.log, host_overhead.txt, bench/results.md). About 10 minutes on an H100.
#   bash scripts/gpu_lane.sh [out_dir] [python]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu_lane_out}
py=${2:-python3}
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# several test processes share the GPU: allocate on demand instead of JAX's 75% up front
export XLA_PYTHON_CLIENT_PREALLOCATE=false
"$py" -c "import jax; print(jax.__version__, jax.devices())"
parallel=()  # pytest-xdist, where installed: up to 12 test processes
if "$py" -c "import xdist" 2>/dev/null; then parallel=(-n "$(( $(nproc) > 12 ? 12 : $(nproc) ))"); fi
timeout 400 "$py" -m pytest "${parallel[@]}" -p no:cacheprovider -rfE > "$out/tests.log" 2>&1
echo "tests: exit $?"; grep -E "[0-9]+ (passed|failed)" "$out/tests.log" | tail -1; grep -E "^(FAILED|ERROR)" "$out/tests.log"
unset XLA_PYTHON_CLIENT_PREALLOCATE
timeout 200 "$py" benchmarks/host_overhead.py > "$out/host_overhead.txt" 2>&1; cat "$out/host_overhead.txt"
timeout 600 "$py" benchmarks/run.py --device gpu --only mlp,convnet_b64,resnet18_b256,transformer_b64 \
    --steps 30 --out "$out/bench" > "$out/bench.log" 2>&1
sed -n '/Steady-state/,/## min/p' "$out/bench/results.md" 2>/dev/null || tail -30 "$out/bench.log"
