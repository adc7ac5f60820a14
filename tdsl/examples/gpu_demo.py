"""`tdsl demo --target cuda|opencl`: the GPU matmul schedule built for the target, what the
generated code is (loop IR, kernels, launch sizes, ptxas's resources for CUDA), then, where
the device exists, a run checked against numpy and timed beside torch (CUDA) or numpy
(OpenCL). Everything before the run needs no device."""
from __future__ import annotations

import time

import numpy as np

import tdsl
from tdsl.examples import gemm, gpu
from tdsl.runtime.display import summary_line

IR_LINES = 40


def demo(size, tgt) -> int:
    M = N = K = size
    kind = tgt.kind
    print(f"tdsl {tdsl.__version__}: a {M}x{N}x{K} float32 matmul on {kind}, defined, "
          "scheduled, built and checked\n")
    print("target:")
    print(tgt.describe())
    t0 = time.perf_counter()
    s, args = gpu.matmul_for_target(M, N, K, tgt)
    print("\nschedule:")
    print(s)
    _print_ir(tdsl.lower(s, args, name="matmul", target=kind))
    f = tdsl.build(s, args, target=tgt, name="matmul")
    build_s = time.perf_counter() - t0
    src = f.get_source()
    print(f"\n{kind} source: {len(src.splitlines())} lines; {summary_line(f)}")
    for note in f.notes:
        print(f"note: {note}")
    if kind == "cuda":
        _print_resources(f)
    print(f"build (define to module): {build_s:.3f} s")
    dev = tdsl.cuda(0) if kind == "cuda" else tdsl.opencl(0)
    if not dev.exist:
        print(f"\nno {kind} device here: compile only, nothing run")
        return 0
    return _run(f, dev, M, N, K)


def _print_ir(func):
    lines = str(func).splitlines()
    print(f"\nloop IR ({len(lines)} lines):")
    print("\n".join(lines[:IR_LINES]))
    if len(lines) > IR_LINES:
        print(f"... {len(lines) - IR_LINES} more lines (tdsl.lower(s, args, target=...) has them)")


def _print_resources(f):
    try:
        recs = f.resources()
    except tdsl.BuildError as e:
        print(f"ptxas resources: not available ({e})")
        return
    print("ptxas resources (per thread; occupancy from the SM limits):")
    print(f"  {'kernel':16s} {'arch':6s} {'threads':>7s} {'registers':>9s} {'spill B':>7s} "
          f"{'shared B':>8s}  occupancy")
    for r in recs:
        print(f"  {r.kernel:16s} {r.arch:6s} {r.threads:7d} {r.registers:9d} {r.spill_bytes:7d} "
              f"{r.shared_bytes:8d}  {r.occupancy}")


def _run(f, dev, M, N, K):
    a, b, c, ok, err = gemm.run_checked(f, M, N, K)
    da, db, dc = (tdsl.nd.array(x, dev) for x in (a, b, c))
    t = f.time_evaluator(number=10, repeat=5)(da, db, dc).median
    flops = 2.0 * M * N * K
    print(f"\ndevice: {dev.name}")
    print(f"correct: {ok} (max relative error {err:.2e})")
    print(f"{'':8s}{'GFLOP/s':>10s}")
    print(f"{'tdsl':8s}{flops / t / 1e9:10.1f}")
    name, tr = _reference_time(dev.kind, a, b)
    if tr is not None:
        print(f"{name:8s}{flops / tr / 1e9:10.1f}")
        print(f"ratio tdsl/{name}: {tr / t:.2f}")
    return 0 if ok else 1


def _reference_time(kind, a, b):
    """(name, seconds) of the reference matmul: torch on the GPU (TF32 off: the same fp32
    arithmetic) for CUDA, numpy on the host for OpenCL (PoCL runs on the CPU)."""
    if kind == "opencl":
        c = np.empty((a.shape[0], b.shape[1]), np.float32)
        return "numpy", gemm.numpy_seconds(a, b, c)
    try:
        import torch
    except ImportError:
        print("torch is not installed: no reference")
        return "torch", None
    if not torch.cuda.is_available():
        print("torch has no CUDA here: no reference")
        return "torch", None
    torch.backends.cuda.matmul.allow_tf32 = False
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    torch.matmul(ta, tb)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(5):
        start.record()
        for _ in range(10):
            torch.matmul(ta, tb)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3 / 10)
    return "torch", sorted(times)[2]
