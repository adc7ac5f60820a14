"""ONNX -> graph IR (`from_onnx`). Opsets 13 to 21 of the default domain.

A symbolic input dimension takes its value from `dims=` (by name), `shape=` (by input) or,
only when asked, `default_dim=`; otherwise it stays symbolic, a size variable named after
the dim_param (ir/dims.py), and the network is built once for every size. Inputs that ONNX
passes as tensors but that must be known at compile time (Reshape's shape, Slice's starts,
Pad's pads, ...) are evaluated from constants and shapes with the numpy meaning of the
operators (`static`; symbolic sizes as sympy expressions), so torch's Shape -> Gather ->
Concat -> Reshape chains become plain attributes. Each ONNX node maps to one or a few
graph operators.
"""
from __future__ import annotations

from typing import Dict

import numpy as np

from ...errors import GraphError
from ..ir import Const, Expr, Function, Module, TensorType, Var
from .onnx_inputs import input_shapes
from .registry import CONVERTERS, Ctx, np_dtype

def _to_array(tensor):
    from onnx import numpy_helper
    try:
        return numpy_helper.to_array(tensor)
    except Exception as e:
        raise GraphError(f"cannot read tensor '{tensor.name}': {e}") from None


def _load(model):
    import onnx
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        try:
            return onnx.load_from_string(bytes(model))
        except Exception as e:
            raise GraphError(f"from_onnx: the bytes are not an ONNX model ({type(e).__name__}: {e})") from None
    path = str(model)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise GraphError(f"from_onnx: cannot read '{path}': {e.strerror}") from None
    try:
        m = onnx.ModelProto()
        m.ParseFromString(data)
    except Exception as e:
        raise GraphError(f"from_onnx: '{path}' is not a valid ONNX model ({type(e).__name__}: {e})") from None
    if not m.HasField("graph") or not m.graph.node and not m.graph.output:
        raise GraphError(f"from_onnx: '{path}' holds no ONNX graph")
    try:
        from onnx.external_data_helper import load_external_data_for_model
        import os
        load_external_data_for_model(m, os.path.dirname(os.path.abspath(path)))
    except Exception:
        pass
    return m


