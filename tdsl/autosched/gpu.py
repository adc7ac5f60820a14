"""The rules for GPU targets ("cuda", "opencl"; the same schedule runs on "c", which emulates
the grid on the CPU), in the order `GPU_RULES` applies them:

1. inline phase, consumers first (`inline.py`): elementwise stages are inlined into their
   readers, except the operands of contractions (`materialize`d once, like on the CPU: the
   shared-memory copies then read plain memory).
2. the plan (`GPUContext.plan`, `gpu_rows.row_groups`): reductions that feed one
   elementwise stage row by row (softmax, layer norm) are grouped with that stage.
3. schedule phase, producers first; the first rule that applies:
   - `row-group`: one block per row computes the row's reductions and then its outputs, in
     one kernel (`gpu_rows`);
   - `tensorize`: bfloat16/float16 matrix products into float32 on CUDA sm_80+: tensor
     cores (mma.sync, `gpu_tensorize`);
   - `block-tile`: contractions (a spatial axis along which an operand is reused: matmul,
     conv, batch matmul): block tiles staged through shared memory, register tiles per
     thread (`gpu_contraction`);
   - `cross-thread`: other long reductions read along the row, or too few to fill the GPU
     a thread each: a block's threads reduce a row together (`gpu_reduce`);
   - `bind`: every other stage: spatial axes fused and split into blocks of `threads`
     threads; a (short) reduction runs its loop inside one thread, accumulating in a
     register (`gpu_flat`)."""
from __future__ import annotations

from .context import Context
from .gpu_contraction import BLOCK_TILE
from .gpu_flat import FLAT
from .gpu_reduce import CROSS_THREAD
from .gpu_rows import ROW_GROUP, row_groups
from .gpu_tensorize import TENSOR_CORE
from .inline import INLINE, MATERIALIZE
from .rule import run_rules
from .updates import UPDATES

GPU_RULES = [
    MATERIALIZE, INLINE,
    UPDATES, ROW_GROUP, TENSOR_CORE, BLOCK_TILE, CROSS_THREAD, FLAT,
]


class GPUContext(Context):
    family = "gpu"
    consumers_first = False

    def __init__(self, sched, target, rec, params):
        super().__init__(sched, target, rec, params)
        self.row_groups = {}        # {owner: (row rank, members)}

    def plan(self):
        self.row_groups = row_groups(self.sched, self.comp, self.infos, self.readers,
                                     self.inlined, self.target, self.params)
        self.taken = {m for _, ms in self.row_groups.values() for m in ms}


def schedule_gpu(s, target, rec, params, rules=None):
    run_rules(GPU_RULES if rules is None else rules, GPUContext(s, target, rec, params))


__all__ = ["GPU_RULES", "GPUContext", "schedule_gpu"]
