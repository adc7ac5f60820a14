"""Grouped and depthwise conv layers of real models (MobileNetV2, EfficientNet-B0,
RegNetY-400MF, ShuffleNetV2), one ONNX Conv + bias + activation each, tdsl vs onnxruntime
(2 threads each, timed alternately, best of repeats).

    python bench/conv_grouped.py                 # every layer
    python bench/conv_grouped.py --only g6,dw96  # layers whose label contains these
    python bench/conv_grouped.py --mcpu haswell  # tdsl's code for another CPU
    python bench/conv_grouped.py --cpu-time      # one thread each, CPU time (shared machine)

`--cpu-time` times one thread of each by the thread's CPU clock, best of many single runs:
on a machine shared with other jobs, wall-clock times of two-thread runs varied 2x from
run to run, while this repeated within a few percent (it still sees shared caches).

onnxruntime runs the single node with its own layout choices (for AVX-512 it reorders to
NCHW16c and back around the conv, which a whole model amortizes), so the per-layer ratio
is a guide; bench/zoo.py gives the end-to-end answer.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import tdsl.graph as G  # noqa: E402
from common import add_target_option, target_from  # noqa: E402
from graph import _interleaved, _ort_session  # noqa: E402

# label: (C in, H(=W), C out, groups, kernel, stride, activation)
LAYERS = {
    "dw32_112_s1": (32, 112, 32, 32, 3, 1, "clip"),
    "dw96_112_s2": (96, 112, 96, 96, 3, 2, "clip"),
    "dw144_56_s1": (144, 56, 144, 144, 3, 1, "clip"),
    "dw144_56_s2_k5": (144, 56, 144, 144, 5, 2, "silu"),
    "dw240_28_k5": (240, 28, 240, 240, 5, 1, "silu"),
    "dw384_14_s1": (384, 14, 384, 384, 3, 1, "clip"),
    "dw672_14_k5": (672, 14, 672, 672, 5, 1, "silu"),
    "dw960_7_s1": (960, 7, 960, 960, 3, 1, "clip"),
    "dw1152_7_k5": (1152, 7, 1152, 1152, 5, 1, "silu"),
    "g6_112_s2": (48, 112, 48, 6, 3, 2, "relu"),
    "g13_56_s2": (104, 56, 104, 13, 3, 2, "relu"),
    "g13_28_s1": (104, 28, 104, 13, 3, 1, "relu"),
    "g26_28_s2": (208, 28, 208, 26, 3, 2, "relu"),
    "g55_7_s1": (440, 7, 440, 55, 3, 1, "relu"),
    "g55_14_s2": (440, 14, 440, 55, 3, 2, "relu"),
}


def layer_model(cin, hw, cout, groups, k, stride, act, seed=0):
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((cout, cin // groups, k, k)) * 0.2).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    p = k // 2
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=groups, kernel_shape=[k, k],
                              strides=[stride, stride], pads=[p, p, p, p])]
    if act == "relu":
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    elif act == "clip":
        nodes += [helper.make_node("Clip", ["c", "lo", "hi"], ["y"])]
    else:
        nodes += [helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
    oh = (hw + 2 * p - k) // stride + 1
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
             numpy_helper.from_array(np.array(0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6, np.float32), "hi")]
    g = helper.make_graph(nodes, "layer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, hw, hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, oh, oh])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _cpu_time(fns, seconds=3.0):
    """Best single-run thread CPU time of each callable, taken in turns for `seconds`."""
    best = [float("inf")] * len(fns)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for i, f in enumerate(fns):
            for _ in range(5):
                t0 = time.thread_time()
                f()
                best[i] = min(best[i], time.thread_time() - t0)
    return best


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--only", default="")
    p.add_argument("--number", type=int, default=20)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--cpu-time", action="store_true", help="one thread each, timed by CPU time")
    add_target_option(p)
    a = p.parse_args(argv)
    target = target_from(a)
    print(target.describe())
    print(f"\n{'layer':16s} {'tdsl us':>9s} {'ort us':>9s} {'ratio':>7s} {'GFLOP/s':>8s} {'max err':>9s}")
    for label, spec in LAYERS.items():
        if a.only and not any(s in label for s in a.only.split(",")):
            continue
        model = layer_model(*spec)
        exe = G.build(G.optimize(G.from_onnx(model)), target=str(target))
        x = np.random.default_rng(1).standard_normal((1, spec[0], spec[1], spec[1])).astype(np.float32)
        out = exe.run(x)[0]
        sess = _ort_session(model, 1 if a.cpu_time else target.num_cores)
        ref = sess.run(None, {"x": x})[0]
        err = float(np.abs(out - ref).max() / max(float(np.abs(ref).max()), 1e-30))
        ort_run = lambda: sess.run(None, {"x": x})  # noqa: E731
        if a.cpu_time:
            for k, _, _ in exe.steps:
                k.module.set_num_threads(1)
            t, r = _cpu_time([lambda: exe.run(x), ort_run])
        else:
            t, r = _interleaved(lambda: exe.run(x), ort_run, a.number, a.repeat)
        macs = out.size * (spec[0] // spec[3]) * spec[4] ** 2
        print(f"{label:16s} {t * 1e6:9.1f} {r * 1e6:9.1f} {t / r:6.2f}x {2 * macs / t * 1e-9:8.1f} "
              f"{err:9.1e}", flush=True)


if __name__ == "__main__":
    main()
