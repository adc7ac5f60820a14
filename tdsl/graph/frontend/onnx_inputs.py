"""The shapes of an ONNX model's inputs: fixed dimensions as the model says them, symbolic
ones (ONNX dim_params such as "batch", or unnamed unknowns) from the sizes the user gives
at import, or else kept symbolic: a size variable named after the dim_param (an unnamed
one after its input and axis), optionally bounded by `dims={"sequence": (1, 512)}`."""
from __future__ import annotations

import numpy as np

from ...errors import GraphError
from ..ir.dims import legal_name, size_var


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
    """The shape of each ONNX graph input (fixed dims as the model says, symbolic ones from
    `dims` by name, `shape` by input, or `default_dim`, else a size variable), the value
    each symbolic dimension took (an int or its size variable) and the declared bounds
    {size variable name: (low, high)}."""
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
    bounds = {}
    for k, v in list(dims.items()):
        if isinstance(v, (tuple, list)):
            if len(v) != 2 or not all(isinstance(b, (int, np.integer)) and not isinstance(b, bool) for b in v) \
                    or not 1 <= v[0] <= v[1]:
                raise GraphError(f"from_onnx: dims['{k}'] = {v!r}: a range of sizes is (low, high) "
                                 "with 1 <= low <= high")
            bounds[k] = (int(v[0]), int(v[1]))
            del dims[k]
        elif not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 0:
            raise GraphError(f"from_onnx: dims['{k}'] = {v!r} must be a non-negative integer "
                             "or a (low, high) range")
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
    if default_dim is not None:
        for k in missing:
            if k not in bounds:
                value[k] = int(default_dim)
    names = {}
    for k in symbolic:
        if k not in value:
            n = legal_name(k.replace("[", "_").replace("]", "")) if "[" in k else legal_name(k)
            if n in names.values():
                raise GraphError(f"from_onnx: the symbolic dimensions {k!r} and "
                                 f"{[a for a, b in names.items() if b == n][0]!r} have one name {n!r}")
            names[k] = n
            value[k] = size_var(n)
    out = {}
    for inp in inputs:
        sh = []
        for ax, d in enumerate(inp.type.tensor_type.shape.dim):
            if d.HasField("dim_value"):
                sh.append(d.dim_value)
            else:
                sh.append(value[d.dim_param if d.HasField("dim_param") and d.dim_param else f"{inp.name}[{ax}]"])
        out[inp.name] = tuple(sh)
    return out, {k: value[k] for k in symbolic}, {names.get(k, k): b for k, b in bounds.items()}
