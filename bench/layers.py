"""Per-operator-family time of zoo networks: tdsl's kernels against OpenVINO's and
onnxruntime's layers, from each runtime's own per-layer profile, in one process.

    python bench/layers.py --only squeezenet1_1,efficientnet_b0
    python bench/layers.py --only conv1d_net --mcpu haswell   # OpenVINO capped at AVX2
    python bench/layers.py --only resnet18 --layers 8   # and the 8 slowest layers of each side
    python bench/layers.py --only squeezenet1_1 --batch 8   # a batch of 8 images

Sides: tdsl's `Executor.trace()` (each kernel's time inside whole runs), OpenVINO
compiled with PERF_COUNT (bench/ov_session.py's configuration; `get_profiling_info()`'s
real_time per layer, summed over the calls) and onnxruntime's profiler (the "_kernel_time"
events). Each side runs `--number` calls per round, in turn after a pause (bench/latency.py's
reasoning: another runtime's spinning threads would take a core); a family's time is its
best round's mean. The "whole" row is the best block of whole-network calls
(latency.blocks), without profiling, for scale: onnxruntime's and OpenVINO's profilers
add their timers, so their family rows sum to more; tdsl's kernels are timed inside
whole runs by the runtime's trace ring, a few nanoseconds each.

Families are found from the operator a kernel or layer is built around, its anchor:
a convolution (by kind: "1x1", "3x3", "7x7/s2", "depthwise 5x5", "dilated 3x3", "grouped
3x3", "1-D k=80/s4"; "/sN" when strided), "dense/1x1 on 1x1" (matrix products, Gemm,
and 1x1 convs on a 1x1 image, squeeze-excite's and classifiers', which one runtime may
run as the other), "attention" (the per-head products of two activations, Q K^T and
P V, and the softmax between them: 4-D operands; OpenVINO runs the three as one fused
MHA layer, tdsl and onnxruntime as three, so only their sum compares), "pooling",
"resize", "softmax/norm" (other softmaxes, layer norms), or, without any of those,
"elementwise/reorders" (activations, concats). A layout change counts with the layer it
feeds, or at the network's output with the one that makes it, on every side: OpenVINO's
Reorders (tdsl's stem reads the NCHW image in its own padding pass and its last kernel
writes NCHW: `ov_families`), onnxruntime's ReorderInput/Output (found in the graph it
runs: `ort_reorder_families`) and tdsl's own `layout.from_blocked` kernels (RegNet's
residual stream, blocked, read by each block's NCHW 1x1 conv: `tdsl_families`), so a
conv's row holds what getting its input into its layout costs. The mapping is approximate where runtimes fuse
differently: a tdsl kernel or OpenVINO layer counts whole for its anchor's family
(a conv with its bias, activation and squeeze-excite multiply is all "conv"); a kernel
or layer of any of the three with no anchor of its own (onnxruntime's activations, a
residual add, a transpose, DenseNet's BatchNorm+ReLU after each concat) counts with the
anchor that makes its first input, walking back through the ONNX graph, as a fused
epilogue would: one rule for all sides, so work one runtime fuses into a neighbour and
another runs alone lands in the same row (tdsl's kernels are found in the graph by the
ONNX node they end with). A ReduceMean of a 3-D tensor is a norm's (T5's RMS norm), and
a runtime's fused norm layer (onnxruntime's SkipLayerNormalization, named after the
residual add it takes in; OpenVINO's MVN) is "softmax/norm". Dilated convs are one family whatever their
kernel, since tdsl drops the taps that only read padding (a 3x3 d12 on 14x14 is a 2x2). tdsl's groups are
classified from their graph operators; OpenVINO's layers from the ONNX nodes they list
as originalLayersNames; onnxruntime's from the ONNX node whose name or output name is
the longest prefix of the event's name.

With --mcpu for a CPU with narrower vectors than this one, OpenVINO is capped at that ISA
as in bench/zoo.py (bench/isa_cap.py; --native-refs: not); a line under each table says
which of its layers ran wider anyway and their share of its layer time. onnxruntime
cannot be capped. Compare a family's row across sides with that in
mind: the "elementwise/reorders" row shows what went elsewhere.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

import tdsl  # noqa: E402
import tdsl.graph as G  # noqa: E402
from common import add_target_option, target_from  # noqa: E402
from graph import _ort_session  # noqa: E402
from latency import blocks  # noqa: E402
import isa_cap  # noqa: E402
import ov_session  # noqa: E402
from zoo import _model_and_input  # noqa: E402

ELEMENTWISE, DENSE, ATTENTION = "elementwise/reorders", "dense/1x1 on 1x1", "attention"
RANK = {"conv": 0, DENSE: 1, ATTENTION: 2, "pooling": 3, "resize": 4, "softmax/norm": 5, ELEMENTWISE: 9}


def conv_family(kernel, strides, dilation, groups, cin, in_spatial, out_spatial):
    """A convolution's family from its attributes (see the module docstring)."""
    k = "x".join(map(str, kernel))
    s = max(strides) if strides else 1
    stride = f"/s{s}" if s > 1 else ""
    if all(d == 1 for d in kernel) and all(d == 1 for d in out_spatial):
        return DENSE
    if len(kernel) == 1 or (len(kernel) == 2 and in_spatial[0] == 1 and kernel[0] == 1):
        return f"1-D k={kernel[-1]}{stride}"
    if groups > 1 and groups == cin:
        return f"depthwise {k}{stride}"
    if groups > 1:
        return f"grouped {k}{stride}"
    if any(d != 1 for d in dilation or ()):
        return f"dilated{stride}"     # no kernel size: tdsl drops the taps that only read padding
    return f"{k}{stride}"


