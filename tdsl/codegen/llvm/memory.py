"""Memory for the LLVM backend: loads, stores and allocations, scalar or vector.

In a vectorized loop an access whose flat index is linear in the lane variable with
coefficient 1 is a contiguous vector load/store, a lane-invariant one a scalar access, any
other a gather/scatter. Under a lane mask (a lane-varying condition) contiguous accesses
are masked loads/stores, and a uniform read happens only if some lane is active, so a
guarded access never touches memory the serial loop would not. The exception is a stack
buffer of the function's own (an `alloca`) whose whole vector lies inside it: a masked
read is a plain read there, and a masked write a read, a blend and a plain write (no other
thread sees the buffer), which LLVM keeps in registers; through masked intrinsics it
cannot, and a masked store that the next full load reads stalls store forwarding (a ragged
row's partial sums: ~20 cycles a row).

`Allocate`: constant sizes up to `ALLOCA_MAX_BYTES` are `alloca`s in the entry block
(align 64), the rest heap scratch: `tdsl_scratch_alloc(64, ...)` / `tdsl_scratch_free`
where the runtime library is loaded (tdsl/runtime/scratch.c: kept blocks, no fresh pages
per call), else `aligned_alloc` / `free`; a failed allocation returns 1.
"""
from __future__ import annotations

from llvmlite import ir

from ... import dtype as dt
from ...errors import BuildError
from ...ir import expr as E
from .types import I1, I8, I32, I64, PTR, int_const_value, lanes_of, sanitize, scalar_type, type_suffix

ALLOCA_MAX_BYTES = 32 * 1024
STRIDED_LOAD_MAX = 4     # constant strides read as one contiguous span and a shuffle


def buffer_ptr(em, buf):
    p = em.bufs.get(buf)
    if p is None:
        raise BuildError(f"buffer {buf.name!r} is accessed but is neither a parameter "
                         "nor allocated in an enclosing Allocate")
    return p


def elem_ptr(em, buf, idx64):
    return em.builder.gep(buffer_ptr(em, buf), [idx64],
                          source_etype=scalar_type(buf.dtype, mem=True), inbounds=True)


def flat_index(node, indices):
    if len(indices) != 1:
        raise BuildError(f"{node} reached the LLVM backend with {len(indices)} indices; "
                         "buffers must be flattened to one index first")
    return indices[0]


def from_mem(em, v, dtype):
    if dtype == "bool":
        return em.builder.icmp_unsigned("!=", v, ir.Constant(v.type, None))
    return v


def _to_mem(em, v, dtype):
    if dtype == "bool":
        t = v.type
        return em.builder.zext(v, ir.VectorType(I8, t.count)
                               if isinstance(t, ir.VectorType) else I8)
    return v


def _at_lane0(em, idx):
    """The scalar value of index `idx` in lane 0 of the enclosing vectorized loop."""
    ctx = em.vec
    var = ctx.info.var
    saved = em.env.get(var)
    em.vec = None
    em.env[var] = ctx.lo_val
    try:
        return em.index(idx)
    finally:
        em.env[var] = saved
        em.vec = ctx


def _any_lane(em, mask):
    n = mask.type.count
    fn = em.mb.intrinsic(f"llvm.vector.reduce.or.v{n}i1", I1, [mask.type])
    return em.builder.call(fn, [mask])


def _vector_ptrs(em, buf, idx):
    vi = em.to_i64(em.splat(em.index_value(idx), em.vec.count), idx.dtype)
    g = em.builder.gep(buffer_ptr(em, buf), [vi],
                       source_etype=scalar_type(buf.dtype, True), inbounds=True)
    g.type = ir.VectorType(PTR, em.vec.count)
    return g


def load(em, e):
    """The value of `BufferLoad` `e` (a vector inside a vectorized loop)."""
    idx = flat_index(e, e.indices)
    if em.vec is not None:
        column = em.tile_columns.get(id(e))
        if column is not None:
            return column
        return _vector_load(em, e.buffer, idx)
    iv = em.index(idx)
    buf = e.buffer
    v = em.builder.load(elem_ptr(em, buf, iv), typ=scalar_type(buf.dtype, True),
                        align=dt.itemsize(buf.dtype))
    return from_mem(em, v, buf.dtype)


