"""What the rules share while they schedule one definition: the schedule, the target, the
parameters, the analysis of every stage, the record of decisions, and what earlier rules
decided (the stages inlined, the stages scheduled with another). A target family's
context (`cpu.CPUContext`, `gpu.GPUContext`) adds its plan and its helpers."""
from __future__ import annotations

from typing import Dict, List

from ..schedule.updates import update_chains
from ..te.extern import ExternOp
from .analysis import StageInfo, stage_infos
from .rule import INLINE_PHASE


class Context:
    """The state of one run of the rules over schedule `sched`."""

    family = "cpu"              # "cpu" or "gpu": the wording and the choices of shared rules
    consumers_first = True      # the order in which the schedule phase visits stages

    def __init__(self, sched, target, rec, params):
        self.sched, self.target, self.rec, self.params = sched, target, rec, params
        self.infos: Dict[object, StageInfo] = stage_infos(sched)
        self.comp = [st for st in sched.stages if st in self.infos]
        self.readers = {st: [c for c in self.comp if st in sched.producers(c)]
                        for st in self.comp}
        self.inlined = set()    # stages computed where they are read
        # read whole by an extern stage: they must exist at root as buffers
        self.read_whole = {st for c in sched.stages if isinstance(c.op, ExternOp)
                           for st in sched.producers(c)}
        # a stage with updates stays at root: the update rule schedules its definitions
        self.read_whole |= set(update_chains(sched))
        self.taken = set()      # scheduled with another: the schedule phase skips them

    def visit(self, phase):
        """The stages the rules of `phase` are offered, in order."""
        if phase == INLINE_PHASE:
            return [st for st in reversed(self.comp) if not st.is_output
                    and not self.infos[st].is_reduction and st not in self.read_whole]
        self.plan()
        order = reversed(self.comp) if self.consumers_first else self.comp
        # a generator: a rule may take later stages while the phase runs
        return (st for st in order if st not in self.inlined and st not in self.taken)

    def plan(self):
        """Decides, once the inline phase is done, which stages are computed inside
        others (they go to `taken`); the family's context says how."""

    def eff_readers(self, st) -> List:
        """The stages that read `st`, inlined readers looked through."""
        out, todo = [], list(self.readers[st])
        while todo:
            c = todo.pop()
            if c in self.inlined:
                todo.extend(self.readers[c])
            elif c not in out:
                out.append(c)
        return out

    def contraction_readers(self, st) -> List:
        """The contractions among `st`'s readers (inlined ones looked through)."""
        return [c for c in self.eff_readers(st) if self.infos[c].is_reuse_reduction()]


__all__ = ["Context"]
