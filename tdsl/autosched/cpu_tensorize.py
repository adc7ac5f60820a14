"""CPU rule for low-precision contractions: a (batched) matrix product whose operands are
uint8 x int8 (accumulating in int32) or bfloat16 x bfloat16 (accumulating in float32),
written with casts as TVM users write it, runs on the target's dot-product instruction
(`vpdpbusd` with AVX512-VNNI, `vdpbf16ps` with AVX512-BF16; `tdsl.intrin_x86`).

The instruction wants the reused operand (B, the one read along the output's columns) in
blocks of 16 columns x g reduction steps (g = 4 bytes or 2 bfloat16 per 32-bit lane),
each column's g values adjacent: [N/16][K/g][16][g]. The definition reads a plain matrix
(K x N, or N x K for A @ B.T), so the rule copies it into that layout first, and A into
rows when it is read as A[k, i] (`Schedule.transform_layout`, on every call: K x N
elements against 2 M N K operations). The micro-kernel then keeps a rows x (vecs x 16)
tile of C in registers while the reduction runs, one instruction per 16 x g block
(`dot_micro_kernel`, which `tdsl.examples.lowp_gemm` also uses for its pre-packed GEMM).

When the dtypes, the target or the sizes do not allow it (no extension, N not a multiple
of 16, K not a multiple of g, symbolic sizes, signed data), `explain()` says why and the
ordinary register-tile rule schedules the contraction.
"""
from __future__ import annotations

from .. import tiling
from ..ir import expr as E
from ..te import intrin_x86
from .analysis import Load
from .rule import Rule

LANES = intrin_x86.LANES
# (data dtype, kernel dtype, accumulator) -> (products per lane, intrinsic, Target fact,
# instruction, extension)
DOT_KINDS = {
    ("uint8", "int8", "int32"): (4, intrin_x86.dot_u8s8_int32, "has_vnni", "vpdpbusd",
                                 "AVX512-VNNI"),
    ("bfloat16", "bfloat16", "float32"): (2, intrin_x86.dot_bf16_float32, "has_bf16",
                                          "vdpbf16ps", "AVX512-BF16"),
}
_LOW = {"uint8", "int8", "bfloat16"}


def dot_micro_kernel(s, O, L, mr, vecs, g, intrin, axes=None):
    """Tiles O's last two axes (or the loops `axes`: rows, columns) by mr x (vecs * 16) and
    computes L (the accumulating stage: a local cache of O, or O's producer when O is its
    elementwise epilogue) inside each tile: reduction outside, rows and vectors unrolled,
    each 16 x g block one `intrin` call. Leading (batch) axes stay outermost. Returns
    (column tiles, row tiles) loops of O, column tiles outer: a panel of packed B stays in
    L2 while the row tiles stream past."""
    *batch, i, j = O.op.axis if axes is None else axes
    mo, no, mi, ni = O.tile(i, j, mr, vecs * LANES)
    O.reorder(*batch, no, mo, mi, ni)
    O.vectorize(ni)
    L.compute_at(O, mo)
    *lb, mc, nc = L.op.axis
    nco, nci = L.split(nc, factor=LANES)
    ko, ki = L.split(L.op.reduce_axis[0], factor=g)
    L.reorder(*lb, ko, mc, nco, nci, ki)
    L.unroll(mc)
    L.unroll(nco)
    L.tensorize(nci, intrin)
    return no, mo


def _operand(e, acc):
    """The load inside `cast(acc, load)`, or None."""
    if isinstance(e, E.Cast) and e.dtype == acc and isinstance(e.value, E.ProducerLoad):
        return e.value
    return None


class Tensorize(Rule):
    """A low-precision contraction on the target's dot-product instruction; where it
    cannot run there, it says why and the next rules schedule the contraction."""
    name = "tensorize"

    def applies(self, ctx, st):
        return ctx.contraction_of(st) is not None

    def apply(self, ctx, st):
        return dot_tensorize(ctx, *ctx.contraction_of(st))