def _vector_load(em, buf, idx):
    ctx = em.vec
    bl = em.builder
    n = ctx.count
    idx = ctx.info.inline(idx)
    mt = scalar_type(buf.dtype, True)
    align = ir.Constant(I32, dt.itemsize(buf.dtype))
    vt = ir.VectorType(mt, n)
    if not ctx.info.index_varies(idx):
        if ctx.mask is None:
            v = bl.load(elem_ptr(em, buf, _at_lane0(em, idx)), typ=mt,
                        align=dt.itemsize(buf.dtype))
            return from_mem(em, v, buf.dtype)
        # a uniform read under a mask: read only if some lane is active
        anyl = _any_lane(em, ctx.mask)
        rb, jb = em.new_block("ld.any"), em.new_block("ld.join")
        pre = bl.block
        bl.cbranch(anyl, rb, jb)
        bl.position_at_end(rb)
        v = bl.load(elem_ptr(em, buf, _at_lane0(em, idx)), typ=mt,
                    align=dt.itemsize(buf.dtype))
        r_end = bl.block
        bl.branch(jb)
        bl.position_at_end(jb)
        phi = bl.phi(mt)
        phi.add_incoming(v, r_end)
        phi.add_incoming(ir.Constant(mt, None), pre)
        return from_mem(em, phi, buf.dtype)
    c = ctx.info.coeff(idx)
    if c == 1:
        first = _at_lane0(em, idx)
        p = elem_ptr(em, buf, first)
        if _odd_width(n) and not _is_alloca(em, buf) and _masked_loads_cheap(em):
            return from_mem(em, _widened_load(em, p, mt, n, ctx.mask, dt.itemsize(buf.dtype)), buf.dtype)
        if ctx.mask is None or _inside_alloca(em, buf, first, n):
            v = bl.load(p, typ=vt, align=dt.itemsize(buf.dtype))
        else:
            fn = em.mb.intrinsic(f"llvm.masked.load.v{n}{type_suffix(mt)}.p0", vt,
                                 [PTR, I32, ctx.mask.type, vt])
            v = bl.call(fn, [p, align, ctx.mask, ir.Constant(vt, None)])
        return from_mem(em, v, buf.dtype)
    if isinstance(c, int) and 2 <= c <= STRIDED_LOAD_MAX:
        return _strided_load(em, buf, idx, c, mt, vt)
    ptrs = _vector_ptrs(em, buf, idx)
    mask = ctx.mask if ctx.mask is not None else em.const("bool", 1, n)
    fn = em.mb.intrinsic(f"llvm.masked.gather.v{n}{type_suffix(mt)}.v{n}p0", vt,
                         [ptrs.type, I32, mask.type, vt])
    v = bl.call(fn, [ptrs, align, mask, ir.Constant(vt, None)])
    return from_mem(em, v, buf.dtype)


def _inside_alloca(em, buf, first, n) -> bool:
    """Whether lanes [first, first + n) of `buf` (`first` an LLVM index value) are known
    to lie inside the function's own stack buffer."""
    a = em.bufs.get(buf)
    c = int_const_value(first)
    return isinstance(a, ir.AllocaInstr) and c is not None and 0 <= c \
        and c + n <= a.allocated_type.count


def _odd_width(n):
    return n > 2 and n & (n - 1)


def _masked_loads_cheap(em):
    # x86 from AVX on has one-instruction masked loads; elsewhere (NEON) LLVM would
    # split them into scalar loads. Widened stores also need AVX-512 (see _vector_store).
    d = em.mb.target.description
    return d.arch == "x86_64" and d.vector_bits >= 256


def _is_alloca(em, buf):
    # small local buffers (register tiles) must stay plain loads and stores, which LLVM
    # promotes to registers; it cannot promote through masked intrinsics
    return isinstance(em.bufs.get(buf), ir.AllocaInstr)


def _wide_mask(em, n, w, mask):
    """<w x i1>: lanes below n as `mask` says (all on without one), the rest off."""
    if mask is None:
        return ir.Constant(ir.VectorType(I1, w), [1] * n + [0] * (w - n))
    zeros = ir.Constant(mask.type, None)
    sel = list(range(n)) + [n] * (w - n)
    return em.builder.shuffle_vector(mask, zeros, ir.Constant(ir.VectorType(I32, w), sel))


