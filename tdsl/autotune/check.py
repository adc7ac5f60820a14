"""Checking what comes back from a measuring process before the search believes it.

The numbers are checked where the arrays are (the measuring process compares the outputs
with the reference, `measure.run_job`); here a result dict from any executor becomes a
`Record`: an unknown status or an "ok" without a usable time is the runner's failure, not
a fast config, and a record measured for another target than the run's (a worker on a
different CPU) is marked as such so it never competes with this run's records.
"""
from __future__ import annotations

import math
import time
from typing import Any, Dict, Optional

from .keys import jsonable
from .measure import STATUSES
from .record import Record
from .task import Task


def to_record(task: Task, config: Dict[str, Any], index: Optional[int], res: dict, *,
              trial: int, tuner: str) -> Record:
    status = res.get("status")
    error = str(res.get("error", ""))
    secs = math.inf
    if status not in STATUSES:
        status, error = "runner_error", f"the measuring process answered {res!r:.200}"
    elif status == "ok":
        try:
            secs = float(res.get("seconds"))
        except (TypeError, ValueError):
            secs = math.nan
        if not (math.isfinite(secs) and secs > 0):
            status, error, secs = "runner_error", f"an ok result without a time ({secs})", math.inf
    return Record(task=task.name, args=jsonable(list(task.args)), target=task.target,
                  config=dict(config), status=status, seconds=secs,
                  costs=[float(c) for c in res.get("costs", [])] if status == "ok" else [],
                  gflops=task.flop / secs / 1e9 if status == "ok" and task.flop else 0.0,
                  error=error, index=index, build_s=float(res.get("build_s", 0.0)),
                  total_s=float(res.get("total_s", 0.0)), trial=trial, tuner=tuner,
                  timestamp=time.time(), fingerprint=str(res.get("fingerprint", "")),
                  host=str(res.get("host", "")))


def is_foreign(record: Record, fingerprint: str) -> bool:
    """Measured, but for another target than the run's (a runner_error measured nothing)."""
    return bool(record.fingerprint) and record.fingerprint != fingerprint
