"""The auto-scheduler's knobs: every size it would otherwise derive from the target can be
given instead, so a search (tdsl.autotune) can tune the rules' own parameters without a
hand-written template. `None` means "derive it from the target"."""
from __future__ import annotations

from dataclasses import dataclass, asdict
from typing import Optional, Tuple

from ..errors import ScheduleError


@dataclass
class AutoParams:
    tile: Optional[Tuple[Optional[int], Optional[int]]] = None  # register tile (rows, vectors)
    #                                          of contractions; a None entry is derived
    unroll: int = 4                          # vectors per unrolled step of elementwise loops
    chunks: Optional[int] = None             # parallel tasks wanted (default: 4 per core)
    pack: Optional[bool] = None              # copy the reused operand's panel (None: decide)
    parallel: bool = True
    vectorize: bool = True
    threads: int = 128                       # GPU targets: threads per block (elementwise)
    # GPU contractions; None: sized from the target (SMs, shared memory)
    block: Optional[Tuple[int, int]] = None        # threads per block (y, x)
    thread_tile: Optional[Tuple[int, int]] = None  # outputs per thread (rows, columns)
    k_tile: Optional[int] = None             # reduction steps per shared-memory refill
    double_buffer: Optional[bool] = None     # refill one shared buffer while using the other
    # GPU reductions: threads that reduce one row together (None: from the row's length)
    reduce_threads: Optional[int] = None
    # {size variable's name: its least value where the kernel runs} (the graph layer's size
    # classes route smaller sizes elsewhere): a register tile of a run-time extent that
    # is surely a tile's worth shifts its last tile inwards instead of a guarded copy
    least: Optional[dict] = None

    @classmethod
    def of(cls, params) -> "AutoParams":
        if params is None:
            return cls()
        if isinstance(params, cls):
            return params
        if not isinstance(params, dict):
            raise ScheduleError(f"auto_schedule: params must be a dict or AutoParams, got {params!r}")
        known = set(cls.__dataclass_fields__)
        bad = sorted(set(params) - known)
        if bad:
            raise ScheduleError(f"auto_schedule: unknown parameter(s) {', '.join(bad)}; "
                                f"known: {', '.join(sorted(known))}")
        p = cls(**params)
        if p.tile is not None:
            if (not isinstance(p.tile, (tuple, list)) or len(p.tile) != 2
                    or not all(x is None or (isinstance(x, int) and x >= 1) for x in p.tile)):
                raise ScheduleError(f"auto_schedule: params 'tile' must be (rows, vectors) of "
                                    f"positive ints, got {p.tile!r}")
            p.tile = tuple(p.tile)
        for name in ("block", "thread_tile"):
            v = getattr(p, name)
            if v is None:
                continue
            if (not isinstance(v, (tuple, list)) or len(v) != 2
                    or not all(isinstance(x, int) and x >= 1 for x in v)):
                raise ScheduleError(f"auto_schedule: params '{name}' must be (rows, columns) of "
                                    f"positive ints, got {v!r}")
            setattr(p, name, tuple(v))
        for name in ("unroll", "threads"):
            v = getattr(p, name)
            if not isinstance(v, int) or v < 1:
                raise ScheduleError(f"auto_schedule: params '{name}' must be a positive int, got {v!r}")
        for name in ("chunks", "k_tile", "reduce_threads"):
            v = getattr(p, name)
            if v is not None and (not isinstance(v, int) or v < 1):
                raise ScheduleError(f"auto_schedule: params '{name}' must be a positive int, got {v!r}")
        return p

    def changed(self) -> dict:
        """The parameters that differ from the defaults (what explain() prints)."""
        d, base = asdict(self), asdict(AutoParams())
        return {k: v for k, v in d.items() if v != base[k]}
