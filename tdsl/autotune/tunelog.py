"""The logging of a tuning run: the JSON-lines log (what a resumed run starts from, on
this cluster or another) and what the user sees (a progress bar with the best so far, a
line per failure).

A record is appended the moment it is known, so a run that stops for any reason (the
scheduler went away, Ctrl-C, the machine rebooted) leaves every finished trial in the log.
`runner_error` records are not written: they say the job was lost, nothing about the
config, which a resumed run then measures.
"""
from __future__ import annotations

import math
import sys
from typing import List, Optional

from . import record as rec_mod
from .record import Record


def fmt_s(sec: float) -> str:
    if not math.isfinite(sec):
        return "-"
    if sec >= 1:
        return f"{sec:.3f} s"
    if sec >= 1e-3:
        return f"{sec * 1e3:.3f} ms"
    return f"{sec * 1e6:.2f} us"


class _NoBar:
    def __init__(self, file=None):
        self.file = file or sys.stderr

    def update(self, n=1):
        pass

    def set_postfix_str(self, s):
        pass

    def note(self, s):
        print(s, file=self.file)

    def close(self):
        pass


def _progress_bar(progress, total, desc):
    if not progress:
        return _NoBar()
    file = progress if hasattr(progress, "write") else None
    try:
        from tqdm.auto import tqdm
    except ImportError:           # tqdm is a dependency; stay usable without it
        return _NoBar(file)

    class Bar(tqdm):
        monitor_interval = 0      # no monitor thread: measuring processes are forked

        def note(self, s):        # above the bar, where the bar is drawn
            tqdm.write(s, file=self.fp)

    return Bar(total=total, desc=desc, unit="trial", file=file, dynamic_ncols=True, leave=True)


class TuneLog:
    def __init__(self, path, task, progress, total: Optional[int]):
        self.path = path
        self.task = task
        self.bar = _progress_bar(progress, total, f"tune {task.name}")
        self._warned = set()

    def history(self, fingerprint: str) -> List[Record]:
        """The task's records measured for `fingerprint` (what a resumed run starts from)."""
        if self.path is None:
            return []
        return rec_mod.load(self.path, self.task, fingerprint)

    def add(self, r: Record, best: Optional[Record]):
        if self.path is not None and r.status != "runner_error":
            rec_mod.append(self.path, [r])
        if not r.ok:
            self.note(f"trial {r.trial} {r.status}: {r.error}  config={r.config}")
        self.bar.update(1)
        if best is None:
            self.bar.set_postfix_str("best: -")
        elif best.gflops:
            self.bar.set_postfix_str(f"best {best.gflops:.1f} GFLOP/s")
        else:
            self.bar.set_postfix_str(f"best {fmt_s(best.seconds)}")

    def note(self, text: str, once: Optional[str] = None):
        if once is not None:
            if once in self._warned:
                return
            self._warned.add(once)
        self.bar.note(f"[autotune] {text}")

    def close(self):
        self.bar.close()
