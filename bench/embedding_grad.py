"""The adjoint of an embedding lookup (`take_grad`, graph.gradient's rule for Gather):
a BERT-base-sized table (30522 x 256 here, `--dim`) and 128 to 8192 token ids, through the
graph layer (one kernel: a zeroed table, then a scatter-add of each id's row on an update
definition). numpy's np.add.at is the reference column, measured in the same run.
`python bench/embedding_grad.py [--ids 128,1024,8192] [--dim 256]`."""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

import tdsl
from tdsl.graph import Call, Function, Module, TensorType, Var


def best_of(fn, calls, blocks=5):
    best = float("inf")
    for _ in range(blocks):
        fn()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ids", default="128,1024,8192")
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--rows", type=int, default=30522)
    ap.add_argument("--blocks", type=int, default=5)
    opts = ap.parse_args()
    target = tdsl.target.Target("llvm")
    print(f"take_grad: {opts.rows} x {opts.dim} float32 table, {target.describe()}; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'ids':>6s} {'tdsl ms':>9s} {'np.add.at ms':>13s} {'tdsl/numpy':>10s}")
    rng = np.random.default_rng(0)
    for n in map(int, opts.ids.split(",")):
        g = Var("g", TensorType((n, opts.dim), "float32"))
        i = Var("i", TensorType((n,), "int64"))
        y = Call("take_grad", [g, i], {"axis": 0, "size": opts.rows})
        exe = tdsl.graph.build(Module(Function("main", [g, i], [y])), target=target)
        gv = rng.standard_normal((n, opts.dim)).astype(np.float32)
        iv = rng.integers(0, opts.rows, n).astype(np.int64)
        iv[: n // 4] = iv[0]          # a frequent token: duplicate ids accumulate
        got = exe.run(gv, iv)[0]
        ref = np.zeros((opts.rows, opts.dim), np.float32)
        np.add.at(ref, iv, gv)
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)

        def npy():
            out = np.zeros((opts.rows, opts.dim), np.float32)
            np.add.at(out, iv, gv)
        calls = 5
        t = best_of(lambda: exe.run(gv, iv), calls, opts.blocks)
        tn = best_of(npy, calls, opts.blocks)
        print(f"{n:6d} {t * 1e3:9.2f} {tn * 1e3:13.2f} {t / tn:10.2f}", flush=True)


if __name__ == "__main__":
    main()
