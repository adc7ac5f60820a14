"""`gradient(output, inputs, head)`: reverse mode over a graph of compute stages.

Stages are visited from the output towards the inputs (consumers before producers); each
stage turns the adjoints of its outputs into contributions to the adjoints of the tensors
it reads (`stage.stage_adjoints`), and the contributions a tensor receives from several
reads or consumers are summed by one elementwise stage."""
from __future__ import annotations

from ... import arith
from ... import dtype as dt
from ...errors import TdslError
from ...ir import expr as E
from ..compute import compute
from ..tensor import ComputeOp, PlaceholderOp, Tensor
from .stage import stage_adjoints


def _shape_text(shape):
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def _same_dims(a, b):
    return len(a) == len(b) and all(arith.equal(E.convert(x), E.convert(y))
                                    for x, y in zip(a, b))


def _identity_head(out):
    n = len(out.shape)

    def f(*idx):
        same = E.const(True)
        for k in range(n):
            same = E.logical_and(same, E.EQ(idx[k], idx[n + k]))
        return E.select(same, E.const(1, out.dtype), E.const(0, out.dtype))
    return compute(tuple(out.shape) * 2, f, name=f"{out.name}.identity")


def _check_head(head, out):
    if not isinstance(head, Tensor):
        raise TdslError(f"gradient: head must be a tensor, got {head!r}")
    if not dt.is_float(head.dtype):
        raise TdslError(f"gradient: head '{head.name}' has type {head.dtype}; it must be a "
                        "floating-point tensor")
    n = len(out.shape)
    if len(head.shape) < n or not _same_dims(head.shape[len(head.shape) - n:], out.shape):
        raise TdslError(f"gradient: head '{head.name}' has shape {_shape_text(head.shape)}; it "
                        f"must be a prefix followed by the shape of output '{out.name}' "
                        f"{_shape_text(out.shape)}")
    return tuple(head.shape[:len(head.shape) - n])


def _as_list(x, what):
    items = list(x) if isinstance(x, (list, tuple)) else [x]
    for t in items:
        if not isinstance(t, Tensor):
            raise TdslError(f"gradient: {what} must be tensors, got {t!r}")
    return items


def _ops_in_order(outputs):
    """Every operation the outputs depend on, producers before consumers."""
    order, seen = [], set()

    def visit(op):
        stack = [(op, False)]
        while stack:
            o, done = stack.pop()
            if done:
                order.append(o)
                continue
            if o in seen:
                continue
            seen.add(o)
            stack.append((o, True))
            for t in o.input_tensors():
                if t.op not in seen:
                    stack.append((t.op, False))
    for t in outputs:
        visit(t.op)
    return order


def _accumulate(parts, tensor, prefix):
    if len(parts) == 1:
        return parts[0]

    def f(*idx):
        total = parts[0][idx]
        for p in parts[1:]:
            total = total + p[idx]
        return total
    return compute(tuple(prefix) + tuple(tensor.shape), f, name=f"{tensor.name}.grad")


def _zero(tensor, prefix):
    return compute(tuple(prefix) + tuple(tensor.shape),
                   lambda *idx: E.const(0, tensor.dtype), name=f"{tensor.name}.grad")


def gradient(output, inputs, head=None):
    """The adjoints of `inputs` for `output` (see docs/reference/autodiff.md)."""
    outputs = _as_list(output, "outputs")
    single = isinstance(inputs, Tensor)
    inputs = _as_list(inputs, "inputs")
    for t in inputs:
        if not dt.is_float(t.dtype):
            raise TdslError(f"gradient: input '{t.name}' has type {t.dtype}; only "
                            "floating-point tensors have a gradient")
    for o in outputs:
        if not dt.is_float(o.dtype):
            raise TdslError(f"gradient: output '{o.name}' has type {o.dtype}; only "
                            "floating-point outputs differentiate")
    if head is None:
        if len(outputs) != 1:
            raise TdslError("gradient: with several outputs give one head per output "
                            "(the identity head is only defined for one output)")
        heads = [_identity_head(outputs[0])]
    else:
        heads = _as_list(head, "heads")
        if len(heads) != len(outputs):
            raise TdslError(f"gradient: {len(outputs)} output(s) but {len(heads)} head(s)")
    prefixes = [_check_head(h, o) for h, o in zip(heads, outputs)]
    prefix = prefixes[0]
    for h, p in zip(heads[1:], prefixes[1:]):
        if not _same_dims(p, prefix):
            raise TdslError(f"gradient: head '{h.name}' has the prefix {_shape_text(p)} but "
                            f"head '{heads[0].name}' has {_shape_text(prefix)}; all heads "
                            "must share one")

    order = _ops_in_order(outputs)
    wanted_set = set(inputs)
    relevant = set()        # float tensors through which an input reaches the outputs
    for op in order:
        for t in op.outputs:
            if t in wanted_set or (dt.is_float(t.dtype) and any(
                    i in relevant for i in op.input_tensors())):
                relevant.add(t)

    parts = {}
    for o, h in zip(outputs, heads):
        parts.setdefault(o, []).append(h)
    for op in reversed(order):
        if isinstance(op, PlaceholderOp):
            continue
        adj = {t: _accumulate(parts[t], t, prefix) for t in op.outputs
               if t in relevant and parts.get(t)}
        if not adj or not any(i in relevant for i in op.input_tensors()):
            continue
        if not isinstance(op, ComputeOp):
            raise TdslError(f"gradient: stage '{op.name}' ({type(op).__name__}) lies between "
                            "the output and an input, and only compute stages differentiate")
        for t, g in adj.items():
            parts[t] = [g]
        for t, c in stage_adjoints(op, adj, prefix, lambda t: t in relevant):
            parts.setdefault(t, []).append(c)
    results = [_accumulate(parts[t], t, prefix) if parts.get(t) else _zero(t, prefix)
               for t in inputs]
    return results[0] if single else results
