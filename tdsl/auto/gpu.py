"""Rules for GPU targets ("cuda", "opencl"; the same schedule runs on "c", which emulates
the grid on the CPU): elementwise stages are inlined, every other stage gets its spatial
axes fused and split into blocks of `threads` threads; a reduction runs its loop inside one
thread and accumulates in a register (a local cache_write)."""
from __future__ import annotations

from ..te import thread_axis
from .analysis import stage_infos


def schedule_gpu(s, target, rec, params):
    infos = stage_infos(s)
    comp = [st for st in s.stages if st in infos]
    threads = min(params.threads, getattr(target, "max_threads_per_block", 1024))
    for st in reversed(comp):
        info = infos[st]
        if not st.is_output and not info.is_reduction:
            st.compute_inline()
            rec.add(st, "inline", "compute_inline", "elementwise: computed by the thread that reads it")
    for st in comp:
        if st.attach_type == "inline":
            continue
        info = infos[st]
        target_st = st
        if info.is_reduction:
            local = s.cache_write(st.op.output, "local")
            rec.add(st, "cache_write", "cache_write(local)", "each thread accumulates in a register")
        axes = list(st.op.axis)
        if not axes:
            rec.add(st, "serial", "one thread", "a scalar output")
            continue
        f = st.fuse(*axes) if len(axes) > 1 else axes[0]
        bo, ti = st.split(f, factor=threads)
        st.bind(bo, thread_axis("blockIdx.x"))
        st.bind(ti, thread_axis("threadIdx.x"))
        rec.add(target_st, "bind", f"fuse all; split {threads}; bind blockIdx.x / threadIdx.x",
                f"one output element per thread, {threads} threads per block")
        if info.is_reduction:
            s[local].compute_at(st, ti)