def _kind(family):
    return "conv" if family not in RANK else family


def _anchor(families):
    """The family of a fused kernel or layer from those of its operators."""
    return min(families, key=lambda f: RANK[_kind(f)], default=ELEMENTWISE)


# ---- tdsl: graph operators -------------------------------------------------------------

_TDSL_OPS = {"nn.dense": DENSE, "nn.matmul": DENSE, "nn.batch_matmul": DENSE,
             "nn.max_pool1d": "pooling", "nn.max_pool2d": "pooling", "nn.avg_pool2d": "pooling",
             "nn.max_pool3d": "pooling", "nn.avg_pool3d": "pooling",   # and blocked 2-D pools
             "nn.global_avg_pool": "pooling", "mean": "pooling", "interp": "resize",
             "nn.softmax": "softmax/norm", "nn.log_softmax": "softmax/norm",
             "nn.layer_norm": "softmax/norm"}


def tdsl_node_family(n):
    op = n.op if isinstance(n.op, str) else ""
    if op == "mean" and n.args[0].type.ndim <= 3:
        return "softmax/norm"     # a norm's mean over the hidden axis (T5's RMS norm), not a pool
    if op.startswith("nn.conv") and "grad" not in op and "transpose" not in op:
        a = n.attrs
        x, w, y = n.args[0].type.shape, n.args[1].type.shape, n.type.shape
        blocked = op.endswith("_blocked")
        out_sp = y[2:-1] if blocked else y[2:]
        in_sp = x[2:-1] if blocked and a.get("in_blocked") else x[2:]
        return conv_family(w[2:], a["strides"], a.get("dilation"), a.get("groups", 1),
                           w[1] * a.get("groups", 1), in_sp, out_sp)
    if op in ("nn.matmul", "nn.softmax") and len(n.type.shape) == 4 or op == "nn.attention":
        return ATTENTION
    return _TDSL_OPS.get(op, ELEMENTWISE)


def _fastest(out, layer, family, seconds):
    """Keeps a layer's fastest call: a call another process preempted only looks slower."""
    if layer not in out or seconds < out[layer][1]:
        out[layer] = (family, seconds)


def tdsl_kernel_family(call, fams, back):
    """A kernel's family: its anchor's; a kernel with none (an activation, a residual add,
    a reorder) counts with the anchor that makes its input, walking back through the ONNX
    graph from the node it ends with, as the other runtimes' layers do (`layer_family`):
    the same rule on every side, so a pass one runtime fuses into its neighbour and
    another runs alone counts in the neighbour's family on both."""
    fam = _anchor([tdsl_node_family(m) for m in call.op.nodes()])
    if fam != ELEMENTWISE or fams is None or call.span not in fams:
        return fam
    return layer_family([call.span], None, fams, back)


