"""Exact GELU, 0.5 * x * (1 + erf(x / sqrt 2)), as one elementwise kernel over a buffer:
tdsl (`tdsl.erf` in an auto-scheduled compute) against onnxruntime (a Gelu-as-exported
graph: Div, Erf, Add, Mul, Mul, which its optimizer fuses into one Gelu kernel) and torch's
`gelu`. A small buffer (in L2) shows the arithmetic cost per element; a large one adds
memory traffic. Sides timed in turn in blocks (`latency.blocks`), best block, on as many
threads as `--threads` says.

    python bench/erf.py [--threads 1] [--sizes 65536,8388608] [--repeat 5]
"""
from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tdsl  # noqa: E402
from latency import blocks  # noqa: E402


def tdsl_gelu(n):
    x = tdsl.placeholder((n,), name="x")
    y = tdsl.compute((n,), lambda i: 0.5 * x[i] * (1.0 + tdsl.erf(x[i] * (1 / math.sqrt(2)))),
                     name="gelu")
    return tdsl.build(tdsl.auto_schedule(y), [x, y])


def ort_gelu(n, threads):
    import onnxruntime as ort
    from onnx import TensorProto, helper
    f = TensorProto.FLOAT
    c = [helper.make_tensor(k, f, (), [v]) for k, v in
         (("s2", math.sqrt(2)), ("one", 1.0), ("half", 0.5))]
    nodes = [helper.make_node("Div", ["x", "s2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["x", "a"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["y"])]
    g = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", f, (n,))],
                          [helper.make_tensor_value_info("y", f, (n,))], initializer=c)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--sizes", default="65536,8388608")
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args(argv)
    os.environ["TDSL_NUM_THREADS"] = str(a.threads)
    import torch
    torch.set_num_threads(a.threads)
    print(f"exact GELU, {a.threads} thread(s); ns/element and GB/s (read + write), best block")
    print(f"{'n':>9s} {'tdsl':>7s} {'ort':>7s} {'torch':>7s}   {'tdsl GB/s':>9s} "
          f"{'tdsl/ort':>8s} {'tdsl/torch':>10s} {'max abs err':>11s}")
    rng = np.random.default_rng(0)
    for n in (int(s) for s in a.sizes.split(",")):
        x = rng.standard_normal(n).astype(np.float32) * 3
        out = np.empty_like(x)
        f = tdsl_gelu(n)
        sess = ort_gelu(n, a.threads)
        tx = torch.from_numpy(x)
        ref = 0.5 * x.astype(np.float64) * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
        f(x, out)
        err = float(np.abs(out - ref).max())
        number = max(3, int(2e7 // n))
        with torch.no_grad():
            ts = blocks([lambda: f(x, out), lambda: sess.run(None, {"x": x}),
                         lambda: torch.nn.functional.gelu(tx)], number, a.repeat)
        ns = [t / n * 1e9 for t in ts]
        print(f"{n:9d} {ns[0]:7.3f} {ns[1]:7.3f} {ns[2]:7.3f}   {8 * n / ts[0] / 1e9:9.1f} "
              f"{ts[0] / ts[1]:8.2f} {ts[0] / ts[2]:10.2f} {err:11.2e}")


if __name__ == "__main__":
    main()
