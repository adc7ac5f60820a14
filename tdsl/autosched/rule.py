"""What a rule of the auto-scheduler is, and the loop that applies a list of them (TVM's
sketch rules: `MeetCondition` and `Apply`).

The rules run in two phases, each a sweep over the stages in which every stage is offered
to the rules of that phase in list order:
- "inline" (INLINE_PHASE), consumers first, over the elementwise stages that are not
  outputs: inline the stage into its readers, or say why it is kept;
- "schedule" (SCHEDULE_PHASE), over the stages that are left (not inlined, not computed
  inside another stage's loops), in the order the target family's context gives:
  schedule the stage's loops (tile, vectorize, bind, go parallel).
Between the two the context plans which stages are computed with which (`Context.plan`).
The first rule that applies to a stage takes it: the later rules of the phase are not
tried, unless its `apply` returns False (it only explained why it could not, as the
tensorize rules do when the target lacks the instruction)."""
from __future__ import annotations

from ..errors import ScheduleError

INLINE_PHASE = "inline"
SCHEDULE_PHASE = "schedule"
PHASES = (INLINE_PHASE, SCHEDULE_PHASE)


class Rule:
    """One rule: a name (which `explain()` prints for the decisions it records), the phase
    it runs in, when it applies to a stage and what it does to it. A rule is a subclass
    and one instance of it in the lists; it keeps no state of its own between stages
    (what the rules share lives in the context)."""

    name = "rule"
    phase = SCHEDULE_PHASE

    def applies(self, ctx, stage) -> bool:
        """Whether the rule schedules `stage` (no primitive is applied here)."""
        return True

    def apply(self, ctx, stage):
        """Applies the rule's primitives to `stage` and records them (`note`); returning
        False hands the stage on to the next rules of the phase."""
        raise NotImplementedError(f"rule '{self.name}' does not say what it applies")

    def note(self, ctx, stage, action, why):
        """A line of `explain()` under this rule's name."""
        ctx.rec.add(stage, self.name, action, why)

    def __repr__(self):
        return f"<rule {self.name} ({self.phase})>"


def run_rules(rules, ctx):
    """Applies `rules` (an ordered list of `Rule`) to the schedule of `ctx`."""
    for r in rules:
        if getattr(r, "phase", None) not in PHASES or not callable(getattr(r, "apply", None)):
            raise ScheduleError(f"auto_schedule: {r!r} is not a rule (a tdsl.autosched.Rule "
                                f"with a phase among {', '.join(PHASES)})")
    for phase in PHASES:
        of_phase = [r for r in rules if r.phase == phase]
        for st in ctx.visit(phase):
            for rule in of_phase:
                if rule.applies(ctx, st) and rule.apply(ctx, st) is not False:
                    break


__all__ = ["Rule", "run_rules", "INLINE_PHASE", "SCHEDULE_PHASE", "PHASES"]