def dot_plan(ctx, R):
    """(plan, None) when R can run on a dot-product instruction of the target, else
    (None, why not) -- why is None for contractions that are not low precision."""
    info = ctx.infos[R]
    body = R.op.body
    if not isinstance(body, E.Reduce) or body.combiner.name != "sum" or \
            body.condition is not None and not (isinstance(body.condition, E.IntImm)
                                                and body.condition.value):
        return None, None
    src = body.source[0] if isinstance(body.source, tuple) else body.source
    acc = R.op.output(0).dtype
    if not isinstance(src, E.Mul):
        return None, None
    a, b = _operand(src.a, acc), _operand(src.b, acc)
    if a is None or b is None or not {a.dtype, b.dtype} & _LOW:
        return None, None
    kernel_first = len(info.axes) >= 2 and Load(a).uses(info.axes[-1]) and \
        not Load(b).uses(info.axes[-1])
    if kernel_first:        # B[k, j] * A[i, k]: the data operand is the second factor
        a, b = b, a
    key = (a.dtype, b.dtype, acc)
    if key not in DOT_KINDS:
        return None, (f"{a.dtype} x {b.dtype} -> {acc} has no dot-product instruction "
                      "(uint8 x int8 -> int32 and bfloat16 x bfloat16 -> float32 do)")
    g, intrin, fact, instr, ext = DOT_KINDS[key]
    if ctx.target.kind != "llvm" or not getattr(ctx.target, fact):
        return None, f"target '{ctx.target}' has no {ext} ({instr})"
    if len(info.axes) < 2 or len(info.raxes) != 1:
        return None, (f"{len(info.axes)} output axes and {len(info.raxes)} reduction axes: "
                      "the rule takes a (batched) matrix product")
    if None in info.extents or None in info.rextents:
        return None, "symbolic sizes: the packed layout needs constant extents"
    (M, N), (K,) = info.extents[-2:], info.rextents
    if N % LANES or K % g:
        return None, (f"N={N}, K={K}: the instruction needs N a multiple of {LANES} and K "
                      f"of {g}")
    *batch, i, j = info.axes
    (k,) = info.raxes
    la, lb = Load(a), Load(b)
    if la.uses(j) or not la.uses(i) or lb.uses(i) or not lb.uses(j) or \
            not (la.uses(k) and lb.uses(k)):
        return None, (f"'{a.tensor.name}' must be read along rows and '{b.tensor.name}' "
                      "along columns, both along the reduction")
    b_pos = _positions(b, info.axes + [k])
    if b_pos is None or len(info.loads_of(b.tensor)) != 1:
        return None, (f"'{b.tensor.name}' is not read once at plain loop indices: it "
                      "cannot be packed")
    b_layout = [(b_pos[v], None) for v in batch if v in b_pos] + \
        [(b_pos[j], None), (b_pos[k], None), (b_pos[j], LANES), (b_pos[k], g)]
    a_layout = None
    if not (isinstance(a.indices[-1], E.Var) and a.indices[-1] is k.var) or \
            any(la.pos_vars[n] & {id(k.var)} for n in range(len(a.indices) - 1)):
        # A read as A[k, i] (A.T @ B): copied row-major first
        a_pos = _positions(a, info.axes + [k])
        if a_pos is None or len(info.loads_of(a.tensor)) != 1:
            return None, (f"'{a.tensor.name}' is neither contiguous along the reduction "
                          f"'{k.var.name}' nor read at plain loop indices: the "
                          f"instruction loads {g} adjacent values")
        a_layout = [(a_pos[v], None) for v in batch if v in a_pos] + \
            [(a_pos[i], None), (a_pos[k], None)]
    return dict(g=g, intrin=intrin(ctx.target, kernel_first=kernel_first), instr=instr,
                ext=ext, A=a.tensor, B=b.tensor,
                a_layout=a_layout, b_layout=b_layout, M=M, N=N, K=K,
                batch=info.extents[:-2]), None