def is_reorder(call):
    """A kernel the layout pass made (no ONNX node of its own) that only moves data: a
    `layout.from_blocked`, or the reshape of a pool's blocked 1x1 output to NCHW."""
    return not call.span and all(isinstance(m.op, str) and (m.op.startswith("layout.") or m.op == "reshape")
                                 for m in call.op.nodes())


def tdsl_families(calls, fams=None, back=None):
    """{kernel call: family} of a network's kernels in run order. A kernel that only
    changes the layout (`layout.from_blocked` standing alone where its blocked producer
    has other, blocked readers: a residual stream read by the next block's NCHW 1x1 conv)
    counts with the kernel it feeds, or, feeding none, with the one that makes it: the
    rule `ov_families` applies to OpenVINO's Reorders and `ort_reorder_families` to
    onnxruntime's, so a conv's row holds what getting its input into its layout costs
    on every side."""
    calls = list(calls)
    fam = {c: tdsl_kernel_family(c, fams, back) for c in calls}
    readers = collections.defaultdict(list)
    for c in calls:
        for a in c.args:
            readers[a].append(c)

    def settle(c, step, seen):
        while c in fam and is_reorder(c) and c not in seen:
            seen.add(c)
            nxt = readers.get(c, []) if step == "down" else [a for a in c.args if a in fam]
            if not nxt:
                return None
            c = nxt[0]
        return fam[c] if c in fam and not is_reorder(c) else None

    return {c: (settle(c, "down", set()) or settle(c, "up", set()) or fam[c]) if is_reorder(c) else fam[c]
            for c in calls}


def tdsl_profile(exe, number, fams=None, back=None):
    """{kernel: (family, its fastest of `number` calls, seconds)}: each kernel's time inside
    whole runs (`Executor.trace`: stamps from the runtime's trace ring, no timer between the
    kernels), so a small network's kernels sum to its call, not to its call plus a
    Python-side timer per kernel."""
    by_call = tdsl_families((n for _, _, n in exe.steps), fams, back)
    fam = {f"{k.name}#{i}": by_call[n] for i, (k, _, n) in enumerate(exe.steps)}
    out = {}
    names, times, _ = exe.trace(number)
    for name, each in zip(names, times.T):
        _fastest(out, name, fam[name], float(each.min()))
    return out


# ---- ONNX nodes (for OpenVINO's and onnxruntime's layers) -------------------------------

_ONNX_OPS = {"MatMul": DENSE, "Gemm": DENSE, "MaxPool": "pooling", "AveragePool": "pooling",
             "GlobalAveragePool": "pooling", "GlobalMaxPool": "pooling", "ReduceMean": "pooling",
             "Resize": "resize", "Upsample": "resize", "Softmax": "softmax/norm",
             "LogSoftmax": "softmax/norm", "LayerNormalization": "softmax/norm"}


def onnx_families(model):
    """{ONNX node name and each of its output names: family}, and {the same keys: the names
    of the nodes that make the node's inputs, in input order (those another node makes)}."""
    import onnx
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output)}
    shapes.update({i.name: list(i.dims) for i in model.graph.initializer})
    # a 4-D MatMul with a weight (ConvNeXt's Linear on NHWC) is a dense layer, not attention
    weights = {i.name for i in model.graph.initializer}
    weights.update(o for n in model.graph.node if n.op_type == "Constant" for o in n.output)
    out, made_by, back = {}, {}, {}
    for n in model.graph.node:
        made_by.update((o, n.name) for o in n.output)
        fam = _ONNX_OPS.get(n.op_type, ELEMENTWISE)
        if n.op_type == "ReduceMean" and len(shapes.get(n.input[0], ())) <= 3:
            fam = "softmax/norm"     # a norm's mean over the hidden axis (T5's RMS norm), not a pool
        if (len(shapes.get(n.output[0], ())) == 4 and n.op_type in ("MatMul", "Softmax")
                and not weights.intersection(n.input)):
            fam = ATTENTION
        if n.op_type == "Conv":
            a = {at.name: onnx.helper.get_attribute_value(at) for at in n.attribute}
            w, x, y = shapes[n.input[1]], shapes[n.input[0]], shapes[n.output[0]]
            g = a.get("group", 1)
            fam = conv_family(w[2:], a.get("strides", ()), a.get("dilations", ()), g, w[1] * g, x[2:], y[2:])
        for key in [n.name] + list(n.output):
            out[key] = fam
            # the inputs other nodes make: a bias add exported as Add(bias, x) walks back
            # to its matrix product, not to the initializer
            back[key] = tuple(made_by[i] for i in n.input if i in made_by)
    return out, back


