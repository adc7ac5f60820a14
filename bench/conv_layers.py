"""Each convolution of a network, tdsl's kernel against onnxruntime's and OpenVINO's layer,
with what OpenVINO runs it as (its primitive and the layout of its output), in one process:
the per-layer rows behind bench/layers.py's per-family ones.

    python bench/conv_layers.py --only conv1d_net,whisper_encoder
    python bench/conv_layers.py --only conv1d_net --length 16001 --threads 1
    python bench/conv_layers.py --only conv1d_net --mcpu haswell
    python bench/conv_layers.py --only whisper_tiny,whisper_base --threads 1

whisper_tiny and whisper_base are Whisper's encoder at those models' sizes (d_model 384 and
512; 4 and 6 layers, random weights) on 30 s of frames, beside the zoo's smaller
whisper_encoder: their stem convs (80 -> d_model, k3; d_model -> d_model, k3/s2, each with
an exact GELU) are the layers users run. They are here and not in bench/zoo.py: a hundred
calls a side of whisper_tiny alone (~0.2 s a call on one thread) would add over 30 s to it.

A row is one ONNX Conv node: its channels, kernel, stride, dilation, groups and output
width; the time each runtime spends in the kernel or layer built around it (with what it
fused there: bias, folded batch norm, activation, residual add), the fastest of
`--number` calls a round over `--repeat` rounds taken in turn after a pause (latency.py's
reasoning), from tdsl's `Executor.profile`, OpenVINO's PERF_COUNT and onnxruntime's
profiler. tdsl's kernels name their ONNX nodes (the graph nodes' spans); OpenVINO's and
onnxruntime's layers are walked back to their conv as bench/layers.py does. With
`--threads 1` the kernels' own speed shows apart from how each runtime splits a layer over
cores (on a loaded machine the only comparison that holds).
"""
from __future__ import annotations

import argparse
import collections
import functools
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

import tdsl  # noqa: E402
import tdsl.graph as G  # noqa: E402
from common import add_target_option  # noqa: E402
import layers  # noqa: E402
import ov_session  # noqa: E402
from zoo import _model_and_input  # noqa: E402
from tdsl.graph import zoo as graph_zoo  # noqa: E402


# Whisper encoders of the released models' sizes: (d_model, layers, heads, ffn)
WHISPER = {"whisper_tiny": (384, 4, 6, 1536), "whisper_base": (512, 6, 8, 2048)}


def conv_rows(model):
    """{ONNX Conv node name: its description}, {node and output names: operator} and
    layers.onnx_families' `back`."""
    import onnx
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output)}
    shapes.update({i.name: list(i.dims) for i in model.graph.initializer})
    rows = {}
    for n in model.graph.node:
        if n.op_type != "Conv":
            continue
        a = {at.name: onnx.helper.get_attribute_value(at) for at in n.attribute}
        w, y = shapes[n.input[1]], shapes[n.output[0]]
        g = a.get("group", 1)
        k = "x".join(map(str, w[2:]))
        s, d = max(a.get("strides", [1])), max(a.get("dilations", [1]))
        rows[n.name] = (f"{w[1] * g}->{w[0]} k{k}" + (f"/s{s}" if s > 1 else "") + (f" d{d}" if d > 1 else "")
                        + (f" g{g}" if g > 1 else "") + f" -> {'x'.join(map(str, y[2:]))}")
    ops = {k: n.op_type for n in model.graph.node for k in [n.name] + list(n.output)}
    return rows, ops, layers.onnx_families(model)[1]


# the ONNX operators a conv's epilogue is made of (a transpose or a reshape after a conv
# starts what is no longer its epilogue: Whisper's positional add)
EPILOGUE = {"Relu", "Clip", "BatchNormalization", "Add", "Sub", "Mul", "Div", "Erf", "Sigmoid", "Tanh",
            "HardSigmoid", "HardSwish", "LeakyRelu", "Gelu"}


def anchor(keys, rows, ops, back):
    """The conv of `rows` that a runtime's layer made of ONNX nodes `keys` is built
    around: one of them, or the nearest conv found walking back from them (through every
    input, `back`: {node: the nodes making its inputs}) through the nodes of an epilogue
    (`ops`: {node or output name: its operator})."""
    for k in keys:
        frontier = [k]
        for _ in range(8):
            nxt = []
            for n in frontier:
                if n in rows:
                    return n
                if n is not None and ops.get(n) in EPILOGUE:
                    nxt.extend(back.get(n) or ())
            if not nxt:
                break
            frontier = nxt
    return None


def _per_conv(fastest, anchors):
    """{conv: the sum of the fastest calls of its layers} from {layer: seconds} and
    {layer: its conv or None}."""
    out = collections.Counter()
    for layer, t in fastest.items():
        if anchors.get(layer) is not None:
            out[anchors[layer]] += t
    return out


def _keep(out, layer, seconds):
    out[layer] = min(out.get(layer, float("inf")), seconds)


def tdsl_side(exe, rows, number):
    """{conv: tdsl's fastest call of the kernel built around it}."""
    anchors = {}
    for i, (k, _, n) in enumerate(exe.steps):
        spans = [str(getattr(m, "span", "")) for m in n.op.nodes()]
        anchors[f"{k.name}#{i}"] = next((s for s in spans if s in rows), None)
    best = {}
    for _ in range(number):
        for name, t, _ in exe.profile(1):
            _keep(best, name, t)
    return _per_conv(best, anchors)


