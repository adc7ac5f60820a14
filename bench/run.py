"""The CPU benchmark table: `python bench/run.py` (add --quick for smaller sizes,
`--mcpu haswell` to build every kernel for another CPU this machine can run).

First the target (CPU, vector width, registers, caches) and the machine's fp32 FMA peak,
measured by a tdsl kernel. Each row: the kernel, GFLOP/s or GB/s for tdsl and for numpy in
the same run, the ratio, the share of the FMA peak (compute-bound rows) and the compile
time (definition to callable). Timings are the median of several repeats.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import tdsl  # noqa: E402
from tdsl.examples import gemm, kernels, peak  # noqa: E402
from common import add_target_option, print_target, target_from, timings  # noqa: E402

TARGET = None
PEAK = None


def median_time(fn, number=3, repeat=7):
    """The median of `repeat` timings of `number` calls, after a warm-up."""
    ts = timings(fn, number, repeat)
    return sorted(ts)[len(ts) // 2]


def build(make, *args, **kw):
    t0 = time.perf_counter()
    s, tensors = make(*args, target=TARGET, **kw)
    f = tdsl.build(s, tensors, target=TARGET)
    return f, time.perf_counter() - t0


def row(name, unit, work, t_tdsl, t_np, compile_s, ok):
    rate = work / t_tdsl / 1e9
    rate_np = work / t_np / 1e9
    share = f"{rate / PEAK:6.0%}" if unit == "GFLOP/s" else ""
    print(f"{name:34s} {rate:9.1f} {rate_np:9.1f} {unit:7s} {t_np / t_tdsl:7.2f} {share:>6s} "
          f"{compile_s:9.3f}  {'ok' if ok else 'WRONG'}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke test")
    add_target_option(p)
    opts = p.parse_args()
    global TARGET, PEAK
    TARGET = target_from(opts)
    n = 256 if opts.quick else 1024
    rng = np.random.default_rng(0)
    print("tdsl CPU benchmarks; tdsl and numpy measured in the same run\n")
    PEAK = print_target(TARGET)
    print(f"{'kernel':34s} {'tdsl':>9s} {'numpy':>9s} {'unit':7s} {'ratio':>7s} {'peak':>6s} {'compile_s':>9s}")

    # GEMM, each step of the tutorial sequence
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.zeros((n, n), dtype=np.float32)
    ref = a @ b
    t_np = median_time(lambda: np.matmul(a, b, out=c))
    flops = 2.0 * n ** 3
    for name, make in gemm.STEPS:
        f, cs = build(make, n, n, n)
        c[:] = 0
        f(a, b, c)
        ok = np.allclose(c, ref, rtol=1e-3, atol=1e-2)
        slow = name in ("default", "blocking")
        t = median_time(lambda: f(a, b, c), number=1, repeat=1 if slow else 5)
        row(f"matmul {n} {name}", "GFLOP/s", flops, t, t_np, cs, ok)

    # conv2d 3x3, 64 -> 64 channels, 56x56
    C, H, W, CO = 64, 56, 56, 64
    d = rng.standard_normal((C, H, W), dtype=np.float32)
    w = rng.standard_normal((CO, C, 3, 3), dtype=np.float32)
    bn = kernels.conv_block(TARGET)
    wp = kernels.pack_weight(w, bn)
    o = np.zeros((CO // bn, H, W, bn), dtype=np.float32)
    f, cs = build(kernels.conv2d_schedule, C, H, W, CO)
    f(d, wp, o)
    ok = np.allclose(kernels.unpack_output(o), kernels.conv2d_reference(d, w), rtol=1e-3, atol=1e-2)
    t = median_time(lambda: f(d, wp, o))
    t_np = median_time(lambda: kernels.conv2d_reference(d, w))
    row("conv2d 3x3 64->64 56x56", "GFLOP/s", 2.0 * CO * C * 9 * H * W, t, t_np, cs, ok)

    # relu(x + b), 4096 x 4096
    m = 1024 if opts.quick else 4096
    x = rng.standard_normal((m, m), dtype=np.float32)
    bias = rng.standard_normal((m,), dtype=np.float32)
    y = np.empty_like(x)
    f, cs = build(kernels.bias_relu_schedule, m, m)
    f(x, bias, y)
    ok = np.array_equal(y, kernels.bias_relu_reference(x, bias))
    t = median_time(lambda: f(x, bias, y))

    def np_bias_relu():
        np.add(x, bias, out=y)
        np.maximum(y, 0, out=y)
    t_np = median_time(np_bias_relu)
    row(f"relu(x + b) {m}x{m}", "GB/s", 2.0 * x.nbytes, t, t_np, cs, ok)

    # softmax over rows, 4096 x 1024
    rows = 1024 if opts.quick else 4096
    x = rng.standard_normal((rows, 1024), dtype=np.float32)
    y = np.empty_like(x)
    f, cs = build(kernels.softmax_schedule, rows, 1024)
    f(x, y)
    ok = np.allclose(y, kernels.softmax_reference(x), rtol=1e-5, atol=1e-7)
    t = median_time(lambda: f(x, y))
    t_np = median_time(lambda: kernels.softmax_reference(x))
    row(f"softmax rows {rows}x1024", "GB/s", 2.0 * x.nbytes, t, t_np, cs, ok)
    again = peak.measure(TARGET)[0]
    if again > PEAK * 1.05:
        print(f"\nnote: the FMA peak measured {again:.1f} GFLOP/s at the end (the machine was "
              f"busier at the start); shares above are of {PEAK:.1f}")


if __name__ == "__main__":
    main()