def ov_profile(request, layer_fams, number, x):
    """{layer: (family, its fastest of `number` OpenVINO calls with PERF_COUNT, seconds)};
    `layer_fams` from `ov_families`."""
    out = {}
    for _ in range(number):
        request.infer({0: x})
        for p in request.get_profiling_info():
            fam = layer_fams.get(p.node_name, ELEMENTWISE)
            _fastest(out, p.node_name, fam, p.real_time.total_seconds())
    return out


def ov_families(layers, fams, back):
    """{layer name: family} of a compiled OpenVINO model's layers, given as (name, layer
    type, ONNX nodes it was made from, names of the layers it feeds, of those that feed
    it). A Reorder (a layout change: the image from NCHW to the blocked or NHWC layout its
    convs read, the last layer's output back to NCHW) counts with the layer it feeds, or
    at the network's output with the layer that makes it, because tdsl's kernels do that
    work themselves: a stem reads the NCHW image in its own padding pass, and the last
    kernel writes NCHW."""
    by_name = {name: (kind, keys, to, frm) for name, kind, keys, to, frm in layers}
    own = {name: layer_family(keys, kind, fams, back) for name, (kind, keys, _, _) in by_name.items()}

    def through(name, step, seen):
        # follows Reorders (a chain of them, on to a layer that is not one)
        while name in by_name and by_name[name][0] == "Reorder" and name not in seen:
            seen.add(name)
            nxt = [n for n in by_name[name][step] if n in by_name and by_name[n][0] not in ("Result", "Output")]
            if not nxt:
                return None
            name = nxt[0]
        return own.get(name) if name in by_name and by_name[name][0] != "Reorder" else None

    out = {}
    for name, (kind, _, _, _) in by_name.items():
        fam = own[name]
        if kind == "Reorder":
            fam = through(name, 2, set()) or through(name, 3, set()) or ELEMENTWISE
        out[name] = fam
    return out


def ov_layers(compiled):
    """(name, layer type, ONNX nodes, layers fed, layers feeding) of each layer of an
    OpenVINO compiled model (`ov_families`' input)."""
    rows = []
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        names = str(info["originalLayersNames"].astype(str)) if "originalLayersNames" in info else ""
        kind = str(info["layerType"].astype(str)) if "layerType" in info else op.get_type_name()
        to = [t.get_node().get_friendly_name() for o in op.outputs() for t in o.get_target_inputs()]
        frm = [i.get_source_output().get_node().get_friendly_name() for i in op.inputs()]
        rows.append((op.get_friendly_name(), kind, [s for s in names.split(",") if s], to, frm))
    return rows


# what a layer's own operator says its anchor is: onnxruntime's op_name, OpenVINO's layerType
_LAYER_KINDS = {"Conv": "conv", "FusedConv": "conv", "NchwcConv": "conv", "Convolution": "conv",
                "GroupConvolution": "conv", "MatMul": DENSE, "Gemm": DENSE, "FusedMatMul": DENSE,
                "FusedGemm": DENSE, "FullyConnected": DENSE, "MaxPool": "pooling", "NchwcMaxPool": "pooling",
                "GlobalAveragePool": "pooling", "AveragePool": "pooling", "Pooling": "pooling",
                "ReduceMean": "pooling", "Reduce": "pooling", "Resize": "resize", "NchwcUpsample": "resize",
                "Interpolate": "resize",
                # norms that a runtime fuses from several nodes (onnxruntime names them after
                # the residual add they take in, OpenVINO after any of their nodes)
                "LayerNormalization": "softmax/norm", "SkipLayerNormalization": "softmax/norm",
                "SimplifiedLayerNormalization": "softmax/norm",
                "SkipSimplifiedLayerNormalization": "softmax/norm", "MVN": "softmax/norm",
                "RMS": "softmax/norm"}

