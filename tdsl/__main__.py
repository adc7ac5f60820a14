"""Command line: `python -m tdsl demo` (also the `tdsl` console script)."""
from __future__ import annotations

import argparse
import sys
import time


def demo(size=1024):
    import numpy as np

    import tdsl
    from tdsl.examples import gemm

    M = N = K = size
    print(f"tdsl {tdsl.__version__}: a {M}x{N}x{K} float32 matmul, defined, scheduled, built and checked\n")
    t0 = time.perf_counter()
    s, args = gemm.register_blocked(M, N, K)
    print("schedule:")
    print(s)
    func = tdsl.lower(s, args, name="matmul")
    print("\nloop IR:")
    print(func)
    f = tdsl.build(s, args, name="matmul")
    build_s = time.perf_counter() - t0

    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    c = np.zeros((M, N), dtype=np.float32)
    f(a, b, c)
    ref = a @ b
    err = float(np.max(np.abs(c - ref)) / np.max(np.abs(ref)))
    ok = np.allclose(c, ref, rtol=1e-3, atol=1e-3)
    t = f.time_evaluator(number=5, repeat=3)(a, b, c).mean
    tn = min(_time(lambda: np.matmul(a, b, out=c)) for _ in range(3))
    flops = 2.0 * M * N * K
    print(f"\ncorrect: {ok} (max relative error {err:.2e})")
    print(f"build (define to callable): {build_s:.3f} s")
    print(f"{'':8s}{'GFLOP/s':>10s}")
    print(f"{'tdsl':8s}{flops / t / 1e9:10.1f}")
    print(f"{'numpy':8s}{flops / tn / 1e9:10.1f}")
    print(f"ratio tdsl/numpy: {tn / t:.2f}")
    return 0 if ok else 1


def _time(fn, number=5):
    fn()
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - t0) / number


def main(argv=None):
    p = argparse.ArgumentParser(prog="tdsl", description="tdsl: a Python-embedded tensor compiler")
    sub = p.add_subparsers(dest="cmd")
    d = sub.add_parser("demo", help="build a scheduled matmul, check it against numpy, time it")
    d.add_argument("--size", type=int, default=1024)
    args = p.parse_args(argv)
    if args.cmd == "demo":
        return demo(args.size)
    p.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
