"""One output per thread (or one vector of them): the GPU binding of stages that are
neither tiled contractions nor rows reduced across threads (`gpu.py`), and of the sum of
split-K partials (`gpu_contraction.py`)."""
from __future__ import annotations

from ..te import thread_axis

VECTOR = 4      # float32 outputs a thread of an elementwise stage writes: one 16-byte access


def flat_vector(st, extents) -> int:
    """VECTOR for a float32 elementwise stage whose last axis is a multiple of it (its
    outputs then come in aligned 16-byte pieces: each thread's loads of a whole vector are
    in flight together, where one float a thread leaves an H200's bandwidth 40% idle),
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
