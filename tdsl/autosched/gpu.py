"""Rules for GPU targets ("cuda", "opencl"; the same schedule runs on "c", which emulates
the grid on the CPU).

- Elementwise stages are inlined into their readers, except the operands of contractions
  (materialized once, like on the CPU: the shared-memory copies then read plain memory).
- bfloat16/float16 matrix products into float32 on CUDA sm_80+: tensor cores (mma.sync,
  `gpu_tensorize`).
- Contractions (a spatial axis along which an operand is reused: matmul, conv, batch
  matmul): block tiles staged through shared memory, register tiles per thread
  (`gpu_contraction`).
- Reductions that feed one elementwise stage row by row (softmax, layer norm): one block
  per row computes them and then the row's outputs, in one kernel (`gpu_rows`).
- Other long reductions read along the row, or too few to fill the GPU a thread each: a block's
  threads reduce a row together (`gpu_reduce`).
- Every other stage: spatial axes fused and split into blocks of `threads` threads; a
  (short) reduction runs its loop inside one thread, accumulating in a register."""
from __future__ import annotations

from .analysis import stage_infos
from .gpu_contraction import contraction
from .gpu_flat import bind_flat, flat_vector
from .gpu_reduce import cross_thread, wants_cross_thread
from .gpu_rows import row_groups, schedule_row_group
from .gpu_tensorize import tensor_core


def schedule_gpu(s, target, rec, params):
    infos = stage_infos(s)
    comp = [st for st in s.stages if st in infos]
    threads = min(params.threads, target.max_threads_per_block)
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
    groups = row_groups(s, comp, infos, readers, inlined, target, params)
    members = {m for _, ms in groups.values() for m in ms}
    for st in comp:
        if st in inlined or st in members:
            continue
        info = infos[st]
        if st in groups:
            schedule_row_group(s, st, *groups[st], infos, target, params, rec)
            continue
        if info.is_reuse_reduction():
            done = tensor_core(s, st, info, target, rec,
                               [c for c in readers[st] if c not in inlined], infos)
            if done:
                members |= done
                continue
            contraction(s, st, info, target, params, rec)
            continue
        if info.is_reduction and wants_cross_thread(info, target, params):
            cross_thread(s, st, info, target, params, rec)
            continue
        if info.is_reduction:
            local = s.cache_write(st.op.output(0), "local")
            rec.add(st, "cache_write", "cache_write(local)", "each thread accumulates in a register")
        vec = 1 if info.is_reduction else flat_vector(st, info.extents)
        ti = bind_flat(st, threads, vec)
        if ti is None:
            rec.add(st, "serial", "one thread", "a scalar output")
            continue
        if vec > 1:
            rec.add(st, "bind", f"fuse all; split {vec}, vectorize; split {threads}; bind "
                    "blockIdx.x / threadIdx.x", f"{vec} consecutive outputs per thread (one "
                    f"16-byte access each), {threads} threads per block")
        else:
            rec.add(st, "bind", f"fuse all; split {threads}; bind blockIdx.x / threadIdx.x",
                    f"one output element per thread, {threads} threads per block")
        if info.is_reduction:
            s[local].compute_at(st, ti)

