"""One output per thread: the GPU binding of stages that are neither tiled contractions nor
rows reduced across threads (`gpu.py`), and of the sum of split-K partials
(`gpu_contraction.py`)."""
from __future__ import annotations

from ..te import thread_axis


def bind_flat(st, threads):
    """All spatial axes of stage `st` fused, `threads` outputs to a block; returns the
    thread axis (None for a scalar output)."""
    axes = list(st.op.axis)
    if not axes:
        return None
    f = st.fuse(*axes) if len(axes) > 1 else axes[0]
    bo, ti = st.split(f, factor=threads)
    st.bind(bo, thread_axis("blockIdx.x"))
    st.bind(ti, thread_axis("threadIdx.x"))
    return ti
