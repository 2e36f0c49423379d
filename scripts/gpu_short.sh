#!/usr/bin/env bash
# The GPU lane and issue 30's GPU rows cut to fit one 15-minute device lease (about 9 minutes of commands): the test
# suite on the GPU (capped; TESTS_S seconds, TESTS a selection), host time per compiled call, run.py's eager / auto-jit
# / xla_trace / PyTorch columns on three workloads, then what auto-jit's cold first calls compile. Results go to
# ${1:-gpu_short_out}/. scripts/gpu_lane.sh and scripts/gpu_autojit.sh are the full versions (over 15 minutes).
#   bash scripts/gpu_short.sh [out_dir] [python]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu_short_out}
py=${2:-python3}
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
"$py" -c "import jax, numpy; print(jax.__version__, numpy.__version__, jax.devices())"
# several test processes share the GPU: allocate on demand instead of JAX's 75% up front
# -v: each result is logged as it ends (a summary cut by the lease lists nothing); SIGINT: pytest still prints its
# summary; then no worker may outlive it into the benchmarks. (--timeout-method thread: its default, an interval
# timer, is the SIGALRM that the DataLoader and interrupt tests arm and check themselves)
XLA_PYTHON_CLIENT_PREALLOCATE=false timeout -s INT -k 20 ${TESTS_S:-230} "$py" -m pytest -n 14 -v -p no:cacheprovider \
    -rfE --timeout 100 --timeout-method thread ${TESTS:-} > "$out/tests.log" 2>&1
echo "tests: exit $?"; pkill -f "xdist|execnet" 2>/dev/null; sleep 2
grep -E "[0-9]+ (passed|failed)" "$out/tests.log" | tail -1; grep -E " (FAILED|ERROR) " "$out/tests.log" | sort -u
timeout 45 "$py" benchmarks/host_overhead.py --repeats 5 > "$out/host_overhead.txt" 2>&1; cat "$out/host_overhead.txt"
# (the Transformer's cold first steps alone take ~2 minutes on an H200: 63 s eager, 39 s auto-jit)
timeout 240 "$py" benchmarks/run.py --device gpu --only mlp,convnet_b64,transformer_b64 --no-overhead \
    --columns eager,auto_jit,xla_trace,torch --steps 20 --out "$out/bench" > "$out/bench.log" 2>&1
sed -n '/Steady-state/,/## min/p' "$out/bench/results.md" 2>/dev/null || grep median "$out/bench.log"
# what auto-jit's first calls compile and run op by op, cold (the first step took 39 s against xla_trace's 13)
MEGXLA_COMPILATION_CACHE=0 timeout 90 "$py" benchmarks/first_call.py transformer_b64 auto_jit 2>&1 \
    | tee "$out/first_call.txt"
