"""`tdsl.auto_schedule(outputs, target)`: a schedule derived from the compute definition and
the target description, with no schedule or template written by the user.

It returns an ordinary `Schedule` (an `AutoSchedule`, which only adds `explain()`): print
it, edit it with the usual primitives, build it. `explain()` lists every rule applied, on
which stage, what it did and why; the primitives themselves are in the schedule's trace.

The rules are ordered lists of `Rule` (`rule.py`: a name, when it applies to a stage, what
it does): `CPU_RULES` (llvm and c, `cpu.py`) and `GPU_RULES` (cuda and opencl, `gpu.py`),
one rule a module beside them; they share a context (`context.py`: the schedule, the
target, the analysis of each stage (`analysis.py`), what earlier rules decided), the knobs
a search may set (`params.py`) and the explanation (`record.py`). `auto_schedule(...,
rules=[...])` runs another list. The search over the knobs sits above the rules, in
`tdsl.autotune.autosched`."""
from __future__ import annotations

from ..errors import ScheduleError
from ..schedule.schedule import Schedule
from ..target import as_target
from ..te.tensor import ComputeOp, Operation, Tensor
from ..te.update import UpdateOp
from .cpu import CPU_RULES, schedule_cpu
from .gpu import GPU_RULES, schedule_gpu
from .params import AutoParams
from .record import Decision, Explanation
from .rule import INLINE_PHASE, SCHEDULE_PHASE, Rule


class AutoSchedule(Schedule):
    """A Schedule that remembers why it looks the way it does."""

    explanation: Explanation = None

    def explain(self) -> Explanation:
        """The decisions taken: print it, or display it in Jupyter."""
        return self.explanation


def auto_schedule(outputs, target=None, params=None, rules=None) -> AutoSchedule:
    """A schedule for `outputs` (a tensor or a list of them) on `target` (a string or a
    `tdsl.target.Target`; None: the enclosing `with Target(...)` block's, else "llvm"),
    sized from the target's vector lanes, registers, FMA units and cores. `params` (a dict or `AutoParams`) overrides the sizes the rules would derive.
    `rules` (a list of `Rule`) replaces the target family's list (`CPU_RULES`, `GPU_RULES`)."""
    t = as_target(target)
    outs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    if not outs:
        raise ScheduleError("auto_schedule: needs at least one output tensor")
    for o in outs:
        op = o.op if isinstance(o, Tensor) else o
        if not isinstance(op, Operation):
            raise ScheduleError(f"auto_schedule: outputs must be tensors, got {o!r}")
        if not isinstance(op, (ComputeOp, UpdateOp)):
            raise ScheduleError(f"auto_schedule: output '{op.name}' is a placeholder (an input); "
                                "there is nothing to compute")
    p = AutoParams.of(params)
    s = AutoSchedule(list(outs))
    s.explanation = apply_rules(s, t, p, rules)
    return s


def apply_rules(s, target=None, params=None, rules=None) -> Explanation:
    """Applies the rules (`rules`, else the target family's list) to `s`, a schedule nothing
    was done to yet (the graph layer's fallback for groups without a hand strategy);
    returns the explanation."""
    t = as_target(target)
    p = AutoParams.of(params)
    rec = Explanation(t)
    rec.params = p.changed()
    (schedule_gpu if t.is_gpu else schedule_cpu)(s, t, rec, p, rules)
    return rec


__all__ = ["auto_schedule", "apply_rules", "AutoSchedule", "AutoParams", "Explanation", "Decision",
           "Rule", "CPU_RULES", "GPU_RULES", "INLINE_PHASE", "SCHEDULE_PHASE"]