def dot_tensorize(ctx, R, T):
    """Schedules contraction R (with T, its elementwise consumer, or None) on the
    target's dot-product instruction; False (after saying why) when it cannot."""
    plan, why = dot_plan(ctx, R)
    if plan is None:
        if why is not None:
            ctx.rec.add(R, "tensorize", "none", why + "; the register-tile rule instead")
        return False
    s, g = ctx.sched, plan["g"]
    M, N, K = plan["M"], plan["N"], plan["K"]
    copies = []
    if plan["a_layout"] is not None:
        copies.append(s[s.transform_layout(plan["A"], [R.op.output(0)], plan["a_layout"])])
        ctx.rec.add(R, "pack", f"transform_layout({plan['A'].name}) to rows",
                    f"'{plan['A'].name}' is read along the reduction across its rows; the "
                    f"instruction broadcasts {g} adjacent values")
    copies.append(s[s.transform_layout(plan["B"], [R.op.output(0)], plan["b_layout"])])
    ctx.rec.add(R, "pack", f"transform_layout({plan['B'].name}) to [N/{LANES}][K/{g}]"
                f"[{LANES}][{g}]", f"{plan['instr']} multiplies a {LANES} x {g} block of "
                f"'{plan['B'].name}' whose {g} values per column are adjacent")
    acc = R.op.output(0).dtype
    # whole vectors: a guard inside the block cannot be one call; a ragged tile of rows
    # is guarded around the calls, so it is taken when it holds twice the accumulators
    rows, vecs = tiling.register_tile(ctx.target, M, N, acc, whole_rows=True, whole_vecs=True)
    alt = tiling.register_tile(ctx.target, M, N, acc, whole_vecs=True)
    if alt[0] * alt[1] >= 2 * rows * vecs:
        rows, vecs = alt
    if ctx.params.tile:
        given = ctx.params.tile
        rows = given[0] or rows
        vecs = given[1] if given[1] and (N // LANES) % given[1] == 0 else vecs
    if T is None:
        L = s[s.cache_write(R.op.output(0), "local")]
        O = s[R.op.output(0)]
    else:
        L, O = s[R.op.output(0)], s[T.op.output(0)]
        ctx.rec.add(T, "fuse-epilogue", f"'{R.op.name}' computed inside '{T.op.name}''s "
                    "tile", "the elementwise consumer reads the accumulators from registers")
    no, mo = dot_micro_kernel(s, O, L, rows, vecs, g, plan["intrin"])
    ctx.rec.add(R, "tensorize", f"{plan['instr']} ({plan['intrin'].name}); tile {rows} x "
                f"{vecs * LANES}", f"{plan['ext']} on {ctx.target.key}: {LANES} lanes x {g} "
                f"products per instruction; {rows * vecs} accumulators fit "
                f"{ctx.target.vector_registers} vector registers")
    batch = 1
    for e in plan["batch"]:
        batch *= e
    loops = [(iv, e, False) for iv, e in zip(list(O.op.axis)[:-2], plan["batch"])]
    loops += [(no, N // (vecs * LANES), False), (mo, -(-M // rows), M % rows != 0)]
    ctx.parallel_prefix(O, loops, batch * M * N * K, "tiles")
    for P in copies:
        pax = list(P.op.axis)
        size = 1
        for iv in pax:
            size *= iv.dom.extent.value
        ctx.parallel_prefix(P, [(pax[0], pax[0].dom.extent.value, False)], size, "copy")
    copies[-1].unroll(list(copies[-1].op.axis)[-1])
    return True


def _positions(load, axes):
    """{axis: index position} when every index of `load` is the plain variable of one of
    `axes`, each at most once (B[k, j] -> {k: 0, j: 1}); else None."""
    out = {}
    for n, x in enumerate(load.indices):
        hit = [iv for iv in axes if isinstance(x, E.Var) and x is iv.var]
        if len(hit) != 1 or hit[0] in out:
            return None
        out[hit[0]] = n
    return out


TENSORIZE = Tensorize()

__all__ = ["Tensorize", "TENSORIZE", "dot_micro_kernel", "DOT_KINDS"]
