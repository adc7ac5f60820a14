"""Tuning records and the JSON-lines log.

One line per measured trial::

    {"v": 2, "task": "matmul", "args": [1024, 1024, 1024], "target": "llvm",
     "config": {"tile_i": [-1, 8], "unroll_k": 4}, "index": 1234, "status": "ok",
     "seconds": 0.0061, "costs": [0.0061, 0.0062, 0.0061], "gflops": 352.1, "error": "",
     "build_s": 0.31, "total_s": 0.52, "trial": 17, "tuner": "model", "timestamp": 1.7e9,
     "fingerprint": "llvm:x86_64-unknown-linux-gnu:znver4:5f1c0e2a9b3d", "host": "node7"}

`status` is "ok" or one of the failure classes in `measure.STATUSES`. A log is appended to
as trials finish, so an interrupted run loses nothing; re-running `tune` with the same log
skips configs already in it.

A record carries the target as the machine that measured it resolved it (`fingerprint`,
from `target_fingerprint`) and that machine's name (`host`). Timings say nothing about
another CPU, so `apply_best(log)` uses a record only where its target string resolves to
the same fingerprint here, and `tune` resumes only from records of the fingerprint its
workers report. Records without one (logs of version 1) are never applied.
"""
from __future__ import annotations

import json
import os
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Tuple

from ..errors import TdslError
from .keys import args_key, target_fingerprint
from .task import DispatchContext

LOG_VERSION = 2


@dataclass
class Record:
    """One measured config. `seconds` is the fastest of the repeats (inf when not ok)."""
    task: str
    args: List[Any]
    target: str
    config: Dict[str, Any]
    status: str
    seconds: float = float("inf")
    costs: List[float] = field(default_factory=list)
    gflops: float = 0.0
    error: str = ""
    index: Optional[int] = None
    build_s: float = 0.0
    total_s: float = 0.0
    trial: int = 0
    tuner: str = ""
    timestamp: float = 0.0
    fingerprint: str = ""
    host: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def key(self) -> Tuple[str, str, str]:
        return (self.task, args_key(self.args), self.target)

    @property
    def config_key(self) -> str:
        return json.dumps(self.config, sort_keys=True, separators=(",", ":"))

    def to_json(self) -> str:
        d = asdict(self)
        d = {"v": LOG_VERSION, **d}
        if d["seconds"] == float("inf"):
            d["seconds"] = None
        return json.dumps(d, separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> "Record":
        d = json.loads(line)
        d.pop("v", None)
        if d.get("seconds") is None:
            d["seconds"] = float("inf")
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in known})

    def __repr__(self):
        if self.ok:
            return (f"Record({self.task}, {self.seconds * 1e3:.4g} ms, {self.gflops:.1f} GFLOP/s, "
                    f"config={self.config})")
        return f"Record({self.task}, {self.status}: {self.error[:80]!r}, config={self.config})"


def append(path, records: Iterable[Record]):
    with open(path, "a") as f:
        for r in records:
            f.write(r.to_json() + "\n")
        f.flush()


def load(path, task=None, fingerprint: Optional[str] = None) -> List[Record]:
    """Records of a log (of `task` only, and measured for `fingerprint` only, when given).
    Lines that do not parse (a run killed mid-write) are skipped."""
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                r = Record.from_json(line)
            except (ValueError, TypeError):
                continue
            if (task is None or r.key == task.key) and \
                    (fingerprint is None or r.fingerprint == fingerprint):
                out.append(r)
    return out


def best(records: Iterable[Record]) -> Optional[Record]:
    ok = [r for r in records if r.ok]
    return min(ok, key=lambda r: r.seconds) if ok else None


def _fingerprint_here(target: str) -> Optional[str]:
    """None for a target this machine cannot describe (a CPU its LLVM does not know)."""
    try:
        return target_fingerprint(target)
    except TdslError:
        return None


def for_this_machine(records: Iterable[Record], target: Optional[str] = None) -> List[Record]:
    """The records that hold here: those whose target string resolves to the fingerprint
    they were measured with (and, with `target`, to `target`'s fingerprint)."""
    want = target_fingerprint(target) if target is not None else None
    out, unknown = [], 0
    for r in records:
        if not r.fingerprint:
            unknown += 1
        elif r.fingerprint == (want or _fingerprint_here(r.target)):
            out.append(r)
    if unknown:
        warnings.warn(f"autotune: {unknown} record(s) carry no target description (a log "
                      "written before version 2); they are not used", stacklevel=3)
    return out


class apply_best(DispatchContext):
    """Context manager: inside it, a template called without a config uses the fastest
    logged config for its (name, args), among the records measured for this machine's
    target (`target`: the target you will build for; default: each record's own target
    string, resolved here, so "llvm" means this host's CPU).

        with autotune.apply_best("mm.jsonl"):
            s, args = matmul_template(1024, 1024, 1024)
    """

    def __init__(self, log_file, target: Optional[str] = None):
        recs = load(log_file) if isinstance(log_file, (str, os.PathLike)) else list(log_file)
        recs = for_this_machine(recs, target)
        self.best: Dict[Tuple[str, str], Record] = {}
        for r in recs:
            k = (r.task, args_key(r.args))
            if r.ok and (k not in self.best or r.seconds < self.best[k].seconds):
                self.best[k] = r

    def query(self, name, key):
        r = self.best.get((name, key))
        return dict(r.config) if r is not None else None
