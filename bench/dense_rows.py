"""A dense layer (MatMul + bias, constant weights) at a few rows: the dynamic build's kernel
(rows symbolic, built once) against the static build's for the same row count, each a
network of that one kernel run through its executor (the per-run work, a few us, is on
both sides alike), one thread, timed by the calling thread's CPU clock in blocks taken in
turn, best block. Prints per (K, N, rows) both times, their ratio and the dynamic
kernel's variant that ran (`Kernel.at`).

    python bench/dense_rows.py [--kn 256x256,1024x256] [--rows 1,2,3,4,7,8,16] [--repeat 5]
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

DEFAULT_KN = "256x256,768x768,1024x256,768x3072,3072x768"
DEFAULT_ROWS = "1,2,3,4,7,8,16"


def thread_blocks(fns, number, repeat):
    """Best-of-`repeat` thread-CPU seconds per call of each callable in `fns`, in blocks
    taken in turn (each after a few untimed calls): other processes' load does not count,
    and each side sees the same phases of the machine."""
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, f in enumerate(fns):
            for _ in range(max(1, number // 10)):
                f()
            t0 = time.thread_time()
            for _ in range(number):
                f()
            best[i] = min(best[i], (time.thread_time() - t0) / number)
    return best


def dense_model(K, N, rows, seed=0):
    """ONNX: y = x @ w + b, x of (`rows`, K) (`rows` a number or a size name), w of (K, N)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array((rng.standard_normal((K, N)) / K ** 0.5).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])]
    g = helper.make_graph(nodes, "dense", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, K])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, N])], [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def dense_exe(K, N, rows, target="llvm"):
    """The executor of `dense_model` (one kernel)."""
    import tdsl.graph as G
    return G.build(G.optimize(G.from_onnx(dense_model(K, N, rows)), target=target), target=target)


def variant(exe, rows):
    """The name of the kernel (or size-class variant) dynamic executor `exe` runs at `rows`."""
    ((kernel, _, _),) = exe.steps
    return kernel.at({"batch": rows}).name


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kn", default=DEFAULT_KN)
    ap.add_argument("--rows", default=DEFAULT_ROWS)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--number", type=int, default=200)
    ap.add_argument("--target", default="llvm")
    a = ap.parse_args(argv)
    os.environ["TDSL_NUM_THREADS"] = "1"
    rng = np.random.default_rng(0)
    print(f"{'K':>5} {'N':>5} {'rows':>4} {'dynamic us':>10} {'static us':>9} {'ratio':>6}  variant")
    for kn in a.kn.split(","):
        K, N = (int(v) for v in kn.split("x"))
        dyn = dense_exe(K, N, "batch", a.target)
        for M in (int(v) for v in a.rows.split(",")):
            st = dense_exe(K, N, M, a.target)
            x = rng.standard_normal((M, K)).astype(np.float32)
            np.testing.assert_allclose(dyn.run(x)[0], st.run(x)[0], rtol=1e-4, atol=1e-4 * K ** 0.5)
            d, s = thread_blocks([lambda: dyn.run(x), lambda: st.run(x)], a.number, a.repeat)
            print(f"{K:5d} {N:5d} {M:4d} {d * 1e6:10.2f} {s * 1e6:9.2f} {d / s:6.3f}  {variant(dyn, M)}", flush=True)


if __name__ == "__main__":
    main()
