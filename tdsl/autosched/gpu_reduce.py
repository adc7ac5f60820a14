"""The GPU rule for reductions that are not contractions (row sums, softmax's max and sum,
layer-norm means): the threads of a block reduce one row together. Thread t reads elements
t, t + T, t + 2T, ... (consecutive threads on consecutive elements: coalesced), folds them
in a register, and the T partial results are combined through shared memory by the
cross-thread reduction `schedule_ops` lowers a threadIdx-bound reduction loop to. Short
rows share a block (threadIdx.y), so a block still has enough threads to hide latency."""
from __future__ import annotations

from ..te import thread_axis
from .rule import Rule

MAX_ROW_THREADS = 512   # torch's block reduce; more only lengthens the log-tree
ELEMS_PER_THREAD = 4    # a thread folds at least this many elements before the tree
BLOCK_THREADS = 256     # threads wanted per block when rows are short
LARGE = 1024            # what a symbolic extent is assumed to be


def _pow2_floor(n):
    p = 1
    while 2 * p <= n:
        p *= 2
    return p


def wants_cross_thread(info, target, params) -> bool:
    """Rows long enough to give a warp work, and either read along the reduction (one thread
    per row would read with a stride) or too few outputs to fill the GPU a thread each."""
    if params.reduce_threads == 1:
        return False
    if params.reduce_threads:
        return True
    if info.reduce_size(LARGE) < target.warp_size:
        return False
    return info.reduce_contiguous() or info.outputs(LARGE) < target.sm_count * BLOCK_THREADS


def row_threads(info, target, params) -> int:
    """Threads that reduce one row together: enough that each folds ELEMS_PER_THREAD
    elements, a warp at least, MAX_ROW_THREADS at most (or the `reduce_threads` knob)."""
    rsize = info.reduce_size(LARGE)
    T = params.reduce_threads or min(MAX_ROW_THREADS, max(target.warp_size,
                                                          _pow2_floor(rsize // ELEMS_PER_THREAD)))
    return min(T, target.max_threads_per_block)


def cross_thread(s, st, info, target, params, rec):
    rsize = info.reduce_size(LARGE)
    T = row_threads(info, target, params)
    rows = info.outputs(LARGE)
    R = max(1, min(BLOCK_THREADS // T, _pow2_floor(rows))) if not params.reduce_threads else 1
    raxes = list(st.op.reduce_axis)
    k = st.fuse(*raxes) if len(raxes) > 1 else raxes[0]
    ko, ki = st.split(k, factor=T)
    axes = list(st.op.axis)
    tx = thread_axis("threadIdx.x")
    if not axes:
        st.reorder(ki, ko)
        st.bind(ki, tx)
        rec.add(st, "cross-thread", f"one block of {T} threads; bind {ki.var.name} to threadIdx.x",
                "a scalar output: the threads split the reduction and combine their partial results")
        return
    f = st.fuse(*axes) if len(axes) > 1 else axes[0]
    if R > 1:
        bo, ri = st.split(f, factor=R)
        st.reorder(bo, ri, ki, ko)
        st.bind(bo, thread_axis("blockIdx.x"))
        st.bind(ri, thread_axis("threadIdx.y"))
    else:
        st.reorder(f, ki, ko)
        st.bind(f, thread_axis("blockIdx.x"))
    st.bind(ki, tx)
    rec.add(st, "cross-thread", f"{R} row(s) per block, {T} threads per row; bind "
            f"{ki.var.name} to threadIdx.x, {ko.var.name} serial",
            f"a reduction of {'a symbolic number of' if None in info.rextents else rsize} "
            "elements per output: the row's threads read it coalesced, fold their share in a "
            "register and combine the partial results through shared memory")


class CrossThread(Rule):
    """A long reduction read along the row, or too few to fill the GPU a thread each: a
    block's threads reduce a row together."""
    name = "cross-thread"

    def applies(self, ctx, st):
        info = ctx.infos[st]
        return info.is_reduction and wants_cross_thread(info, ctx.target, ctx.params)

    def apply(self, ctx, st):
        cross_thread(ctx.sched, st, ctx.infos[st], ctx.target, ctx.params, ctx.rec)


CROSS_THREAD = CrossThread()
