"""The llvm (and C) schedule of a group: the schedule of the registry's first
implementation that takes it (registry.py: the hand schedule of the group's anchor, a
schedule found by its stages' tags, or the fallback: the auto-scheduler's rules or a plain
parallel and vectorized loop nest). Every hand schedule vectorizes: a target without
vectors (C) takes the fallback's scalar loops."""
from __future__ import annotations

from .. import fallback, registry


def schedule_llvm(s, out, g, vectorize=True, parallel=True):
    if vectorize:
        registry.schedule(s, out, g, "cpu", parallel=parallel)
    else:
        fallback.schedule_cpu(s, out, g, parallel=parallel, vectorize=False)
