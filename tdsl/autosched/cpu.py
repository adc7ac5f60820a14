"""The rules for CPU targets ("llvm", and "c", which compiles the same loop nest), in the
order `CPU_RULES` applies them, and why:

1. inline phase, consumers first (`inline.py`, `cpu_stencil.py`): elementwise stages are
   inlined into their readers (no buffer, no extra pass over memory), except
   - `stencil`: a pointwise stage read at several shifted taps whose recomputation would
     cost more than a store and loads is computed per tile of its consumer;
   - `materialize`: the operands of contractions (materialized once: the tile's inner loop
     then reads plain memory instead of recomputing per use) and expensive stages read more
     than once (an exp read by a row sum and a division is computed once).
2. the plan (`CPUContext.plan`, `cpu_groups.py`): a stage read only by one loop nest, at
   indices that are that nest's own leading loop variables, is computed at that loop
   (softmax's row max and row sum inside the output's row loop); the stencil stages are
   grouped by the consumer whose tiles compute them; a contraction read by one elementwise
   stage at its own indices is computed inside that stage's tile (the epilogue fusion).
3. schedule phase, per group owner, consumers first; the first rule that applies:
   - `stencil tile`: the owner of a stencil group, tiled with its members per tile;
   - `tensorize`: a uint8 x int8 or bfloat16 contraction on a CPU with a dot-product
     instruction: B packed into the instruction's layout, a register tile tensorized
     (cpu_tensorize.py);
   - `dot-tile`: a contraction whose operands are contiguous along the reduction (A @ B.T)
     over a short reduction or few rows (attention's Q K^T): rows x cols vectors of partial
     sums along the reduction (rfactor, lanes last); with a long reduction and rows enough
     (a gradient's H @ B.T, a dense layer x W^T) `register-tile` takes it instead, B's
     panels copied transposed (transform_layout);
   - `register-tile`: any other contraction (some operand is reused along a spatial axis:
     matmul, conv, batch matmul): a register tile (rows x vectors, sized by
     tiling.register_tile from the target's vector lanes, registers and FMA units)
     accumulates in a local cache_write buffer (or in the producer itself, inside its
     elementwise consumer's tile); the reused operand's strided panel is copied once per
     column of tiles (packing);
   - `reduction`: vectorized along the contiguous axis (rfactor over the lanes when that is
     the reduction axis); long reductions with too few outputs to keep the cores busy are
     split by rfactor into parallel partial sums;
   - `elementwise`: vectorized and unrolled along the last axis (the trailing axes fused
     into one contiguous run first when the last is too short for a vector: a grid's cells).
   Outer loops are fused until there are enough parallel tasks (tiling.parallel_chunks),
   never fusing a loop whose tiles are ragged (the fused loop would keep the tail's guard in
   its body; alone, loop partitioning peels the tail off).
"""
from __future__ import annotations

from .cpu_base import CPUBase
from .cpu_contraction import DOT_TILE, REGISTER_TILE
from .cpu_elementwise import ELEMENTWISE
from .cpu_groups import compute_at_groups, epilogues
from .cpu_reduce import REDUCTION
from .cpu_stencil import STENCIL, STENCIL_TILE, stencil_groups, stencil_plan
from .cpu_tensorize import TENSORIZE
from .inline import INLINE, MATERIALIZE
from .rule import run_rules
from .updates import UPDATES

CPU_RULES = [
    STENCIL, MATERIALIZE, INLINE,
    UPDATES, STENCIL_TILE, TENSORIZE, DOT_TILE, REGISTER_TILE, REDUCTION, ELEMENTWISE,
]


class CPUContext(CPUBase):
    def __init__(self, sched, target, rec, params):
        super().__init__(sched, target, rec, params)
        # decided on the definition alone, before anything is inlined
        self.stencil_plan = stencil_plan(self)

    def plan(self):
        self.attach, self.level = compute_at_groups(self)
        self.tiles = stencil_groups(self)
        self.epilogue = epilogues(self)
        self.taken = set(self.attach) | self.stencil | set(self.epilogue.values())


def schedule_cpu(s, target, rec, params, rules=None):
    run_rules(CPU_RULES if rules is None else rules, CPUContext(s, target, rec, params))


__all__ = ["CPU_RULES", "CPUContext", "schedule_cpu"]
