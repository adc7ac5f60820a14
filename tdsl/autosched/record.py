"""The auto-scheduler's account of itself: one `Decision` per rule applied (stage, rule,
what it did, why), printable and shown as a table in Jupyter. The primitives the rules
called are in the schedule's own trace (`print(sched)`), so the two read side by side."""
from __future__ import annotations

import html
from dataclasses import dataclass
from typing import List


@dataclass
class Decision:
    stage: str
    rule: str
    action: str
    why: str

    def __str__(self):
        return f"{self.stage}: {self.rule}: {self.action} -- {self.why}"


class Explanation:
    def __init__(self, target):
        self.target = target
        self.decisions: List[Decision] = []
        self.params = {}

    def add(self, stage, rule, action, why):
        name = stage if isinstance(stage, str) else stage.op.name
        self.decisions.append(Decision(name, rule, action, why))

    def rules(self, stage=None) -> List[str]:
        """Names of the rules applied (to `stage` only, if given), in order."""
        return [d.rule for d in self.decisions if stage is None or d.stage == stage]

    def __str__(self):
        head = f"auto_schedule for {self.target}"
        if self.params:
            head += " (" + ", ".join(f"{k}={v}" for k, v in sorted(self.params.items())) + ")"
        return "\n".join([head] + [f"  {n + 1:2d}. {d}" for n, d in enumerate(self.decisions)])

    __repr__ = __str__

    def _repr_html_(self):
        rows = "".join(f"<tr><td>{n + 1}</td><td><b>{html.escape(d.stage)}</b></td>"
                       f"<td>{html.escape(d.rule)}</td><td><code>{html.escape(d.action)}</code></td>"
                       f"<td style='text-align:left'>{html.escape(d.why)}</td></tr>"
                       for n, d in enumerate(self.decisions))
        return (f"<b>auto_schedule for {html.escape(str(self.target))}</b><table><tr><th>#</th>"
                f"<th>stage</th><th>rule</th><th>action</th><th>why</th></tr>{rows}</table>")