def _widened_load(em, p, mt, n, mask, align):
    """A contiguous vector of a width that is not a power of two (a 7- or 14-lane row) as
    one masked load of the next power of two: LLVM splits a plain <7 x float> load into
    4 + 2 + 1 lane pieces, while a masked load is one instruction on AVX2 and AVX-512 and
    reads nothing past lane n - 1."""
    w = 1 << (n - 1).bit_length()
    wt = ir.VectorType(mt, w)
    fn = em.mb.intrinsic(f"llvm.masked.load.v{w}{type_suffix(mt)}.p0", wt, [PTR, I32, ir.VectorType(I1, w), wt])
    v = em.builder.call(fn, [p, ir.Constant(I32, align), _wide_mask(em, n, w, mask), ir.Constant(wt, None)])
    return em.builder.shuffle_vector(v, ir.Constant(wt, None), ir.Constant(ir.VectorType(I32, n), list(range(n))))


def _widened_store(em, p, val, n, mask, align):
    w = 1 << (n - 1).bit_length()
    wt = ir.VectorType(val.type.element, w)
    wide = em.builder.shuffle_vector(val, ir.Constant(val.type, None),
                                     ir.Constant(ir.VectorType(I32, w), list(range(n)) + [n] * (w - n)))
    fn = em.mb.intrinsic(f"llvm.masked.store.v{w}{type_suffix(val.type.element)}.p0", ir.VoidType(),
                         [wt, PTR, I32, ir.VectorType(I1, w)])
    em.builder.call(fn, [wide, p, ir.Constant(I32, align), _wide_mask(em, n, w, mask)])


