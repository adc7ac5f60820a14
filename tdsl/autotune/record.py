"""Tuning records and the JSON-lines log.

One line per measured trial::

    {"v": 1, "task": "matmul", "args": [1024, 1024, 1024], "target": "llvm",
     "config": {"tile_i": [-1, 8], "unroll_k": 4}, "index": 1234, "status": "ok",
     "seconds": 0.0061, "costs": [0.0061, 0.0062, 0.0061], "gflops": 352.1, "error": "",
     "build_s": 0.31, "total_s": 0.52, "trial": 17, "tuner": "model", "timestamp": 1.7e9}

`status` is "ok" or one of the failure classes in `measure.STATUSES`. A log is appended to
as trials finish, so an interrupted run loses nothing; re-running `tune` with the same log
skips configs already in it. `apply_best(log)` picks the fastest "ok" record of each task.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Tuple

from .task import _DISPATCH, args_key

LOG_VERSION = 1


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


def load(path, task=None) -> List[Record]:
    """Records of a log (of `task` only, when given). Lines that do not parse (a run killed
    mid-write) are skipped."""
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
            if task is None or r.key == task.key:
                out.append(r)
    return out


def best(records: Iterable[Record]) -> Optional[Record]:
    ok = [r for r in records if r.ok]
    return min(ok, key=lambda r: r.seconds) if ok else None


def best_by_task(records: Iterable[Record]) -> Dict[Tuple[str, str, str], Record]:
    out: Dict[Tuple[str, str, str], Record] = {}
    for r in records:
        if r.ok and (r.key not in out or r.seconds < out[r.key].seconds):
            out[r.key] = r
    return out


class apply_best:
    """Context manager: inside it, a template called without a config uses the fastest
    logged config for its (name, args) (and `target`, when given).

        with autotune.apply_best("mm.jsonl"):
            s, args = matmul_template(1024, 1024, 1024)
    """

    def __init__(self, log_file, target: Optional[str] = None):
        recs = load(log_file) if isinstance(log_file, (str, os.PathLike)) else list(log_file)
        if target is not None:
            recs = [r for r in recs if r.target == target]
        self.best: Dict[Tuple[str, str], Record] = {}
        for r in recs:
            k = (r.task, args_key(r.args))
            if r.ok and (k not in self.best or r.seconds < self.best[k].seconds):
                self.best[k] = r

    def query(self, name, key):
        r = self.best.get((name, key))
        return dict(r.config) if r is not None else None

    def __enter__(self):
        _DISPATCH.append(self)
        return self

    def __exit__(self, *exc):
        _DISPATCH.remove(self)
