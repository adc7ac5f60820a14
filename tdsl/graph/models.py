"""Test and benchmark networks built with `onnx.helper` (random weights, no torch needed):
a ResNet-18-shaped CNN, a MobileNetV2 block stack, a ShuffleNetV2, 1-D and 3-D CNNs, an MLP and a
transformer encoder layer,
written the way exporters write them (Conv + BatchNormalization, Clip as ReLU6, MatMul +
Add, Reshape/Transpose for attention heads, Erf GELU, LayerNormalization). For training
comparisons: `with_loss` appends a cross-entropy loss, `trainable` picks the weights torch
would train, and `torch_forward` replays a model with torch.nn.functional (torch imported
only there)."""
from __future__ import annotations

import math

import numpy as np

OPSET = 17


class _B:
    def __init__(self, seed=0):
        import onnx  # noqa: F401
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self.k = 0

    def name(self, base):
        self.k += 1
        return f"{base}_{self.k}"

    def const(self, arr, base="w"):
        from onnx import numpy_helper
        n = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), n))
        return n

    def weight(self, shape, fan_in, base="w"):
        return self.const((self.rng.standard_normal(shape) * math.sqrt(2.0 / fan_in)).astype(np.float32), base)

    def node(self, op, ins, n_out=1, **attrs):
        from onnx import helper
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, ins, outs, name=self.name(op), **attrs))
        return outs[0] if n_out == 1 else outs

    def conv_bn(self, x, cin, cout, k, stride=1, groups=1, act="relu", nd=2, dilation=1):
        w = self.weight((cout, cin // groups) + (k,) * nd, cin // groups * k ** nd)
        y = self.node("Conv", [x, w], kernel_shape=[k] * nd, strides=[stride] * nd,
                      pads=[dilation * (k // 2)] * (2 * nd), group=groups, dilations=[dilation] * nd)
        r = self.rng
        bn = [self.const((1 + 0.1 * r.standard_normal(cout)).astype(np.float32), "gamma"),
              self.const((0.1 * r.standard_normal(cout)).astype(np.float32), "beta"),
              self.const((0.1 * r.standard_normal(cout)).astype(np.float32), "mean"),
              self.const((1 + 0.1 * r.random(cout)).astype(np.float32), "var")]
        y = self.node("BatchNormalization", [y] + bn, epsilon=1e-5)
        if act == "relu":
            y = self.node("Relu", [y])
        elif act == "relu6":
            y = self.node("Clip", [y, self.const(np.float32(0), "zero"), self.const(np.float32(6), "six")])
        return y

    def linear(self, x, k, n, gemm=False):
        w = self.weight((n, k) if gemm else (k, n), k)
        b = self.const((0.01 * self.rng.standard_normal(n)).astype(np.float32), "b")
        if gemm:
            return self.node("Gemm", [x, w, b], transB=1)
        return self.node("Add", [self.node("MatMul", [x, w]), b])

    def model(self, inputs, outputs, name):
        from onnx import helper, TensorProto
        g = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
            self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
        m.ir_version = 8
        return m


def resnet18(batch=1, size=224, num_classes=1000, width=64, seed=0):
    """ResNet-18: 7x7/2 stem, max pool, 4 stages of 2 basic blocks, global pool, fc."""
    b = _B(seed)
    x = b.conv_bn("input", 3, width, 7, stride=2)
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = width
    for stage, cout in enumerate([width, width * 2, width * 4, width * 8]):
        for blk in range(2):
            stride = 2 if stage > 0 and blk == 0 else 1
            y = b.conv_bn(x, cin, cout, 3, stride)
            y = b.conv_bn(y, cout, cout, 3, 1, act=None)
            if stride != 1 or cin != cout:
                sc = b.conv_bn(x, cin, cout, 1, stride, act=None)
            else:
                sc = x
            x = b.node("Relu", [b.node("Add", [y, sc])])
            cin = cout
    x = b.node("GlobalAveragePool", [x])
    x = b.node("Flatten", [x], axis=1)
    y = b.linear(x, cin, num_classes, gemm=True)
    return b.model([("input", [batch, 3, size, size])], [y], "resnet18")


def mobilenetv2_blocks(batch=1, size=56, seed=0):
    """A stem and MobileNetV2 inverted-residual blocks (expand 1x1, depthwise 3x3, project
    1x1, residual add where shapes allow), ReLU6 as Clip."""
    b = _B(seed)
    x = b.conv_bn("input", 3, 32, 3, stride=2, act="relu6")
    cin = 32
    for t, cout, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 2, 2)]:
        for i in range(n):
            stride = s if i == 0 else 1
            hid = cin * t
            y = x
            if t != 1:
                y = b.conv_bn(y, cin, hid, 1, act="relu6")
            y = b.conv_bn(y, hid, hid, 3, stride, groups=hid, act="relu6")
            y = b.conv_bn(y, hid, cout, 1, act=None)
            if stride == 1 and cin == cout:
                y = b.node("Add", [x, y])
            x, cin = y, cout
    x = b.node("GlobalAveragePool", [x])
    x = b.node("Flatten", [x])
    y = b.linear(x, cin, 10, gemm=True)
    return b.model([("input", [batch, 3, size, size])], [y], "mobilenetv2_blocks")


def shufflenet_v2(batch=1, size=64, widths=(116, 232, 464), repeats=(2, 2, 2), seed=0):
    """ShuffleNetV2 as torchvision exports it: a 3x3/2 stem, a 3x3/2 max pool, stages of a
    stride-2 unit (both branches: depthwise 3x3/2 + 1x1; 1x1 + depthwise 3x3/2 + 1x1) and
    stride-1 units (the channels split in halves, the second through 1x1 + depthwise 3x3
    + 1x1), each unit ending in a concatenation and a channel shuffle of two groups
    (Reshape, Transpose, Reshape), then a 1x1 conv to 1024, a ReduceMean over the image,
    classifier."""
    b = _B(seed)
    x = b.conv_bn("input", 3, 24, 3, stride=2)
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin, hw = 24, -(-size // 4)

    def branch(y, c, half, stride):
        y = b.conv_bn(y, c, half, 1)
        y = b.conv_bn(y, half, half, 3, stride, groups=half, act=None)
        return b.conv_bn(y, half, half, 1)

    def shuffle(y, c):
        # (0: the input's batch, so that the batch may be made symbolic)
        y = b.node("Reshape", [y, b.const(np.array([0, 2, c // 2, hw, hw], np.int64), "shape")])
        y = b.node("Transpose", [y], perm=[0, 2, 1, 3, 4])
        return b.node("Reshape", [y, b.const(np.array([0, c, hw, hw], np.int64), "shape")])

    for cout, n in zip(widths, repeats):
        half = cout // 2
        hw = -(-hw // 2)
        left = b.conv_bn(b.conv_bn(x, cin, cin, 3, 2, groups=cin, act=None), cin, half, 1)
        x = shuffle(b.node("Concat", [left, branch(x, cin, half, 2)], axis=1), cout)
        for _ in range(n - 1):
            x1, x2 = b.node("Split", [x, b.const(np.array([half, half], np.int64), "halves")], n_out=2, axis=1)
            x = shuffle(b.node("Concat", [x1, branch(x2, half, half, 1)], axis=1), cout)
        cin = cout
    x = b.conv_bn(x, cin, 1024, 1)
    x = b.node("ReduceMean", [x], axes=[2, 3], keepdims=0)     # torchvision's x.mean([2, 3])
    y = b.linear(x, 1024, 10, gemm=True)
    return b.model([("input", [batch, 3, size, size])], [y], "shufflenet_v2")


def conv1d_net(batch=1, length=16000, seed=0):
    """A 1-D CNN over a signal (audio, sensors): a strided stem, residual stages of 1-D
    convs (one dilated), a depthwise-separable block, global pool, classifier."""
    b = _B(seed)
    x = b.conv_bn("input", 1, 32, 11, stride=4, nd=1)
    x = b.node("MaxPool", [x], kernel_shape=[3], strides=[2], pads=[1, 1])
    cin = 32
    for cout, stride, dil in [(64, 2, 1), (128, 2, 2), (256, 2, 1)]:
        y = b.conv_bn(x, cin, cout, 3, stride, nd=1)
        y = b.conv_bn(y, cout, cout, 3, 1, act=None, nd=1, dilation=dil)
        sc = b.conv_bn(x, cin, cout, 1, stride, act=None, nd=1)
        x = b.node("Relu", [b.node("Add", [y, sc])])
        cin = cout
    x = b.conv_bn(x, cin, cin, 5, groups=cin, nd=1)
    x = b.conv_bn(x, cin, cin, 1, nd=1)
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])])
    y = b.linear(x, cin, 10, gemm=True)
    return b.model([("input", [batch, 1, length])], [y], "conv1d_net")


def conv3d_net(batch=1, frames=8, size=56, seed=0):
    """A small video CNN: 3-D conv stem, residual 3x3x3 stages, global pool, classifier."""
    b = _B(seed)
    x = b.conv_bn("input", 3, 32, 3, stride=1, nd=3)
    cin = 32
    for cout, stride in [(32, 1), (64, 2), (128, 2)]:
        y = b.conv_bn(x, cin, cout, 3, stride, nd=3)
        y = b.conv_bn(y, cout, cout, 3, 1, act=None, nd=3)
        sc = x if stride == 1 and cin == cout else b.conv_bn(x, cin, cout, 1, stride, act=None, nd=3)
        x = b.node("Relu", [b.node("Add", [y, sc])])
        cin = cout
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])])
    y = b.linear(x, cin, 10, gemm=True)
    return b.model([("input", [batch, 3, frames, size, size])], [y], "conv3d_net")


def mlp(batch=8, sizes=(784, 512, 256, 10), seed=0):
    b = _B(seed)
    x = "input"
    for i, (k, n) in enumerate(zip(sizes, sizes[1:])):
        x = b.linear(x, k, n, gemm=(i % 2 == 0))
        if i < len(sizes) - 2:
            x = b.node("Relu", [x])
    y = b.node("Softmax", [x], axis=-1)
    return b.model([("input", [batch, sizes[0]])], [y], "mlp")


def transformer_encoder(batch=1, seq=64, d_model=256, heads=4, ff=1024, seed=0):
    """One post-norm encoder layer: multi-head self-attention and a GELU feed-forward."""
    b = _B(seed)
    dh = d_model // heads
    x = "input"

    # a symbolic batch or sequence (a dim_param name) is copied from the input (ONNX's 0)
    lead = [0 if isinstance(d, str) else d for d in (batch, seq)]

    def heads_of(t):
        t = b.node("Reshape", [t, b.const(np.array([*lead, heads, dh], np.int64), "shape")])
        return b.node("Transpose", [t], perm=[0, 2, 1, 3])
    q = heads_of(b.linear(x, d_model, d_model))
    k = heads_of(b.linear(x, d_model, d_model))
    v = heads_of(b.linear(x, d_model, d_model))
    kt = b.node("Transpose", [k], perm=[0, 1, 3, 2])
    s = b.node("Div", [b.node("MatMul", [q, kt]), b.const(np.float32(math.sqrt(dh)), "scale")])
    p = b.node("Softmax", [s], axis=-1)
    o = b.node("MatMul", [p, v])
    o = b.node("Transpose", [o], perm=[0, 2, 1, 3])
    o = b.node("Reshape", [o, b.const(np.array([*lead, d_model], np.int64), "shape")])
    o = b.linear(o, d_model, d_model)
    h = b.node("Add", [x, o])
    g1 = b.const(np.ones(d_model, np.float32), "ln_g")
    b1 = b.const(np.zeros(d_model, np.float32), "ln_b")
    h = b.node("LayerNormalization", [h, g1, b1], axis=-1, epsilon=1e-5)
    f = b.linear(h, d_model, ff)
    e = b.node("Erf", [b.node("Div", [f, b.const(np.float32(math.sqrt(2)), "sqrt2")])])
    f = b.node("Mul", [b.node("Mul", [f, b.node("Add", [e, b.const(np.float32(1), "one")])]),
                       b.const(np.float32(0.5), "half")])
    f = b.linear(f, ff, d_model)
    y = b.node("Add", [h, f])
    g2 = b.const(np.ones(d_model, np.float32), "ln_g")
    b2 = b.const(np.zeros(d_model, np.float32), "ln_b")
    y = b.node("LayerNormalization", [y, g2, b2], axis=-1, epsilon=1e-5)
    return b.model([("input", [batch, seq, d_model])], [y], "transformer_encoder")


def with_loss(model, batch=None):
    """`model` (one float output of logits, or of their Softmax) with a trailing
    SoftmaxCrossEntropyLoss on the logits and an int64 `labels` input of `batch` entries
    (default: the first input's first dimension); the loss is the only output. Edits
    `model` in place and returns it."""
    from onnx import TensorProto, helper
    g = model.graph
    if batch is None:
        batch = g.input[0].type.tensor_type.shape.dim[0].dim_value
    out = g.output[0].name
    last = g.node[len(g.node) - 1]
    if last.op_type == "Softmax" and last.output[0] == out:      # the loss has the softmax
        out = last.input[0]
        del g.node[len(g.node) - 1]
    g.node.append(helper.make_node("SoftmaxCrossEntropyLoss", [out, "labels"], ["loss"]))
    g.input.append(helper.make_tensor_value_info("labels", TensorProto.INT64, [batch]))
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("loss", TensorProto.FLOAT, []))
    return model


def trainable(model):
    """(trained, initializers): copies of the floating-point initializers except
    BatchNormalization's running statistics (torch does not train those either), in the
    model's order, and every initializer by name."""
    from onnx import numpy_helper
    stats = {n.input[i] for n in model.graph.node if n.op_type == "BatchNormalization" for i in (3, 4)}
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    return {k: v.copy() for k, v in inits.items() if k not in stats and v.dtype.kind == "f"}, inits


def torch_forward(model, params, feeds, batch_stats=False):
    """The first output of the ONNX graph, computed with torch.nn.functional (so that
    autograd differentiates it): `params` are the initializers as torch tensors (the trained
    ones with requires_grad), `feeds` the inputs. Covers the operators of this module's CNNs
    and MLP with a loss; another raises NotImplementedError. With `batch_stats`, batch norms
    normalize by the batch's statistics and store them in `params`' running statistics
    (torch's training mode with momentum 1)."""
    import torch
    from onnx import helper
    F = torch.nn.functional
    env = dict(params, **feeds)
    for n in model.graph.node:
        a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
        x = [env[i] for i in n.input]
        op = n.op_type
        if op == "Conv":
            pads = a.get("pads", [0] * 4)
            if pads[: len(pads) // 2] != pads[len(pads) // 2:]:
                raise NotImplementedError("asymmetric Conv pads")
            y = F.conv2d(x[0], x[1], x[2] if len(x) > 2 else None, a.get("strides", 1),
                         pads[: len(pads) // 2], a.get("dilations", 1), a.get("group", 1))
        elif op == "BatchNormalization":
            y = F.batch_norm(x[0], x[3], x[4], x[1], x[2], batch_stats, 1.0, a.get("epsilon", 1e-5))
        elif op == "Relu":
            y = F.relu(x[0])
        elif op == "MaxPool":
            pads = a.get("pads", [0] * 4)
            y = F.max_pool2d(x[0], a["kernel_shape"], a.get("strides", 1), pads[: len(pads) // 2])
        elif op == "Add":
            y = x[0] + x[1]
        elif op == "GlobalAveragePool":
            y = x[0].mean((2, 3), keepdim=True)
        elif op == "Flatten":
            y = x[0].flatten(a.get("axis", 1))
        elif op == "Gemm":
            m0 = x[0].T if a.get("transA") else x[0]
            m1 = x[1].T if a.get("transB") else x[1]
            y = torch.addmm(x[2], m0, m1, beta=a.get("beta", 1.0), alpha=a.get("alpha", 1.0))
        elif op == "MatMul":
            y = x[0] @ x[1]
        elif op == "SoftmaxCrossEntropyLoss":
            y = F.cross_entropy(x[0], x[1])
        else:
            raise NotImplementedError(f"no torch rule for ONNX {op}")
        env[n.output[0]] = y
    return env[model.graph.output[0].name]


def calibrate_batch_norm(model, feeds):
    """Sets every BatchNormalization's running mean and variance (in place, in `model`'s
    initializers) to the statistics of its input when `model` runs on `feeds` (numpy
    arrays, one per model input), as training would leave them: the activations of the inference-form network
    are then normalized and its loss well scaled, where random statistics let them grow
    stage after stage. Needs torch. Returns `model`."""
    import torch
    from onnx import numpy_helper
    stats = {n.input[i] for n in model.graph.node if n.op_type == "BatchNormalization" for i in (3, 4)}

    def as_torch(a):             # float64, so that the statistics are exact to float32
        return torch.from_numpy(a.astype(np.float64) if a.dtype.kind == "f" else a)
    params = {i.name: as_torch(numpy_helper.to_array(i)) for i in model.graph.initializer}
    tfeeds = {k: as_torch(np.asarray(v)) for k, v in feeds.items()}
    with torch.no_grad():
        torch_forward(model, params, tfeeds, batch_stats=True)
    for k, init in enumerate(model.graph.initializer):
        if init.name in stats:
            model.graph.initializer[k].CopyFrom(
                numpy_helper.from_array(params[init.name].numpy().astype(np.float32), init.name))
    return model


def onnxruntime_run(model, feeds):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def quantize_qdq(model, feeds=4, per_channel=True, seed=0):
    """`model` quantized by onnxruntime's quantizer in the QDQ form (uint8 activations, int8
    weights), calibrated on `feeds` random inputs (normal; integer ids below 1000); its
    pre-processing folds batch norms and lets the quantizer drop the ReLUs that a quantized
    output's range covers (skipped where onnxruntime's shape inference fails on the model)."""
    import os
    import tempfile

    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from onnx import helper as onnx_helper
    rng = np.random.default_rng(seed)
    inputs = {i.name: ([d.dim_value for d in i.type.tensor_type.shape.dim],
                       onnx_helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)) for i in model.graph.input}

    def feed(shape, dtype):
        # token ids (a transformer's integer inputs) below 1000, as zoo.example_input's
        if np.issubdtype(dtype, np.integer):
            return rng.integers(0, 1000, shape).astype(dtype)
        return rng.standard_normal(shape).astype(dtype)
    batches = [{n: feed(*v) for n, v in inputs.items()} for _ in range(feeds)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(batches)

        def get_next(self):
            return next(self.it, None)

    with tempfile.TemporaryDirectory() as d:
        f, p, q = (os.path.join(d, n) for n in ("float.onnx", "pre.onnx", "qdq.onnx"))
        onnx.save(model, f)
        try:
            quant_pre_process(f, p)
        except Exception:   # its symbolic shape inference fails on some exports (ViT's)
            p = f
        quantize_static(p, q, Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8, per_channel=per_channel)
        return onnx.load(q)