# activations onnxruntime fuses out of several nodes into a layer named after none of them;
# tdsl and OpenVINO run them in the matrix product before them
_FUSED_ACTIVATIONS = ("Gelu", "FastGelu", "BiasGelu", "QuickGelu")


def _same_kind(a, b):
    # a 1x1 conv on a 1x1 image is DENSE here and may be either to a runtime; a runtime's
    # MatMul layer may be attention's
    return a == b or {a, b} in ({"conv", DENSE}, {ATTENTION, DENSE}, {ATTENTION, "softmax/norm"})


def layer_family(keys, layer_type, fams, back):
    """The family of a runtime's layer made of ONNX nodes `keys`. A layer is named after
    some of its nodes only (onnxruntime names a conv fused with its activation after the
    activation; OpenVINO's conv with a batch norm folded in lists the norm, not the conv),
    so where the layer's operator says otherwise, the nodes before them are searched."""
    keys = [k for k in keys if k in fams]
    want = _LAYER_KINDS.get(layer_type)
    for k in keys if want else ():
        for _ in range(4):
            if k is None:
                break
            if _same_kind(_kind(fams[k]), want):
                return fams[k]
            k = next(iter(back.get(k, ())), None)
    if want == "softmax/norm":
        return want       # a fused norm named after the add before it
    if not keys and layer_type in _FUSED_ACTIVATIONS:
        return DENSE
    fam = _anchor([fams[k] for k in keys])
    # an activation, residual add or reorder run as a layer of its own counts with the
    # anchor that makes its input, as the other runtimes fuse it there
    return _nearest_anchor(keys[0], fams, back) if keys and fam == ELEMENTWISE else fam


def _nearest_anchor(key, fams, back, depth=6):
    """The family of the nearest anchor above ONNX node `key`, searching all its inputs
    breadth first (a residual add's projection is nearer than the chain of earlier layers
    its other input comes through). A matrix product or conv, which takes epilogues, wins
    over a norm or pool as near: Add(projection, previous LayerNorm)."""
    level, seen, other = [key], {key}, None
    for _ in range(depth + 1):
        nxt = []
        for k in level:
            f = fams[k]
            if f != ELEMENTWISE:
                if RANK[_kind(f)] <= RANK[ATTENTION]:
                    return f
                other = other or f
                continue
            for p in back.get(k, ()):
                if p not in seen:
                    seen.add(p)
                    nxt.append(p)
        if other:
            return other
        level = nxt
    return ELEMENTWISE


def ort_profile(model, threads, feed, number, fams, back):
    """{layer: (family, its fastest of `number` onnxruntime calls under its profiler, seconds)}."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level, so.intra_op_num_threads, so.enable_profiling = 3, threads, True
    with tempfile.TemporaryDirectory(prefix="ortprof-") as d:
        so.profile_file_prefix = os.path.join(d, "p")
        so.optimized_model_filepath = os.path.join(d, "optimized.onnx")   # its Reorder nodes' readers
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        import onnx
        optimized = onnx.load(so.optimized_model_filepath)
        for _ in range(3):
            sess.run(None, feed)
        for _ in range(number):
            sess.run(None, feed)
        with open(sess.end_profiling()) as f:
            events = json.load(f)
    # the warm-up calls are the first three "model_run" events
    runs = sorted(e["ts"] for e in events if e.get("name") == "model_run")
    first = runs[3] if len(runs) > 3 else 0
    keys = sorted((k for k in fams if k), key=len, reverse=True)
    reorders = ort_reorder_families(optimized, keys, fams, back)
    out = {}
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        if e["ts"] < first:
            continue
        name = e["name"][: -len("_kernel_time")]
        fam = reorders.get(name) or _ort_node_family(name, e["args"].get("op_name"), keys, fams, back)
        _fastest(out, name, fam, e["dur"] * 1e-6)
    return out


def _ort_node_family(name, op_type, keys, fams, back):
    """The family of onnxruntime's node `name` (a profile event's, or an optimized graph's
    node's): that of the ONNX node whose name or output name is the longest prefix of it."""
    key = next((k for k in keys if name.startswith(k)), None)
    return layer_family([key], op_type, fams, back)


_ORT_REORDERS = ("ReorderInput", "ReorderOutput")


