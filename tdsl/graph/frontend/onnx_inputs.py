"""The static shapes of an ONNX model's inputs: fixed dimensions as the model says them,
symbolic ones (ONNX dim_params such as "batch", or unnamed unknowns) from the sizes the
user gives at import. tdsl compiles for static shapes, so a symbolic dimension with no size
is an error that lists them all, the way TVM's relay.frontend.from_onnx wants its shape=."""
from __future__ import annotations

import numpy as np

from ...errors import GraphError


def _symbolic(inputs):
    """{dimension name: [(input, axis), ...]} of the inputs' dim_params; unnamed unknown
    dimensions are keyed by "input[axis]"."""
    out = {}
    for inp in inputs:
        for ax, d in enumerate(inp.type.tensor_type.shape.dim):
            if d.HasField("dim_value"):
                continue
            key = d.dim_param if d.HasField("dim_param") and d.dim_param else f"{inp.name}[{ax}]"
            out.setdefault(key, []).append((inp.name, ax))
    return out


def input_shapes(inputs, shape=None, default_dim=None, dims=None):
    """The static shape of each ONNX graph input (fixed dims as the model says, symbolic
    ones from `dims` by name, `shape` by input, or `default_dim`) and the value each
    symbolic dimension took."""
    shape = {k: tuple(v) for k, v in (shape or {}).items()}
    dims = dict(dims or {})
    by_name = {i.name: i for i in inputs}
    unknown = sorted(set(shape) - set(by_name))
    if unknown:
        raise GraphError(f"from_onnx: shape= names unknown inputs {unknown}; the inputs are {sorted(by_name)}")
    symbolic = _symbolic(inputs)
    stray = sorted(set(dims) - set(symbolic))
    if stray:
        raise GraphError(f"from_onnx: dims= names {stray}, which no input has as a symbolic dimension; "
                         f"the symbolic dimensions are {sorted(symbolic) or 'none'}")
    for k, v in dims.items():
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 0:
            raise GraphError(f"from_onnx: dims['{k}'] = {v!r} must be a non-negative integer")
    value = {k: int(v) for k, v in dims.items()}
    # a whole input shape given by shape= fixes the dimensions that input names
    for name, shp in shape.items():
        dl = by_name[name].type.tensor_type.shape.dim
        if len(shp) != len(dl):
            raise GraphError(f"from_onnx: shape['{name}'] = {shp} has rank {len(shp)}, the input has rank {len(dl)}")
        for ax, (d, s) in enumerate(zip(dl, shp)):
            if d.HasField("dim_value"):
                if d.dim_value != s:
                    raise GraphError(f"from_onnx: shape['{name}'] = {shp} but axis {ax} is fixed at {d.dim_value} in the model")
                continue
            key = d.dim_param if d.HasField("dim_param") and d.dim_param else f"{name}[{ax}]"
            if value.setdefault(key, int(s)) != int(s):
                raise GraphError(f"from_onnx: dimension '{key}' is {value[key]} elsewhere but shape['{name}'] "
                                 f"gives {s} at axis {ax}")
    missing = [k for k in symbolic if k not in value]
    if missing and default_dim is None:
        where = "; ".join(f"'{k}' (" + ", ".join(f"input '{i}' axis {a}" for i, a in symbolic[k]) + ")"
                          for k in missing)
        named = ", ".join(f"'{k}': <size>" for k in missing if "[" not in k)
        raise GraphError(
            f"from_onnx: the model's inputs have symbolic dimensions with no value: {where}. Shapes are "
            f"static, so give each one the size you will run at import: "
            + (f"from_onnx(model, dims={{{named}}}), or " if named else "")
            + "shape={input name: full shape} per input; default_dim=N takes N for every one left")
    for k in missing:
        value[k] = int(default_dim)
    out = {}
    for inp in inputs:
        sh = []
        for ax, d in enumerate(inp.type.tensor_type.shape.dim):
            if d.HasField("dim_value"):
                sh.append(d.dim_value)
            else:
                sh.append(value[d.dim_param if d.HasField("dim_param") and d.dim_param else f"{inp.name}[{ax}]"])
        out[inp.name] = tuple(sh)
    return out, {k: value[k] for k in symbolic}
