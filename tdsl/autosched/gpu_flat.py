"""One output per thread (or one vector of them): the GPU binding of stages that are
neither tiled contractions nor rows reduced across threads (the `bind` rule), and of the sum of
split-K partials (`gpu_contraction.py`)."""
from __future__ import annotations

from ..te import thread_axis
from .rule import Rule

VECTOR = 4      # float32 outputs a thread of an elementwise stage writes: one 16-byte access


def flat_vector(st, extents) -> int:
    """VECTOR for a float32 elementwise stage whose last axis is a multiple of it (its
    outputs then come in aligned 16-byte pieces: each thread's loads of a whole vector are
    in flight together, where one float a thread leaves much of the bandwidth idle),
    else 1."""
    last = extents[-1] if extents else None
    if st.op.output(0).dtype != "float32" or not isinstance(last, int) or last % VECTOR:
        return 1
    return VECTOR


def bind_flat(st, threads, vector=1):
    """All spatial axes of stage `st` fused, `threads` outputs (of `vector` consecutive
    ones, vectorized) to a block; returns the thread axis (None for a scalar output)."""
    axes = list(st.op.axis)
    if not axes:
        return None
    f = st.fuse(*axes) if len(axes) > 1 else axes[0]
    if vector > 1:
        f, v = st.split(f, factor=vector)
        st.vectorize(v)
    bo, ti = st.split(f, factor=threads)
    st.bind(bo, thread_axis("blockIdx.x"))
    st.bind(ti, thread_axis("threadIdx.x"))
    return ti


class Flat(Rule):
    """Every stage no earlier rule took: spatial axes fused and split into blocks of
    `threads` threads; a (short) reduction runs its loop inside one thread, accumulating
    in a register."""
    name = "bind"

    def apply(self, ctx, st):
        info = ctx.infos[st]
        threads = min(ctx.params.threads, ctx.target.max_threads_per_block)
        # a register accumulator is placed at the fused thread loop; bound inference cannot
        # bound its region through a fused loop of a symbolic extent (it would be a whole
        # axis of a run-time length), so such a stage accumulates in place
        local = None
        if info.is_reduction and not (None in info.extents and len(info.extents) > 1):
            local = ctx.sched.cache_write(st.op.output(0), "local")
            ctx.rec.add(st, "cache_write", "cache_write(local)",
                        "each thread accumulates in a register")
        vec = 1 if info.is_reduction else flat_vector(st, info.extents)
        ti = bind_flat(st, threads, vec)
        if ti is None:
            ctx.rec.add(st, "serial", "one thread", "a scalar output")
            return
        if vec > 1:
            self.note(ctx, st, f"fuse all; split {vec}, vectorize; split {threads}; bind "
                      "blockIdx.x / threadIdx.x", f"{vec} consecutive outputs per thread (one "
                      f"16-byte access each), {threads} threads per block")
        else:
            self.note(ctx, st, f"fuse all; split {threads}; bind blockIdx.x / threadIdx.x",
                      f"one output element per thread, {threads} threads per block")
        if local is not None:
            ctx.sched[local].compute_at(st, ti)


FLAT = Flat()