def ort_reorder_families(optimized, keys, fams, back):
    """{name: family} of the ReorderInput/ReorderOutput nodes onnxruntime's NCHWc
    transformer put in `optimized` (the graph it runs): each counts with the node it
    feeds (its NCHWc conv; the NCHW layer after the chain), or, at the network's output,
    with the node that makes it, as OpenVINO's Reorders (`ov_families`) and tdsl's layout
    kernels (`tdsl_families`) do."""
    nodes = list(optimized.graph.node)
    made_by = {o: n for n in nodes for o in n.output}
    readers = collections.defaultdict(list)
    for n in nodes:
        for i in n.input:
            readers[i].append(n)

    def settle(n, step, seen):
        while n is not None and n.op_type in _ORT_REORDERS and n.name not in seen:
            seen.add(n.name)
            nxt = [r for o in n.output for r in readers.get(o, [])] if step == "down" \
                else [made_by[i] for i in n.input if i in made_by]
            n = nxt[0] if nxt else None
        return None if n is None or n.op_type in _ORT_REORDERS else _ort_node_family(n.name, n.op_type, keys, fams, back)

    return {n.name: settle(n, "down", set()) or settle(n, "up", set()) or ELEMENTWISE
            for n in nodes if n.op_type in _ORT_REORDERS}


# ---- the table -----------------------------------------------------------------------------

def _batched(name, n):
    """(model, input) of network `name` at batch `n`: its export with a symbolic batch
    (bench/dynamic.py) with the batch fixed to `n` in its inputs and outputs, so that every
    runtime builds it static."""
    import dynamic
    model, shapes = dynamic._sweep(name)
    for v in list(model.graph.input) + list(model.graph.output):
        dims = v.type.tensor_type.shape.dim
        if dims and dims[0].dim_param:
            dims[0].dim_value = n
    others = [d.dim_param for d in model.graph.input[0].type.tensor_type.shape.dim if d.dim_param]
    if others:
        raise SystemExit(f"--batch: {name} has other symbolic sizes ({', '.join(others)})")
    return model, dynamic._input(model, (n,) + tuple(shapes[0][1:]))


