"""The call signature of a lowered function, shared by every CPU backend (LLVM, C) and the
GPU modules: what the runtime checks before any pointer reaches native code, and what an
exported library carries (`__tdsl_signature`, JSON).

`make_signature(func, symbol)` gives `{"abi", "name", "symbol", "num_user_args", "params"}`
(and `"regions"` where reads depend on symbolic sizes),
one param per `func.params` entry: a buffer with its dtype, its shape as JSON codes (an
int, `["p", i]` for scalar param i, or `[op, a, b]`) and whether the function writes it; or
a scalar with its dtype. See `tdsl.runtime.signature.Signature`.
"""
from __future__ import annotations

from .. import dtype as dt
from ..errors import BuildError
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.visitor import walk
from ..te.tensor_intrin import pointer_writes

SIGNATURE_ABI = 1


def stored_buffers(stmt) -> set:
    """The buffers `stmt` writes: stored to, written by an extern call, or passed to a
    tensor intrinsic that writes through the pointer (a tensor-core store to an output)."""
    out = set()

    def f(n):
        if isinstance(n, S.BufferStore):
            out.add(n.buffer)
        elif isinstance(n, S.ExternCall):
            out.update(n.args[k] for k in n.writes)
        elif isinstance(n, E.Call) and n.name == "address_of" and pointer_writes(n):
            out.add(n.args[0].buffer)
    walk(stmt, f)
    return out


def _dim_code(d, param_index):
    """A buffer dimension as JSON: an int, ["p", i] for scalar param i, or [op, a, b]."""
    if isinstance(d, int):
        return d
    if isinstance(d, E.IntImm):
        return int(d.value)
    if isinstance(d, E.Var):
        i = param_index.get(d)
        if i is None:
            raise BuildError(f"the size {d.name!r} in a buffer shape is not a parameter of the "
                             "function; lowering must append size variables to the params")
        return ["p", i]
    ops = {E.Add: "+", E.Sub: "-", E.Mul: "*", E.FloorDiv: "//", E.FloorMod: "%",
           E.Min: "min", E.Max: "max"}
    op = ops.get(type(d))
    if op is not None:
        return [op, _dim_code(d.a, param_index), _dim_code(d.b, param_index)]
    if isinstance(d, E.Cast):
        return _dim_code(d.value, param_index)
    raise BuildError(f"the buffer dimension {d} cannot be checked at call time")


def make_signature(func: S.PrimFunc, symbol: str) -> dict:
    params = list(func.params)
    param_index = {p: i for i, p in enumerate(params) if isinstance(p, E.Var)}
    nua = func.attrs.get("num_user_args", len(params))
    if not 0 <= nua <= len(params):
        raise BuildError(f"num_user_args={nua} but the function has {len(params)} params")
    written = stored_buffers(func.body)
    record = func.attrs.get("bounds_record")
    out = []
    seen = set()
    for i, p in enumerate(params):
        if id(p) in seen:
            raise BuildError(f"parameter {p} appears twice in the parameter list")
        seen.add(id(p))
        if isinstance(p, S.Buffer):
            dtype = dt.check(p.dtype)
            out.append({"kind": "buffer", "name": p.name, "dtype": dtype,
                        "shape": [_dim_code(d, param_index) for d in p.shape],
                        "shape_text": [str(d) for d in p.shape],
                        "written": p in written or p is record})
            if p is record:
                out[-1]["record"] = True
        elif isinstance(p, E.Var):
            out.append({"kind": "scalar", "name": p.name, "dtype": dt.check(p.dtype)})
        else:
            raise BuildError(f"parameter {i} is a {type(p).__name__}; params must be "
                             "Buffers or Vars")
    sig = {"abi": SIGNATURE_ABI, "name": func.name, "symbol": symbol,
           "num_user_args": nua, "params": out}
    regions = _region_codes(func.attrs.get("region_checks") or (), param_index)
    if regions:
        sig["regions"] = regions
    if record is not None:
        sig["bounds_checks"] = [[c.kernel, c.buffer, c.access]
                                for c in func.attrs["bounds_checks"]]
    return sig


def _region_codes(checks, param_index):
    """The reads that only the sizes bound at call time decide (`tdsl.te.regions`), as
    JSON dimension codes. A check that involves a size the
    caller cannot bind (one that is no parameter) is left to `bounds_check`."""
    out = []
    for c in checks:
        try:
            out.append({"tensor": c.tensor, "reader": c.reader, "axis": c.axis,
                        "lo": _dim_code(c.lo, param_index), "hi": _dim_code(c.hi, param_index),
                        "extent": _dim_code(c.extent, param_index),
                        "domain": [_dim_code(d, param_index) for d in c.domain]})
        except BuildError:
            continue
    return out
