"""Relations between iteration variables recorded by split and fuse."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..te.tensor import IterVar


@dataclass(eq=False)
class Split:
    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: Optional[int]
    nparts: Optional[int]
    # Halide's ShiftInwards: the last tile of a run-time extent ends at the extent,
    # overlapping the one before, instead of being guarded
    shift: bool = False


@dataclass(eq=False)
class Fuse:
    outer: IterVar
    inner: IterVar
    fused: IterVar


def root_axes(stage, iv) -> list:
    """The root IterVars of `stage` that leaf `iv` derives from (through its splits and
    fuses)."""
    parents = {}
    for rel in stage.relations:
        if isinstance(rel, Split):
            parents[rel.outer] = [rel.parent]
            parents[rel.inner] = [rel.parent]
        elif isinstance(rel, Fuse):
            parents[rel.fused] = [rel.outer, rel.inner]
    todo, roots = [iv], []
    while todo:
        x = todo.pop()
        if x in parents:
            todo += parents[x]
        elif x not in roots:
            roots.append(x)
    return roots
