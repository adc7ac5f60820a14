#!/usr/bin/env bash
# Everything a short lease on a CUDA machine should check, in one command: the GPU suite
# (bench/gpu.py, with its rel-err column), the tests that launch CUDA kernels, and
# compute-sanitizer's memcheck over the runtime, graph-executor and tensor-core tests, and
# the sweep of the bf16 GEMM's shared stages (bench/gpu_probe.py bf16), and on sm_90 the
# hand-written wgmma GEMM (bench/wgmma_probe.py). Each part has its
# own time limit so a hang in one still leaves the others' logs, written to $OUT (or
# ./gpu-logs); a summary is printed last.
#
#     bash bench/gpu_session.sh    # BENCH_S, TESTS_S, SAN_S, PROBE_S, WGMMA_S override the limits
# (the defaults add up to 580 s: one device call of at most 600)
out=${OUT:-gpu-logs}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
jobs=$(( $(nproc) < 16 ? $(nproc) : 16 ))

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv \
    >"$out/smi.txt" 2>&1
python3 -c 'import sys, tdsl; d = tdsl.cuda(0); print(sys.version.split()[0], d.exist, d.name if d.exist else "")' \
    >>"$out/smi.txt" 2>&1

timeout "${BENCH_S:-200}" python3 bench/gpu.py --number 20 >"$out/bench.log" 2>&1
echo "bench exit $?" >>"$out/bench.log"

GPU_TESTS="tests/test_gpu_runtime.py tests/test_gpu_kernels.py tests/test_graph_device.py tests/test_mma.py
  tests/test_guarded_loads.py tests/test_graph_gpu_strategies.py tests/test_random_gpu_schedules.py
  tests/test_auto_schedule_gpu.py tests/test_auto_tensorize.py tests/test_gpu_errors.py
  tests/test_cross_thread_shuffle.py tests/test_low_precision.py tests/test_bounds_check.py
  tests/test_tutorial_opt_conv_cuda.py tests/test_tvm_te.py tests/test_tvm_tutorials.py
  tests/test_cli_demo.py tests/test_regions.py tests/test_temp_files.py tests/test_auto_schedule.py
  tests/test_wgmma.py tests/test_storage_swizzle.py"
xdist=""
python3 -c 'import xdist' 2>/dev/null && xdist="-n $jobs"
# shellcheck disable=SC2086
timeout "${TESTS_S:-150}" python3 -m pytest -q -rfE -p no:cacheprovider $xdist $GPU_TESTS \
    >"$out/tests.log" 2>&1
echo "tests exit $?" >>"$out/tests.log"

timeout "${SAN_S:-60}" python3 bench/gpu.py --sanitize -x -q tests/test_gpu_runtime.py \
    tests/test_graph_device.py tests/test_guarded_loads.py tests/test_graph_gpu_strategies.py \
    "tests/test_mma.py::test_gemm_on_a_gpu" "tests/test_wgmma.py::test_wgmma_gemm_on_a_hopper_gpu" \
    >"$out/sanitize.log" 2>&1
echo "sanitize exit $?" >>"$out/sanitize.log"

timeout "${PROBE_S:-120}" python3 bench/gpu_probe.py bf16 >"$out/probe.log" 2>&1
echo "probe exit $?" >>"$out/probe.log"

# sm_90 only: the hand-written wgmma GEMM (its layouts checked against torch, its speed)
timeout "${WGMMA_S:-50}" python3 bench/wgmma_probe.py >"$out/wgmma.log" 2>&1
echo "wgmma exit $?" >>"$out/wgmma.log"

cat "$out/smi.txt"
grep -E "^(device|row |sgemm|gemm|bf16|conv|softmax|add|resnet|mobilenet|bench exit)|FAILED|CUDA graph" "$out/bench.log"
grep -E "^(FAILED|ERROR)|passed|failed|tests exit" "$out/tests.log" | cut -c1-300 | tail -40
tail -8 "$out/sanitize.log"
grep -E "^bf16|probe exit" "$out/probe.log"
grep -E "^(torch|wgmma)" "$out/wgmma.log"