def from_onnx(model, shape: Dict[str, tuple] = None, default_dim: int = None, bind: Dict[str, np.ndarray] = None,
              dims: Dict[str, int] = None) -> Module:
    """Imports an ONNX model (a path, bytes or an `onnx.ModelProto`) as a graph Module.
    A symbolic input dimension (an ONNX dim_param such as "batch", or an unnamed unknown)
    takes a size from `dims` (dimension name -> size, shared by every input that names
    it), from `shape` (input name -> whole static shape), or from `default_dim` (one size
    for all that are left; off unless given); one left without a size stays symbolic, and
    the built network then runs at any size (`dims={"sequence": (1, 512)}` keeps it
    symbolic within those bounds, checked per call). `bind` maps input names to arrays
    that become constants."""
    m = _load(model)
    g = m.graph
    opset = 13
    for imp in m.opset_import:
        if imp.domain in ("", "ai.onnx"):
            opset = imp.version
    unsupported = []
    for node in g.node:
        if node.domain not in ("", "ai.onnx") or node.op_type not in CONVERTERS:
            unsupported.append(node)
    if unsupported:
        n = unsupported[0]
        kinds = sorted({(x.domain + "." if x.domain not in ("", "ai.onnx") else "") + x.op_type for x in unsupported})
        raise GraphError(f"from_onnx: unsupported ONNX operator '{kinds[0] if len(kinds) == 1 else n.op_type}' "
                         f"(node '{n.name or n.output[0] if n.output else n.op_type}')"
                         + (f"; all unsupported operators: {', '.join(kinds)}" if len(kinds) > 1 else ""))
    env: Dict[str, Expr] = {}
    for init in g.initializer:
        env[init.name] = Const(_to_array(init))
    params = []
    bind = dict(bind or {})
    inputs = []
    for inp in g.input:
        if inp.name in env:
            continue
        if inp.name in bind:
            env[inp.name] = Const(np.asarray(bind.pop(inp.name)))
            continue
        if not inp.type.HasField("tensor_type"):
            raise GraphError(f"from_onnx: input '{inp.name}' is not a tensor (sequences and maps "
                             "are not supported)")
        inputs.append(inp)
    static, dim_values, bounds = input_shapes(inputs, shape, default_dim, dims)
    for inp in inputs:
        v = Var(_legal_name(inp.name), TensorType(static[inp.name], np_dtype(inp.type.tensor_type.elem_type)))
        params.append(v)
        env[inp.name] = v
    if bind:
        raise GraphError(f"from_onnx: bind= names unknown inputs {sorted(bind)}")
    ctx = Ctx(opset)
    for node in g.node:
        ctx.node = node
        for i in node.input:
            if i and i not in env:
                raise GraphError(f"from_onnx: node '{node.name}' ({node.op_type}) reads '{i}', "
                                 "which no earlier node or input defines")
        ins = [env[i] if i else None for i in node.input]
        attrs = {a.name: _attr_value(a) for a in node.attribute}
        try:
            outs = CONVERTERS[node.op_type](ctx, node, ins, attrs)
        except GraphError as e:
            msg = str(e)
            if "(node '" not in msg:
                msg = f"{node.op_type} (node '{node.name or node.output[0]}'): {msg}"
            raise GraphError(msg) from None
        except (KeyError, IndexError, ValueError, TypeError, AttributeError) as e:
            raise GraphError(f"{node.op_type} (node '{node.name or node.output[0]}'): malformed node "
                             f"({type(e).__name__}: {e})") from None
        if not isinstance(outs, (list, tuple)):
            outs = [outs]
        for name, o in zip(node.output, outs):
            if name:
                env[name] = o
        for k, name in enumerate(node.output):
            if name and k >= len(outs):
                raise GraphError(f"{node.op_type} (node '{node.name or name}'): output {k} "
                                 f"('{name}') is not supported")
    outputs = []
    for o in g.output:
        if o.name not in env:
            raise GraphError(f"from_onnx: graph output '{o.name}' is not computed by any node")
        outputs.append(env[o.name])
    if not outputs:
        raise GraphError("from_onnx: the graph has no outputs")
    fn = _materialize_sizes(Function("main", params, outputs), ctx)
    fn.attrs = {}
    # the initializers by name, in the model's order: `graph.gradient` turns them into inputs
    inits = {i.name: env[i.name] for i in g.initializer if isinstance(env.get(i.name), Const)}
    mod = Module(fn, {"output_names": [o.name for o in g.output],
                      "input_names": {p.name: i.name for p, i in zip(params, inputs)},
                      "dims": dim_values, "initializers": inits})
    for name, hi in ctx.upper_bounds.items():
        lo, hi0 = bounds.get(name, (1, hi))
        bounds[name] = (lo, min(hi, hi0))
    if bounds:
        mod.info["dim_bounds"] = bounds
    return mod


def _materialize_sizes(fn, ctx):
    """@main with every value that folds to symbolic sizes (Shape's output and the shape
    arithmetic on it) and that a kernel reads computed per call (`size_values`): the
    folding needed them as sympy expressions, the network needs them as numbers."""
    from ..ir import Call, DimValues
    memo = {}

    def sized(e):
        v = e.data if isinstance(e, DimValues) else ctx.fold(e) if isinstance(e, Call) else None
        if v is None or v.dtype != object:
            return None
        return Call("size_values", [], {"values": v.reshape(-1).tolist(), "shape": list(v.shape),
                                        "dtype": e.type.dtype})

    def visit(e):
        if e in memo:
            return memo[e]
        out = e
        if isinstance(e, (Call, DimValues)):
            out = sized(e)
            if out is None and isinstance(e, Call):
                args = [visit(a) for a in e.args]
                out = e if all(a is b for a, b in zip(args, e.args)) else Call(e.op, args, e.attrs, e.span)
        memo[e] = out
        return out
    for n in fn.nodes():        # topological order: no deep recursion in visit
        visit(n)
    if not any(isinstance(o, DimValues) for o in fn.outputs) and all(memo.get(n) is n for n in fn.nodes()):
        return fn
    return Function(fn.name, fn.params, [visit(o) for o in fn.outputs])


def _legal_name(name):
    import re
    s = re.sub(r"[^\w.]", "_", name)
    return s or "input"


def _attr_value(a):
    import onnx
    v = onnx.helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, onnx.TensorProto):
        return _to_array(v)
    if isinstance(v, list):
        return [x.decode() if isinstance(x, bytes) else x for x in v]
    return v


# the operator families register their converters on import
from . import onnx_ops_elementwise, onnx_ops_nn, onnx_ops_shape  # noqa: E402,F401
from . import onnx_ops_einsum, onnx_ops_loss, onnx_ops_math, onnx_ops_quant, onnx_ops_tensor  # noqa: E402,F401
