"""ONNX converters, losses: SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss as
compositions of graph operators. The label pick is a product with a one-hot mask (labels
compared with the class indices), not a gather, so the loss's backward pass is elementwise
work and reductions (graph/autodiff/) rather than a scatter."""
from __future__ import annotations

import numpy as np

from ...errors import GraphError
from ..ir import Const
from .registry import const_like, converter, reshape_to


def _nll(ctx, node, logp, labels, weight, attrs):
    """The negative log-likelihood of `labels` under the log-probabilities `logp` (N, C, d...)."""
    dt = logp.type.dtype
    n, c = logp.type.shape[:2]
    rest = logp.type.shape[2:]
    if labels.type.shape != (n, *rest) or not labels.type.dtype.startswith(("int", "uint")):
        raise GraphError(f"labels {labels.type} must be integers of shape {(n, *rest)}")
    lab = reshape_to(ctx, labels, (n, 1, *rest))
    classes = Const(np.arange(c, dtype=labels.type.dtype).reshape((1, c) + (1,) * len(rest)))
    hot = ctx.call("cast", [ctx.call("equal", [lab, classes])], dtype=dt)
    if weight is not None:
        hot = ctx.call("multiply", [hot, reshape_to(ctx, weight, (1, c) + (1,) * len(rest))])
    ignore = attrs.get("ignore_index")
    if ignore is not None:
        keep = ctx.call("cast", [ctx.call("not_equal", [lab, const_like(int(ignore), labels.type.dtype)])], dtype=dt)
        hot = ctx.call("multiply", [hot, keep])
    per = ctx.call("negative", [ctx.call("sum", [ctx.call("multiply", [hot, logp])], axis=[1], keepdims=False)])
    red = attrs.get("reduction", "mean")
    if red == "none":
        return per
    total = ctx.call("sum", [per], axis=None, keepdims=False)
    if red == "sum":
        return total
    if red != "mean":
        raise GraphError(f"unknown reduction '{red}' (none, sum, mean)")
    if weight is None and ignore is None:
        return ctx.call("multiply", [total, const_like(1.0 / max(int(np.prod(per.type.shape)), 1), dt)])
    # weighted mean: divided by the total weight of the labels (onnx's definition)
    count = ctx.call("sum", [hot], axis=None, keepdims=False)
    return ctx.call("divide", [total, count])


@converter("SoftmaxCrossEntropyLoss")
def _softmax_cross_entropy(ctx, node, ins, attrs):
    scores, labels = ins[0], ins[1]
    weight = ins[2] if len(ins) > 2 else None
    if scores.type.ndim < 2:
        raise GraphError(f"scores {scores.type} need rank >= 2 (N, C, ...)")
    logp = ctx.call("nn.log_softmax", [scores], axis=1)
    loss = _nll(ctx, node, logp, labels, weight, attrs)
    return [loss, logp] if len(node.output) > 1 and node.output[1] else loss


@converter("NegativeLogLikelihoodLoss")
def _nll_loss(ctx, node, ins, attrs):
    logp, labels = ins[0], ins[1]
    weight = ins[2] if len(ins) > 2 else None
    if logp.type.ndim < 2:
        raise GraphError(f"input {logp.type} needs rank >= 2 (N, C, ...)")
    return _nll(ctx, node, logp, labels, weight, attrs)
