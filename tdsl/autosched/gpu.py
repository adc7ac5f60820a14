"""Rules for GPU targets ("cuda", "opencl"; the same schedule runs on "c", which emulates
the grid on the CPU).

- Elementwise stages are inlined into their readers, except the operands of contractions
  (materialized once, like on the CPU: the shared-memory copies then read plain memory).
- Contractions (a spatial axis along which an operand is reused: matmul, conv, batch
  matmul): a block of ty x tx threads computes a tile of (ty*ti) x (tx*tj) outputs, each
  thread a ti x tj sub-tile accumulated in registers (cache_write "local"); per step of the
  outer reduction loop, the block copies the slices of every operand it needs into shared
  memory, all threads helping (the reuse across the block's threads is what pays), then
  synchronizes. Other spatial axes go to blockIdx.z.
- Every other stage: spatial axes fused and split into blocks of `threads` threads; a
  reduction runs its loop inside one thread, accumulating in a register."""
from __future__ import annotations

from ..te import thread_axis
from .analysis import stage_infos

BLOCK = (8, 8)          # threads per block of a contraction (y, x)
K_TILE = 8              # outer reduction steps between shared-memory refills


def schedule_gpu(s, target, rec, params):
    infos = stage_infos(s)
    comp = [st for st in s.stages if st in infos]
    threads = min(params.threads, getattr(target, "max_threads_per_block", 1024))
    readers = {st: [c for c in comp if st in s.producers(c)] for st in comp}
    inlined = set()
    for st in reversed(comp):
        info = infos[st]
        if st.is_output or info.is_reduction:
            continue
        eff, todo = [], list(readers[st])
        while todo:
            c = todo.pop()
            if c in inlined:
                todo.extend(readers[c])
            else:
                eff.append(c)
        if any(infos[c].is_reuse_reduction() for c in eff):
            rec.add(st, "materialize", "compute_root", "operand of a contraction: computed once, "
                    "then staged through shared memory")
            continue
        st.compute_inline()
        inlined.add(st)
        rec.add(st, "inline", "compute_inline", "elementwise: computed by the thread that reads it")
    for st in comp:
        if st in inlined:
            continue
        info = infos[st]
        if info.is_reuse_reduction():
            contraction(s, st, info, rec)
            continue
        if info.is_reduction:
            local = s.cache_write(st.op.output(0), "local")
            rec.add(st, "cache_write", "cache_write(local)", "each thread accumulates in a register")
        axes = list(st.op.axis)
        if not axes:
            rec.add(st, "serial", "one thread", "a scalar output")
            continue
        f = st.fuse(*axes) if len(axes) > 1 else axes[0]
        bo, ti = st.split(f, factor=threads)
        st.bind(bo, thread_axis("blockIdx.x"))
        st.bind(ti, thread_axis("threadIdx.x"))
        rec.add(st, "bind", f"fuse all; split {threads}; bind blockIdx.x / threadIdx.x",
                f"one output element per thread, {threads} threads per block")
        if info.is_reduction:
            s[local].compute_at(st, ti)


def contraction(s, st, info, rec):
    n = len(info.axes)
    v, r = n - 1, info.row_axis()
    ty_n, tx_n = BLOCK
    ext_r, ext_v = info.extents[r], info.extents[v]
    # two outputs per thread along an axis long enough to fill the block twice
    ti = 2 if ext_r is None or ext_r >= 2 * ty_n else 1
    tj = 2 if ext_v is None or ext_v >= 2 * tx_n else 1
    operands = []
    for ld in info.loads:
        if ld.tensor not in operands:
            operands.append(ld.tensor)
    out = st.op.output(0)
    CL = s.cache_write(out, "local")
    shared = [s.cache_read(t, "shared", [CL]) for t in operands]
    ax = list(st.op.axis)
    by, yi = st.split(ax[r], factor=ty_n * ti)
    bx, xi = st.split(ax[v], factor=tx_n * tj)
    ty, yi = st.split(yi, nparts=ty_n)
    tx, xi = st.split(xi, nparts=tx_n)
    others = [ax[i] for i in range(n) if i not in (r, v)]
    st.reorder(*others, by, bx, ty, tx, yi, xi)
    if others:
        bz = st.fuse(*others) if len(others) > 1 else others[0]
        st.bind(bz, thread_axis("blockIdx.z"))
    st.bind(by, thread_axis("blockIdx.y"))
    st.bind(bx, thread_axis("blockIdx.x"))
    st.bind(ty, thread_axis("threadIdx.y"))
    st.bind(tx, thread_axis("threadIdx.x"))
    rec.add(st, "block-tile", f"blocks of {ty_n}x{tx_n} threads, {ti}x{tj} outputs per thread "
            f"({ax[r].var.name} x {ax[v].var.name})", "a contraction: the block's threads share "
            "the operand slices they read; each thread's outputs stay in registers")
    L = s[CL]
    L.compute_at(st, tx)
    la, lr = list(L.op.axis), list(L.op.reduce_axis)
    ko, ki = L.split(lr[0], factor=K_TILE)
    L.reorder(ko, ki, *lr[1:], *la)
    L.unroll(la[r])         # the thread's ti x tj accumulators stay in registers
    L.unroll(la[v])
    for t in shared:
        S = s[t]
        S.compute_at(L, ko)
        a = list(S.op.axis)
        f = S.fuse(*a) if len(a) > 1 else a[0]
        t_y, f = S.split(f, nparts=ty_n)
        t_x, f = S.split(f, nparts=tx_n)
        S.bind(t_y, thread_axis("threadIdx.y"))
        S.bind(t_x, thread_axis("threadIdx.x"))
    rec.add(st, "shared-memory", f"cache_read({', '.join(t.name for t in operands)}, shared) at "
            f"{ko.var.name}; cooperative copy by all threads",
            f"every {K_TILE} steps of '{lr[0].var.name}' the block stages what it reads once, "
            "instead of each thread reading global memory")
