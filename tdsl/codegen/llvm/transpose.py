"""Square tiles transposed in registers.

An unrolled loop around a vectorized one of as many lanes, whose body reads a buffer
contiguously along the unrolled variable and strided along the lanes (a transpose,
`Y[c, w] = X[w, c]` with `c` unrolled and `w` vectorized), would read every unrolled step's
vector with a gather: about one element per cycle on x86. Instead the n x n tile is read
as n contiguous rows (one per lane, each the n unrolled steps' elements) before the
unrolled loop, and transposed with log2(n) stages of two-input shuffles (n log2 n shuffles,
a few per vector); each unrolled step then takes its column. The rows hold exactly the
elements the gathers would have read, so nothing outside the buffer is touched.
"""
from __future__ import annotations

from llvmlite import ir

from ... import dtype as dt
from ...ir import expr as E
from ...ir import stmt as S
from ...tiling import TRANSPOSE_TILE_MAX_BYTES
from .irscan import expr_vars, iter_children
from .lanes import local_linear, vector_legality
from .memory import elem_ptr, from_mem
from .types import I32, scalar_type


def _unguarded_loads(e, out):
    """Loads of `e` that are read whatever the conditions: not behind a Select's arms or
    the right side of And/Or, which the emitter evaluates only where chosen."""
    if isinstance(e, E.BufferLoad):
        out.append(e)
        return
    if isinstance(e, E.Select):
        return _unguarded_loads(e.cond, out)
    if isinstance(e, (E.And, E.Or)):
        return _unguarded_loads(e.a, out)
    for c in iter_children(e):
        _unguarded_loads(c, out)


def match(s: S.For):
    """The loads of unrolled loop `s` to read as transposed tiles ([] when none)."""
    inner = s.body
    if not (isinstance(s.extent, E.IntImm) and isinstance(inner, S.For)
            and inner.kind == S.ForKind.VECTORIZED and isinstance(inner.extent, E.IntImm)):
        return []
    n = inner.extent.value
    if s.extent.value != n or n < 2 or n & (n - 1) or s.var in expr_vars(inner.min, set()) \
            or vector_legality(inner) is not None:
        return []
    stores = inner.body.stmts if isinstance(inner.body, S.SeqStmt) else [inner.body]
    if not all(isinstance(st, S.BufferStore) for st in stores):
        return []
    written = {st.buffer for st in stores}
    found, seen, nbytes = [], set(), 0
    for st in stores:
        loads = []
        _unguarded_loads(st.value, loads)
        for ld in loads:
            if ld.buffer in written or len(ld.indices) != 1 or id(ld) in seen:
                continue
            idx = ld.indices[0]
            if local_linear(idx, s.var) != 1 or local_linear(idx, inner.var) in (0, 1):
                continue
            nbytes += n * n * dt.itemsize(ld.buffer.dtype)
            if nbytes > TRANSPOSE_TILE_MAX_BYTES:   # all of one loop's tiles together
                return found
            seen.add(id(ld))
            found.append(ld)
    return found


def read_tiles(em, s: S.For, loads):
    """{id(load): [column vector per unrolled step]}: each load's rows read at the loops'
    first values, transposed. Called where `s` starts, its enclosing variables bound."""
    inner = s.body
    n = inner.extent.value
    lo_j = em.cast(em.expr(s.min), s.min.dtype, s.var.dtype)
    lo_l = em.cast(em.expr(inner.min), inner.min.dtype, inner.var.dtype)
    tiles = {}
    saved = {v: em.env.get(v) for v in (s.var, inner.var)}
    for ld in loads:
        buf = ld.buffer
        mt = scalar_type(buf.dtype, True)
        rows = []
        for i in range(n):
            em.env[s.var] = lo_j
            em.env[inner.var] = em.int_arith("add", lo_l, em.const(inner.var.dtype, i),
                                             inner.var.dtype)
            p = elem_ptr(em, buf, em.index(ld.indices[0]))
            rows.append(em.builder.load(p, typ=ir.VectorType(mt, n),
                                        align=dt.itemsize(buf.dtype)))
        tiles[id(ld)] = [from_mem(em, v, buf.dtype) for v in transpose(em.builder, rows)]
    for v, val in saved.items():
        if val is None:
            em.env.pop(v, None)
        else:
            em.env[v] = val
    return tiles


def transpose(bl, rows):
    """Columns of the square matrix whose rows are `rows` (n vectors of n lanes, n a power
    of two). Stage k swaps bit k of the row index with bit k of the column index: rows i
    and i + k (bit k of i clear) exchange their blocks of k lanes."""
    n = len(rows)
    rows = list(rows)
    k = 1
    while k < n:
        lo = [c if not c & k else n + c - k for c in range(n)]
        hi = [c + k if not c & k else n + c for c in range(n)]
        for i in range(n):
            if i & k:
                continue
            a, b = rows[i], rows[i + k]
            rows[i] = bl.shuffle_vector(a, b, ir.Constant(ir.VectorType(I32, n), lo))
            rows[i + k] = bl.shuffle_vector(a, b, ir.Constant(ir.VectorType(I32, n), hi))
        k *= 2
    return rows