def ov_side(request, originals, rows, ops, back, x, number):
    """{conv: OpenVINO's fastest calls of the layers built around it, summed}."""
    best = {}
    for _ in range(number):
        request.infer({0: x})
        for p in request.get_profiling_info():
            if p.real_time.total_seconds() > 0:
                _keep(best, p.node_name, p.real_time.total_seconds())
    return _per_conv(best, {k: anchor(originals.get(k, []), rows, ops, back) for k in best})


def ort_side(model, threads, feed, rows, ops, back, number):
    """{conv: onnxruntime's fastest calls of the layers built around it, summed}."""
    fams = dict.fromkeys(ops, layers.ELEMENTWISE)
    fastest = {name: t for name, (_, t) in layers.ort_profile(model, threads, feed, number, fams, back).items()}
    keys = sorted((k for k in ops if k), key=len, reverse=True)
    return _per_conv(fastest, {name: anchor([next((k for k in keys if name.startswith(k)), None)], rows, ops, back)
                               for name in fastest})


def run_model(name, target, threads, a):
    import openvino as ov
    model, x = _model_and_input(name)
    if a.length:
        x = np.random.default_rng(0).standard_normal(x.shape[:-1] + (a.length,)).astype(np.float32)
        model.graph.input[0].type.tensor_type.shape.dim[-1].dim_value = a.length
        for o in model.graph.output:
            o.type.tensor_type.ClearField("shape")
    rows, ops, back = conv_rows(model)
    exe = G.build(G.optimize(G.from_onnx(model), target=target), target=str(target))
    core = ov.Core()
    compiled = core.compile_model(core.read_model(model.SerializeToString()), "CPU",
                                  dict(ov_session.config(threads), PERF_COUNT="YES"))
    request = compiled.create_infer_request()
    originals, prim = {}, collections.defaultdict(set)
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()

        def get(k, info=info):
            return str(info[k].astype(str)) if k in info else ""
        originals[op.get_friendly_name()] = [s for s in get("originalLayersNames").split(",") if s]
        key = anchor(originals[op.get_friendly_name()], rows, ops, back)
        if key is not None and get("layerType") not in ("Const", "Reorder"):
            prim[key].add(f"{get('layerType')}:{get('primitiveType')}:{get('outputLayouts')}")
    feed = {model.graph.input[0].name: x}
    best = [{}, {}, {}]
    sides = [lambda: tdsl_side(exe, rows, a.number), lambda: ort_side(model, threads, feed, rows, ops, back, a.number),
             lambda: ov_side(request, originals, rows, ops, back, x, a.number)]
    for _ in range(a.repeat):
        for b, side in zip(best, sides):
            time.sleep(0.3)
            for key, t in side().items():
                _keep(b, key, t)      # each round's sum of fastest calls: the best round
    print(f"\n{name}, input {'x'.join(map(str, x.shape))}, {threads} thread(s): fastest call per layer, ms")
    print(f"  {'conv':34s} {'tdsl':>7s} {'ort':>7s} {'ov':>7s} {'/ov':>5s} {'/best':>5s}  OpenVINO runs it as")
    total = [0.0, 0.0, 0.0]
    for key in sorted(rows, key=lambda k: -best[0].get(k, 0.0)):
        t = [b.get(key, 0.0) for b in best]
        total = [s + v for s, v in zip(total, t)]
        fastest = min(t[1], t[2]) or float("inf")
        print(f"  {rows[key]:34s} {t[0] * 1e3:7.3f} {t[1] * 1e3:7.3f} {t[2] * 1e3:7.3f} "
              f"{t[0] / t[2] if t[2] else 0:5.2f} {t[0] / fastest:5.2f}  {' '.join(sorted(prim.get(key, ())))}")
    print(f"  {'sum':34s} {total[0] * 1e3:7.3f} {total[1] * 1e3:7.3f} {total[2] * 1e3:7.3f} "
          f"{total[0] / total[2] if total[2] else 0:5.2f}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default="conv1d_net,whisper_encoder", help="comma-separated model names")
    p.add_argument("--number", type=int, default=20)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="threads of each runtime (default: the cores)")
    p.add_argument("--length", type=int, default=0, help="the input's last axis (a 1-D signal's samples)")
    add_target_option(p)
    a = p.parse_args(argv)
    if not ov_session.available():
        raise SystemExit("bench/conv_layers.py compares with OpenVINO's per-layer profile: pip install openvino")
    if a.threads:
        os.environ["TDSL_NUM_THREADS"] = str(a.threads)
    target = tdsl.target.Target(f"llvm{f' -mcpu={a.mcpu}' if a.mcpu else ''}"
                                f"{f' -num-cores={a.threads}' if a.threads else ''}")
    print(target.describe())
    for name, size in WHISPER.items():
        graph_zoo.MODELS.setdefault(name, functools.partial(graph_zoo.whisper_encoder, *size))
    for name in a.only.split(","):
        run_model(name, target, a.threads or target.num_cores, a)


if __name__ == "__main__":
    main()
