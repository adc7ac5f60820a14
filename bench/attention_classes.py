"""The dynamic attention kernel's size classes (strategy/cpu/attention.py: the blocked
kernel, "short_keys" below SHORT_KEYS keys, "one" at a single key) at sizes each of them
serves, against a static build of the same attention at that size, in one process.

    python bench/attention_classes.py                        # BERT's heads: 12 x 64
    TDSL_NUM_THREADS=1 python bench/attention_classes.py --sizes 1x1,4x1,1x16,1x31,4x64

The model is one self-attention as torch exports it (q, k^T, v and a padding mask as
inputs, symbolic batch and sequence; softmax(q k^T / sqrt(d) + mask) v). Each build is
cold (bench/dynamic.cold_caches); a kernel's build CPU is the thread CPU of its
`tdsl.build` (schedule to machine code), per kernel of the dynamic build, its size-class
variants apart. Per size: the kernel the dynamic build ran and the static build's
attention kernels (at fewer keys than the fusion threshold, the three unfused ones), the
median over `--repeat` traces (Executor.trace, the median of `--number` calls each, the
two builds taken in turn) of the attention kernels' time per call, and dynamic/static.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dynamic import cold_caches  # noqa: E402

import tdsl.graph as G  # noqa: E402
from tdsl.graph.strategy import dispatch  # noqa: E402

_ATTENTION = ("attention", "softmax", "matmul")


def attention_model(heads, dim, value):
    """One self-attention over symbolic (batch, sequence), a padding mask input."""
    f, B, S = TensorProto.FLOAT, "batch", "sequence"
    ins = [helper.make_tensor_value_info("q", f, (B, heads, S, dim)),
           helper.make_tensor_value_info("kt", f, (B, heads, dim, S)),
           helper.make_tensor_value_info("v", f, (B, heads, S, value)),
           helper.make_tensor_value_info("mask", f, (B, 1, 1, S))]
    scale = numpy_helper.from_array(np.array(dim ** -0.5, np.float32), "scale")
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["s0"]), helper.make_node("Mul", ["s0", "scale"], ["s1"]),
             helper.make_node("Add", ["s1", "mask"], ["s2"]), helper.make_node("Softmax", ["s2"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    g = helper.make_graph(nodes, "attention", ins, [helper.make_tensor_value_info("y", f, None)], [scale])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def feeds(batch, seq, heads, dim, value, rng):
    return {"q": rng.standard_normal((batch, heads, seq, dim)).astype(np.float32),
            "kt": rng.standard_normal((batch, heads, dim, seq)).astype(np.float32),
            "v": rng.standard_normal((batch, heads, seq, value)).astype(np.float32),
            "mask": np.zeros((batch, 1, 1, seq), np.float32)}


def cold_build(model, dims):
    """(executor, {kernel name: build thread CPU s}) of a cold build."""
    spent, build = {}, dispatch.tdsl.build

    def timed(s, args, target=None, name=None, **kw):
        t0 = time.thread_time()
        try:
            return build(s, args, target=target, name=name, **kw)
        finally:
            spent[name] = spent.get(name, 0.0) + time.thread_time() - t0
    dispatch.tdsl.build = timed
    try:
        with cold_caches():
            return G.build(G.optimize(G.from_onnx(model, dims=dims), target="llvm"), target="llvm"), spent
    finally:
        dispatch.tdsl.build = build


def attention_walk(exe, number):
    """(names of the attention kernels the call ran, their seconds per call: median)."""
    names, per, _ = exe.trace(number)
    cols = [i for i, n in enumerate(names) if any(w in n for w in _ATTENTION)]
    return [names[i].split("#")[0] for i in cols], float(np.median(per[:, cols].sum(axis=1)))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--dim", type=int, default=64, help="the head's query/key size")
    ap.add_argument("--value", type=int, default=64, help="the head's value size")
    ap.add_argument("--sizes", default="1x1,4x1,1x2,1x16,1x31,4x16,1x64,4x64", help="batch x sequence, ...")
    ap.add_argument("--number", type=int, default=200, help="calls per trace")
    ap.add_argument("--repeat", type=int, default=5, help="traces per build")
    a = ap.parse_args(argv)
    model = attention_model(a.heads, a.dim, a.value)
    rng = np.random.default_rng(0)
    dyn, spent = cold_build(model, None)
    print(f"attention {a.heads} heads x {a.dim} (values {a.value}): dynamic build, ms of build CPU per kernel")
    for name, s in sorted(spent.items()):
        print(f"  {name:40s} {s * 1e3:8.1f}")
    print(f"  {'all':40s} {sum(spent.values()) * 1e3:8.1f}")
    print(f"{'size':>7s}  {'dynamic kernel':34s} {'us':>9s}  {'static kernels':40s} {'us':>9s}  dyn/static")
    for size in a.sizes.split(","):
        b, s = (int(x) for x in size.split("x"))
        x = feeds(b, s, a.heads, a.dim, a.value, rng)
        static, _ = cold_build(model, {"batch": b, "sequence": s})
        np.testing.assert_allclose(dyn.run(**x)[0], static.run(**x)[0], rtol=1e-4, atol=1e-4)
        times = {"dynamic": [], "static": []}
        names = {}
        for _ in range(a.repeat):
            for side, exe in (("dynamic", dyn), ("static", static)):
                names[side], t = attention_walk(exe, a.number)
                times[side].append(t)
        d, st = (float(np.median(times[k])) for k in ("dynamic", "static"))
        print(f"{size:>7s}  {','.join(names['dynamic']):34s} {d * 1e6:9.2f}  {','.join(names['static']):40s} "
              f"{st * 1e6:9.2f}  {d / st:.3f}", flush=True)


if __name__ == "__main__":
    main()
