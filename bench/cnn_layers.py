"""The layers of real CNNs one at a time, tdsl.graph vs onnxruntime (2 threads each, timed
alternately, best of repeats): 1x1 convs at the spatial sizes and strides of
resnet/densenet/efficientnet (with their epilogues), stem convs, squeeze-excite blocks,
squeezenet's fire module (concat of two convs) and pooling.

    python bench/cnn_layers.py                 # every layer
    python bench/cnn_layers.py --only 1x1,se   # layers whose name contains a substring
    python bench/cnn_layers.py --mcpu haswell

Per layer: tdsl and onnxruntime latency, their ratio, and tdsl's GFLOP/s on the conv
multiply-adds (2 flops per MAC).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import tdsl.graph as G  # noqa: E402
from common import add_target_option, target_from  # noqa: E402
from graph import _interleaved, _ort_session  # noqa: E402


def _model(nodes, inits, x_shape, out_name="y", out_shape=None):
    from onnx import TensorProto, helper, numpy_helper
    graph = helper.make_graph(
        nodes, "layer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


class Layers:
    """Builds small ONNX graphs; each adder returns (onnx model, x shape, conv MACs)."""

    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)
        self.k = 0

    def w(self, *shape, scale=None):
        self.k += 1
        fan = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        s = scale if scale is not None else 1.0 / np.sqrt(max(fan, 1))
        return f"w{self.k}", (self.rng.standard_normal(shape) * s).astype(np.float32)

    def conv(self, nodes, inits, x, ci, co, k, s=1, p=0, act="Relu", groups=1, bias=True):
        from onnx import helper
        wn, w = self.w(co, ci // groups, k, k)
        inits[wn] = w
        ins = [x, wn]
        if bias:
            bn, b = self.w(co, scale=0.1)
            inits[bn] = b
            ins.append(bn)
        self.k += 1
        y = f"c{self.k}"
        nodes.append(helper.make_node("Conv", ins, [y], kernel_shape=[k, k], strides=[s, s], pads=[p] * 4,
                                      group=groups))
        if act:
            self.k += 1
            nodes.append(helper.make_node(act, [y], [f"a{self.k}"]))
            y = f"a{self.k}"
        return y


def conv_layer(ci, co, hw, k, s=1, p=0, act="Relu", residual=False, groups=1):
    from onnx import helper
    L = Layers()
    nodes, inits = [], {}
    y = L.conv(nodes, inits, "x", ci, co, k, s, p, act=None, groups=groups)
    oh = (hw + 2 * p - k) // s + 1
    if residual:
        rn, r = L.w(1, co, oh, oh, scale=1.0)
        inits[rn] = r
        nodes.append(helper.make_node("Add", [y, rn], ["r"]))
        y = "r"
    if act:
        nodes.append(helper.make_node(act, [y], ["y"]))
    else:
        nodes.append(helper.make_node("Identity", [y], ["y"]))
    return _model(nodes, inits, (1, ci, hw, hw)), (1, ci, hw, hw), ci // groups * co * k * k * oh * oh


def dw_layer(c, hw, k, s=1):
    """A mobile net's depthwise conv with its ReLU."""
    return conv_layer(c, c, hw, k, s=s, p=k // 2, groups=c)


def se_block(c, hw, cs, act="Silu", gate="Sigmoid", then_conv=None):
    """x -> GlobalAveragePool -> 1x1 conv -> act -> 1x1 conv -> gate -> Mul(x) [-> 1x1 conv]."""
    from onnx import helper
    L = Layers()
    nodes, inits = [], {}
    nodes.append(helper.make_node("GlobalAveragePool", ["x"], ["g"]))
    if act == "Silu":
        h = L.conv(nodes, inits, "g", c, cs, 1, act=None)
        nodes += [helper.make_node("Sigmoid", [h], ["hs"]), helper.make_node("Mul", [h, "hs"], ["h"])]
        h = "h"
    else:
        h = L.conv(nodes, inits, "g", c, cs, 1, act=act)
    e = L.conv(nodes, inits, h, cs, c, 1, act=gate)
    out = "y" if then_conv is None else "m"
    nodes.append(helper.make_node("Mul", ["x", e], [out]))
    macs = 2 * c * cs
    if then_conv is not None:
        y = L.conv(nodes, inits, "m", c, then_conv, 1, act=None)
        nodes.append(helper.make_node("Identity", [y], ["y"]))
        macs += c * then_conv * hw * hw
    return _model(nodes, inits, (1, c, hw, hw)), (1, c, hw, hw), macs


def fire(ci, sq, e1, e3, hw):
    from onnx import helper
    L = Layers()
    nodes, inits = [], {}
    s = L.conv(nodes, inits, "x", ci, sq, 1)
    a = L.conv(nodes, inits, s, sq, e1, 1)
    b = L.conv(nodes, inits, s, sq, e3, 3, p=1)
    nodes.append(helper.make_node("Concat", [a, b], ["y"], axis=1))
    macs = hw * hw * (ci * sq + sq * e1 + 9 * sq * e3)
    return _model(nodes, inits, (1, ci, hw, hw)), (1, ci, hw, hw), macs


def linear_gelu(m, k, n, hw):
    """convnext's pointwise MLP on NHWC: MatMul + bias -> GELU (erf form) on (1, hw, hw, k),
    or on m tokens (1, m, k) with no hw."""
    from onnx import helper
    L = Layers()
    wn, w = L.w(k, n)
    bn, b = L.w(n, scale=0.1)
    inits = {wn: w, bn: b, "s2": np.array(np.sqrt(2.0), np.float32), "one": np.array(1.0, np.float32),
             "half": np.array(0.5, np.float32)}
    nodes = [helper.make_node("MatMul", ["x", wn], ["mm"]), helper.make_node("Add", ["mm", bn], ["h"]),
             helper.make_node("Div", ["h", "s2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["h", "e1"], ["g"]),
             helper.make_node("Mul", ["g", "half"], ["y"])]
    shape = (1, hw, hw, k) if hw else (1, m, k)     # hw None: a token sequence (ViT's MLP)
    return _model(nodes, inits, shape), shape, m * k * n


def linear(m, k, n):
    """MatMul of m tokens (1, m, k) by (k, n) weights, no bias: a language model's head."""
    from onnx import helper
    L = Layers()
    wn, w = L.w(k, n)
    return _model([helper.make_node("MatMul", ["x", wn], ["y"])], {wn: w}, (1, m, k)), (1, m, k), m * k * n


def pool(kind, c, hw, k, s, p=0, ceil=0):
    from onnx import helper
    attrs = {} if kind == "GlobalAveragePool" else dict(kernel_shape=[k, k], strides=[s, s], pads=[p] * 4,
                                                         ceil_mode=ceil)
    nodes = [helper.make_node(kind, ["x"], ["y"], **attrs)]
    return _model(nodes, {}, (1, c, hw, hw)), (1, c, hw, hw), 0


LAYERS = {
    # resnet50 bottlenecks
    "1x1 r50 64->256 56": lambda: conv_layer(64, 256, 56, 1, act=None),
    "1x1 r50 256->64 56": lambda: conv_layer(256, 64, 56, 1),
    "1x1 r50 256->512 s2 56": lambda: conv_layer(256, 512, 56, 1, s=2, act=None),
    "1x1 r50 512->128 28": lambda: conv_layer(512, 128, 28, 1),
    "1x1 r50 1024->256 14": lambda: conv_layer(1024, 256, 14, 1),
    "1x1 r50 256->1024 14 +res": lambda: conv_layer(256, 1024, 14, 1, residual=True),
    "1x1 r50 1024->2048 s2 14": lambda: conv_layer(1024, 2048, 14, 1, s=2, act=None),
    "1x1 r50 2048->512 7": lambda: conv_layer(2048, 512, 7, 1),
    "1x1 r50 512->2048 7 +res": lambda: conv_layer(512, 2048, 7, 1, residual=True),
    # densenet / efficientnet / squeezenet
    "1x1 dn 512->128 28": lambda: conv_layer(512, 128, 28, 1),
    "1x1 dn 1024->128 7": lambda: conv_layer(1024, 128, 7, 1),
    "1x1 en 40->240 28": lambda: conv_layer(40, 240, 28, 1, act=None),
    "1x1 en 672->112 14": lambda: conv_layer(672, 112, 14, 1, act=None),
    "1x1 en 1152->192 7": lambda: conv_layer(1152, 192, 7, 1, act=None),
    "1x1 en 320->1280 7": lambda: conv_layer(320, 1280, 7, 1, act=None),
    "1x1 sq 512->1000 13": lambda: conv_layer(512, 1000, 13, 1),
    "1x1 sq 128->32 27": lambda: conv_layer(128, 32, 27, 1),
    "1x1 sq 16->64 55": lambda: conv_layer(16, 64, 55, 1),
    "1x1 sq 128->16 55": lambda: conv_layer(128, 16, 55, 1),
    # shufflenet_v2: its last 1x1 (few pixels, 1.9 MB of weights) and its 24-channel stem
    "1x1 sh 464->1024 7": lambda: conv_layer(464, 1024, 7, 1),
    "1x1 sh 232->232 14": lambda: conv_layer(232, 232, 14, 1),
    # stems
    "stem sh 3->24 3x3 s2": lambda: conv_layer(3, 24, 224, 3, s=2, p=1),
    "stem r18 3->64 7x7 s2": lambda: conv_layer(3, 64, 224, 7, s=2, p=3),
    "stem sq 3->64 3x3 s2": lambda: conv_layer(3, 64, 224, 3, s=2, p=0),
    "stem en 3->32 3x3 s2": lambda: conv_layer(3, 32, 224, 3, s=2, p=1, act=None),
    # 3x3
    "3x3 r18 64->64 56": lambda: conv_layer(64, 64, 56, 3, p=1),
    "3x3 dn 128->32 56": lambda: conv_layer(128, 32, 56, 3, p=1, act=None),
    "3x3 r18 256->256 14": lambda: conv_layer(256, 256, 14, 3, p=1),
    "3x3 sq 16->64 55": lambda: conv_layer(16, 64, 55, 3, p=1),
    "3x3 sq 32->128 27": lambda: conv_layer(32, 128, 27, 3, p=1),
    # depthwise (mobilenet_v2, efficientnet) and mobilenet_v2's 1x1 at 14x14 and 7x7
    "dw mv2 32 112": lambda: dw_layer(32, 112, 3),
    "dw mv2 96 112 s2": lambda: dw_layer(96, 112, 3, 2),
    "dw mv2 144 56": lambda: dw_layer(144, 56, 3),
    "dw mv2 192 28": lambda: dw_layer(192, 28, 3),
    "dw mv2 576 14": lambda: dw_layer(576, 14, 3),
    "dw mv2 576 14 s2": lambda: dw_layer(576, 14, 3, 2),
    "dw mv2 960 7": lambda: dw_layer(960, 7, 3),
    "dw en 5x5 240 28": lambda: dw_layer(240, 28, 5),
    "dw en 5x5 672 14 s2": lambda: dw_layer(672, 14, 5, 2),
    "dw en 5x5 1152 7": lambda: dw_layer(1152, 7, 5),
    "1x1 mv2 64->384 14": lambda: conv_layer(64, 384, 14, 1, act="Relu"),
    "1x1 mv2 384->64 14": lambda: conv_layer(384, 64, 14, 1, act=None),
    "1x1 mv2 160->960 7": lambda: conv_layer(160, 960, 7, 1, act="Relu"),
    "1x1 mv2 960->160 7 +res": lambda: conv_layer(960, 160, 7, 1, act=None, residual=True),
    "1x1 mv2 16->96 112": lambda: conv_layer(16, 96, 112, 1, act="Relu"),
    "1x1 mv2 144->24 56": lambda: conv_layer(144, 24, 56, 1, act=None),
    # squeeze-excite
    "se en 96 112": lambda: se_block(96, 112, 4),
    "se en 240 28 +conv": lambda: se_block(240, 28, 10, then_conv=40),
    "se en 1152 7 +conv": lambda: se_block(1152, 7, 48, then_conv=192),
    # fire modules
    "fire sq 64,16,64,64 55": lambda: fire(64, 16, 64, 64, 55),
    "fire sq 256,48,192,192 13": lambda: fire(256, 48, 192, 192, 13),
    # convnext's pointwise MLP
    "linear cnx 96->384 56 gelu": lambda: linear_gelu(3136, 96, 384, 56),
    "linear cnx 384->1536 14 gelu": lambda: linear_gelu(196, 384, 1536, 14),
    "linear vit 768->3072 gelu": lambda: linear_gelu(197, 768, 3072, None),
    # the zoo's gpt2: 128 tokens of 256 through a 50257-word head (most of its time)
    "linear gpt2 head 256->50257": lambda: linear(128, 256, 50257),
    # pooling
    "pool max 3x3 s2 112 (r18)": lambda: pool("MaxPool", 64, 112, 3, 2, 1),
    "pool max 3x3 s2 ceil 111 (sq)": lambda: pool("MaxPool", 64, 111, 3, 2, 0, 1),
    "pool avg 2x2 s2 56 (dn)": lambda: pool("AveragePool", 128, 56, 2, 2),
    "pool gap 1280 7": lambda: pool("GlobalAveragePool", 1280, 7, 0, 0),
    "pool gap 144 56": lambda: pool("GlobalAveragePool", 144, 56, 0, 0),
}


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--only", default="", help="comma-separated substrings of layer names")
    p.add_argument("--number", type=int, default=10)
    p.add_argument("--repeat", type=int, default=7)
    add_target_option(p)
    a = p.parse_args(argv)
    target = target_from(a)
    threads = target.num_cores
    print(target.describe())
    print(f"\n{'layer':32s} {'tdsl ms':>8s} {'ort ms':>8s} {'ratio':>7s} {'GFLOP/s':>8s} {'kernels':>7s} {'err':>8s}")
    for name, make in LAYERS.items():
        if a.only and not any(s in name for s in a.only.split(",")):
            continue
        model, shape, macs = make()
        x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        exe = G.build(G.optimize(G.from_onnx(model), target=target), target=str(target))
        out = exe.run(x)[0]
        sess = _ort_session(model, threads)
        ref = sess.run(None, {"x": x})[0]
        err = float(np.abs(out - ref).max() / max(float(np.abs(ref).max()), 1e-30))
        t, t_ort = _interleaved(lambda: exe.run(x), lambda: sess.run(None, {"x": x}), a.number, a.repeat)
        gf = 2 * macs / t / 1e9 if macs else 0.0
        print(f"{name:32s} {t * 1e3:8.3f} {t_ort * 1e3:8.3f} {t / t_ort:6.2f}x {gf:8.1f} {len(exe.steps):7d} {err:8.1e}",
              flush=True)


if __name__ == "__main__":
    main()