def _strided_load(em, buf, idx, c, mt, vt):
    """Lanes `c` elements apart: one contiguous load of the span they cover, then every
    c-th element (x86 does this in a few shuffles; a gather runs about one element per
    cycle). The span ends at the last lane's element, and under a lane mask only the
    lanes' own elements are read, so nothing the serial loop would not touch is read."""
    ctx, bl = em.vec, em.builder
    n = ctx.count
    span_n = (n - 1) * c + 1
    span = ir.VectorType(mt, span_n)
    p = elem_ptr(em, buf, _at_lane0(em, idx))
    if ctx.mask is None:
        wide = bl.load(p, typ=span, align=dt.itemsize(buf.dtype))
    else:
        # element k of the span is lane k // c's when k % c == 0; the rest stay off
        zeros = ir.Constant(ctx.mask.type, None)
        sel = [k // c if k % c == 0 else n for k in range(span_n)]
        smask = bl.shuffle_vector(ctx.mask, zeros, ir.Constant(ir.VectorType(I32, span_n), sel))
        fn = em.mb.intrinsic(f"llvm.masked.load.v{span_n}{type_suffix(mt)}.p0", span,
                             [PTR, I32, smask.type, span])
        wide = bl.call(fn, [p, ir.Constant(I32, dt.itemsize(buf.dtype)), smask, ir.Constant(span, None)])
    v = bl.shuffle_vector(wide, ir.Constant(span, None),
                          ir.Constant(ir.VectorType(I32, n), [i * c for i in range(n)]))
    return from_mem(em, v, buf.dtype)


def store(em, s):
    """Emits `BufferStore` `s`."""
    buf = s.buffer
    idx = flat_index(s, s.indices)
    val = em.cast(em.expr(s.value), s.value.dtype, buf.dtype)
    if em.vec is not None:
        return _vector_store(em, buf, idx, val)
    iv = em.index(idx)
    em.builder.store(_to_mem(em, val, buf.dtype), elem_ptr(em, buf, iv),
                     align=dt.itemsize(buf.dtype))


def _vector_store(em, buf, idx, val):
    ctx = em.vec
    bl = em.builder
    n = ctx.count
    idx = ctx.info.inline(idx)
    mt = scalar_type(buf.dtype, True)
    align = dt.itemsize(buf.dtype)
    if not ctx.info.index_varies(idx):
        if lanes_of(val) > 1:  # the serial loop's last iteration wins
            val = bl.extract_element(val, ir.Constant(I32, n - 1))
        bl.store(_to_mem(em, val, buf.dtype), elem_ptr(em, buf, _at_lane0(em, idx)),
                 align=align)
        return
    val = _to_mem(em, em.splat(val, n), buf.dtype)
    vt = ir.VectorType(mt, n)
    c = ctx.info.coeff(idx)
    if c == 1:
        first = _at_lane0(em, idx)
        p = elem_ptr(em, buf, first)
        # with AVX-512 only: AVX's vmaskmovps store is microcoded on AMD cores (Zen 2/3)
        # and slower there than LLVM's 4 + 2 + 1 lane pieces
        if _odd_width(n) and not _is_alloca(em, buf) and em.mb.target.has_avx512:
            _widened_store(em, p, val, n, ctx.mask, align)
            return
        if ctx.mask is None:
            bl.store(val, p, align=align)
        elif _inside_alloca(em, buf, first, n):
            bl.store(bl.select(ctx.mask, val, bl.load(p, typ=vt, align=align)), p, align=align)
        else:
            fn = em.mb.intrinsic(f"llvm.masked.store.v{n}{type_suffix(mt)}.p0", ir.VoidType(),
                                 [vt, PTR, I32, ctx.mask.type])
            bl.call(fn, [val, p, ir.Constant(I32, align), ctx.mask])
        return
    ptrs = _vector_ptrs(em, buf, idx)
    mask = ctx.mask if ctx.mask is not None else em.const("bool", 1, n)
    fn = em.mb.intrinsic(f"llvm.masked.scatter.v{n}{type_suffix(mt)}.v{n}p0", ir.VoidType(),
                         [vt, ptrs.type, I32, mask.type])
    bl.call(fn, [val, ptrs, ir.Constant(I32, align), mask])


def allocate(em, s):
    """Emits `Allocate` `s`: storage for its buffer around its body."""
    buf = s.buffer
    mt = scalar_type(buf.dtype, True)
    size = 1
    const = True
    for d in buf.shape:
        if isinstance(d, E.IntImm):
            size *= d.value
        else:
            const = False
    nbytes = size * dt.itemsize(buf.dtype)
    saved = em.bufs.get(buf)
    if const and nbytes <= ALLOCA_MAX_BYTES:
        a = em.alloca_builder.alloca(ir.ArrayType(mt, max(size, 1)), name=sanitize(buf.name))
        a.align = 64
        a.type = PTR  # llvmlite types allocas as typed pointers; ours are opaque
        em.bufs[buf] = a
        em.stmt(s.body)
        _restore_buf(em, buf, saved)
        return
    bl = em.builder
    if const:
        nb = ir.Constant(I64, max(nbytes, 1))
    else:
        nb = ir.Constant(I64, dt.itemsize(buf.dtype))
        for d in buf.shape:
            dv = em.to_i64(em.expr(d), d.dtype)
            nb = em.int_arith("mul", nb, dv, "int64")
        nb = bl.select(bl.icmp_signed("<", nb, ir.Constant(I64, 1)), ir.Constant(I64, 1), nb)
    # aligned_alloc wants a multiple of the alignment
    nb = bl.and_(bl.add(nb, ir.Constant(I64, 63)), ir.Constant(I64, -64)) \
        if not isinstance(nb, ir.Constant) else ir.Constant(I64, (nb.constant + 63) // 64 * 64)
    if not const:
        _allocate_sized(em, s, buf, nb, saved)
        return
    p = bl.call(_heap_alloc(em), [ir.Constant(I64, 64), nb], name=sanitize(buf.name))
    okb, failb = em.new_block("alloc.ok"), em.new_block("alloc.fail")
    isnull = bl.icmp_unsigned("==", p, ir.Constant(PTR, None))
    bl.cbranch(isnull, failb, okb)
    bl.position_at_end(failb)
    em.fail(1)
    bl.position_at_end(okb)
    em.bufs[buf] = p
    em.stmt(s.body)
    if not bl.block.is_terminated:
        bl.call(_heap_free(em), [p])
    _restore_buf(em, buf, saved)


def _allocate_sized(em, s, buf, nb, saved):
    """A buffer of a size known at run time (a row of a symbolic length, allocated in each
    iteration of a parallel loop): on the stack when it is small at run time (saved and
    restored around the body, so a loop does not grow the stack), else aligned_alloc/free.
    A heap allocation per softmax row cost more than the row."""
    bl = em.builder
    small = bl.icmp_unsigned("<=", nb, ir.Constant(I64, ALLOCA_MAX_BYTES))
    stackb, heapb, joinb = em.new_block("alloc.stack"), em.new_block("alloc.heap"), em.new_block("alloc.join")
    bl.cbranch(small, stackb, heapb)
    bl.position_at_end(stackb)
    save = em.mb.declare("llvm.stacksave.p0", PTR, [])
    sp = bl.call(save, [])
    on_stack = bl.alloca(ir.IntType(8), size=nb, name=sanitize(buf.name) + ".stack")
    on_stack.align = 64
    on_stack.type = PTR
    bl.branch(joinb)
    bl.position_at_end(heapb)
    on_heap = bl.call(_heap_alloc(em), [ir.Constant(I64, 64), nb], name=sanitize(buf.name))
    okb, failb = em.new_block("alloc.ok"), em.new_block("alloc.fail")
    bl.cbranch(bl.icmp_unsigned("==", on_heap, ir.Constant(PTR, None)), failb, okb)
    bl.position_at_end(failb)
    em.fail(1)
    bl.position_at_end(okb)
    bl.branch(joinb)
    bl.position_at_end(joinb)
    p = bl.phi(PTR, name=sanitize(buf.name) + ".ptr")
    p.add_incoming(on_stack, stackb)
    p.add_incoming(on_heap, okb)
    saved_sp = bl.phi(PTR)
    saved_sp.add_incoming(sp, stackb)
    saved_sp.add_incoming(ir.Constant(PTR, None), okb)
    em.bufs[buf] = p
    em.stmt(s.body)
    if not bl.block.is_terminated:
        restoreb, freeb, doneb = em.new_block("alloc.restore"), em.new_block("alloc.free"), em.new_block("alloc.done")
        bl.cbranch(small, restoreb, freeb)
        bl.position_at_end(restoreb)
        bl.call(em.mb.declare("llvm.stackrestore.p0", ir.VoidType(), [PTR]), [saved_sp])
        bl.branch(doneb)
        bl.position_at_end(freeb)
        bl.call(_heap_free(em), [p])
        bl.branch(doneb)
        bl.position_at_end(doneb)
    _restore_buf(em, buf, saved)


def _heap_alloc(em):
    """alloc(align, bytes) of heap buffers: the runtime's scratch where it is loaded
    (module.use_pool: the same library as the worker pool), else libc's."""
    return em.mb.declare("tdsl_scratch_alloc" if em.mb.use_pool else "aligned_alloc", PTR, [I64, I64])


def _heap_free(em):
    return em.mb.declare("tdsl_scratch_free" if em.mb.use_pool else "free", ir.VoidType(), [PTR])


def _restore_buf(em, buf, saved):
    if saved is None:
        em.bufs.pop(buf, None)
    else:
        em.bufs[buf] = saved


LINE_BYTES = 64     # the cache line of the CPUs tdsl targets (x86-64, most AArch64)


def prefetch(em, s):
    """One `llvm.prefetch` (for reading, kept in all levels) per cache line of the run of
    `s.extent` elements from `s.indices`: a loop over the line addresses."""
    b = em.builder
    n = em.to_i64(em.expr(s.extent), s.extent.dtype)
    size = ir.Constant(I64, max(1, dt.bits(s.buffer.dtype) // 8))
    start = b.ptrtoint(elem_ptr(em, s.buffer, em.index(flat_index(s, s.indices))), I64)
    mask = ir.Constant(I64, -LINE_BYTES)
    first = b.and_(start, mask)
    last = b.and_(b.sub(b.add(start, b.mul(n, size)), ir.Constant(I64, 1)), mask)
    fn = em.mb.declare("llvm.prefetch.p0", ir.VoidType(), [PTR, I32, I32, I32])
    pre = b.block
    body = em.new_block("prefetch")
    done = em.new_block("prefetch.end")
    b.cbranch(b.icmp_signed(">", n, ir.Constant(I64, 0)), body, done)
    b.position_at_end(body)
    line = b.phi(I64)
    line.add_incoming(first, pre)
    b.call(fn, [b.inttoptr(line, PTR), ir.Constant(I32, 0), ir.Constant(I32, 3),
                ir.Constant(I32, 1)])
    nxt = b.add(line, ir.Constant(I64, LINE_BYTES))
    line.add_incoming(nxt, b.block)
    b.cbranch(b.icmp_unsigned("<=", nxt, last), body, done)
    b.position_at_end(done)