def run_model(name, target, a):
    import openvino as ov
    model, x = _model_and_input(name) if a.batch == 1 else _batched(name, a.batch)
    threads = a.threads or target.num_cores
    exe = G.build(G.optimize(G.from_onnx(model), target=target), target=str(target))
    feed = {model.graph.input[0].name: x}
    sess = _ort_session(model, threads)
    fams, back = onnx_families(model)
    core = ov.Core()
    compiled = core.compile_model(core.read_model(model.SerializeToString()), "CPU",
                                  dict(ov_session.config(threads), PERF_COUNT="YES"))
    request = compiled.create_infer_request()
    layer_fams = ov_families(ov_layers(compiled), fams, back)
    ref = sess.run(None, feed)[0]
    err = float(np.abs(exe.run(x)[0] - ref).max() / max(float(np.abs(ref).max()), 1e-30))
    whole = blocks([lambda: exe.run(x), lambda: sess.run(None, feed), lambda: request.infer({0: x})],
                   a.number, a.repeat)
    sides = [lambda: tdsl_profile(exe, a.number, fams, back), lambda: ort_profile(model, threads, feed, a.number, fams, back),
             lambda: ov_profile(request, layer_fams, a.number, x)]
    layers = [{} for _ in sides]
    for _ in range(a.repeat):
        for i, side in enumerate(sides):
            time.sleep(0.3)
            for layer, (fam, t) in side().items():
                _fastest(layers[i], layer, fam, t)
    best = [collections.Counter() for _ in sides]
    for b, side in zip(best, layers):
        for fam, t in side.values():
            b[fam] += t
    print(f"\n{name}{f' batch {a.batch}' if a.batch != 1 else ''} (tdsl max rel err {err:.1e})")
    print(f"  {'family':24s} {'tdsl ms':>8s} {'ort ms':>8s} {'ov ms':>8s} {'/ov':>6s} {'/best':>6s}")
    rows = sorted(set().union(*best), key=lambda f: -best[0].get(f, 0.0))
    slow = []
    for fam in rows + ["sum", "whole"]:
        if fam == "sum":
            t = [sum(b.values()) for b in best]
        elif fam == "whole":
            t = whole
        else:
            t = [b.get(fam, 0.0) for b in best]
        fastest = min(t[1], t[2])
        # a family one side has none of (folded into another layer) has no ratio: nan
        r_ov = t[0] / t[2] if t[2] else (float("inf") if t[0] else float("nan"))
        r_best = t[0] / fastest if fastest else (float("inf") if t[0] else float("nan"))
        flag = " <" if r_best > 1.3 and t[0] > 0.02 * whole[0] and fam not in ("sum", "whole") else ""
        if flag:
            slow.append((name, fam, r_best))
        print(f"  {fam:24s} {t[0] * 1e3:8.3f} {t[1] * 1e3:8.3f} {t[2] * 1e3:8.3f} {r_ov:6.2f} {r_best:6.2f}{flag}")
    if a.cap:
        request.infer({0: x})
        note = isa_cap.ov_note(isa_cap.ov_layer_isas(compiled), a.cap)
        share = isa_cap.ov_wide_share(request.get_profiling_info())
        print(f"  {note or f'OpenVINO capped at {a.cap}: every layer at it'}"
              f"{f'; {share:.0%} of its layer time in the wider layers' if note else ''}")
    for fam in a.explain.split(",") if a.explain else ():
        for side, lay in zip(("tdsl", "ort", "ov"), layers):
            top = sorted(((t, n) for n, (f, t) in lay.items() if f == fam), reverse=True)[:a.layers or 6]
            print(f"  {fam} in {side}: " + ", ".join(f"{n} {t * 1e3:.3f}" for t, n in top))
    if a.layers:
        top = exe.profile_text(number=a.number, top=a.layers)
        print("\n".join("  " + line for line in top.splitlines()))
    return slow


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--only", default="conv1d_net,squeezenet1_1,efficientnet_b0,mobilenet_v2,"
                   "deeplabv3_mobilenet_v3_large,resnet18,regnet_y_400mf,shufflenet_v2_x1_0,"
                   "mobilenet_v3_small", help="comma-separated model names (zoo or bench/zoo.py's helpers)")
    p.add_argument("--number", type=int, default=10)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--layers", type=int, default=0, help="also print tdsl's N slowest kernels")
    p.add_argument("--explain", default="", help="comma-separated families: print each side's "
                   "layers in them (the largest --layers, default 6), to see what a row holds")
    p.add_argument("--batch", type=int, default=1, help="images (or sequences) a call")
    p.add_argument("--threads", type=int, default=0,
                   help="threads of each runtime (default: the CPU's cores); on a shared machine 1 "
                        "keeps another process's time slices from stalling a parallel loop")
    p.add_argument("--native-refs", action="store_true",
                   help="with --mcpu for a narrower CPU: leave OpenVINO at the host's ISA")
    add_target_option(p)
    a = p.parse_args(argv)
    if a.threads:
        os.environ["TDSL_NUM_THREADS"] = str(a.threads)
    a.cap = "" if a.native_refs else isa_cap.cap_for(target_from(a), tdsl.target.Target.host())
    if a.cap:
        isa_cap.apply(a.cap)                  # before ov_session.available() loads openvino
    if not ov_session.available():
        raise SystemExit("bench/layers.py compares with OpenVINO's per-layer profile: pip install openvino")
    target = target_from(a)
    if a.threads:   # the schedules' parallel loops too
        target = tdsl.target.Target(f"llvm{f' -mcpu={a.mcpu}' if a.mcpu else ''} -num-cores={a.threads}")
    print(f"{target.describe()}\n{target.num_cores} threads each; '<': tdsl over 1.3x the faster "
          "runtime's same family (families over 2% of tdsl's time)")
    host = tdsl.target.Target.host()
    for line in isa_cap.header(isa_cap.cap_for(target, host), a.native_refs,
                               f"{host.cpu}, {host.vector_bits}-bit vectors"):
        print(line)
    slow = []
    for name in a.only.split(","):
        slow += run_model(name, target, a)
    print("\nfamilies above 1.3x: " + ("; ".join(f"{m} {f} {r:.2f}x" for m, f, r in slow) or "none"))


if __name__ == "__main__":
    main()
