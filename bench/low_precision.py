"""Low-precision GEMM on the CPU: `python bench/low_precision.py [--sizes 512 1024]`.

Per size, in one run: tdsl's shipped float32 GEMM (`register_blocked`), numpy's float32
GEMM, and the tensorized uint8 x int8 -> int32 (AVX512-VNNI) and bfloat16 -> float32
(AVX512-BF16) GEMMs of `tdsl.examples.lowp_gemm` (B packed once, outside the timing),
beside the same three written as plain definitions and scheduled by `tdsl.auto_schedule`
("auto": the int8 and bf16 ones pick the dot-product instruction and pack B inside every
call), in GFLOP/s (GOP/s for int8: a multiply-add is 2 operations either way). The
kernels are timed in rounds: each round times every kernel once (a block of calls after a
warm-up), so load from other processes reaches all of them alike; the best block of each
is reported, with the ratio to float32. For numpy unset OPENBLAS_CORETYPE /
OPENBLAS_L2_SIZE in the shell (see NOTES.md).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

from common import add_target_option, print_target, target_from, timings  # noqa: E402
import tdsl  # noqa: E402
from tdsl.examples import gemm, lowp_gemm  # noqa: E402


def kernels(n, target):
    rng = np.random.default_rng(0)
    a32 = rng.standard_normal((n, n)).astype(np.float32)
    b32 = rng.standard_normal((n, n)).astype(np.float32)
    out = {}
    s, args = gemm.register_blocked(n, n, n, target=target)
    f = tdsl.build(s, args, target=target)
    c32 = np.empty((n, n), np.float32)
    out["tdsl fp32"] = lambda: f(a32, b32, c32)
    out["numpy fp32"] = lambda: np.matmul(a32, b32, out=c32)
    for dtype, name, fact in (("uint8", "tdsl int8 (VNNI)", "has_vnni"),
                              ("bfloat16", "tdsl bf16 (BF16)", "has_bf16")):
        if not getattr(target, fact):
            print(f"{name}: skipped, the target lacks it")
            continue
        if dtype == "uint8":
            a = rng.integers(0, 256, (n, n)).astype(np.uint8)
            b = rng.integers(-128, 128, (n, n)).astype(np.int8)
        else:
            a, b = tdsl.nd.float32_to_bfloat16(a32), tdsl.nd.float32_to_bfloat16(b32)
        s, args = lowp_gemm.tensorized(n, n, n, dtype, target)
        g = tdsl.build(s, args, target=target)
        bp = lowp_gemm.pack(b, dtype)
        c = np.empty((n, n), lowp_gemm.KINDS[dtype][0])
        g(a, bp, c)
        ref = lowp_gemm.reference(a, b, dtype)
        ok = np.array_equal(c, ref) if dtype == "uint8" else np.allclose(c, ref, rtol=1e-3, atol=1e-2)
        if not ok:
            raise SystemExit(f"{name} {n}: wrong result")
        out[name] = (lambda g=g, a=a, bp=bp, c=c: g(a, bp, c))
        h = auto(n, dtype, target)
        c2 = np.empty_like(c)
        h(a, b, c2)
        if not (np.array_equal(c2, ref) if dtype == "uint8" else
                np.allclose(c2, ref, rtol=1e-3, atol=1e-2)):
            raise SystemExit(f"auto {dtype} {n}: wrong result")
        out["auto " + name.split()[1]] = (lambda h=h, a=a, b=b, c=c2: h(a, b, c))
    h = auto(n, "float32", target)
    out["auto fp32"] = lambda: h(a32, b32, c32)
    return out


def auto(n, dtype, target):
    """C = A @ B as a user writes it, widened by casts, scheduled by the auto-scheduler."""
    b_dtype, acc = {"uint8": ("int8", "int32"), "bfloat16": ("bfloat16", "float32"),
                    "float32": ("float32", "float32")}[dtype]
    A = tdsl.placeholder((n, n), dtype=dtype, name="A")
    B = tdsl.placeholder((n, n), dtype=b_dtype, name="B")
    k = tdsl.reduce_axis((0, n), name="k")
    C = tdsl.compute((n, n), lambda i, j: tdsl.sum(
        A[i, k].astype(acc) * B[k, j].astype(acc), axis=k), name="C")
    return tdsl.build(tdsl.auto_schedule(C, target), [A, B, C], target=target)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[512, 1024])
    p.add_argument("--rounds", type=int, default=5)
    add_target_option(p)
    args = p.parse_args()
    target = target_from(args)
    print_target(target)
    for n in args.sizes:
        ks = kernels(n, target)
        best = {k: float("inf") for k in ks}
        number = max(1, int(2e9 / (2 * n ** 3)))
        for _ in range(args.rounds):
            for k, fn in ks.items():
                best[k] = min(best[k], min(timings(fn, number=number, repeat=2)))
        base = 2 * n ** 3 / best["tdsl fp32"] / 1e9
        for k, t in best.items():
            g = 2 * n ** 3 / t / 1e9
            print(f"GEMM {n:5d}  {k:18s} {g:8.1f} GFLOP/s  {g / base:5.2f}x tdsl fp32")
        print()


if __name__ == "__main__":
    main()
