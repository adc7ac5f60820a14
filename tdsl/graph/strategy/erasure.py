"""The types of a kernel generic in a group's channel count (cpu/generic.py finds when one
applies): which parameter axes are the size variable C, and the node types with it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import tdsl


SIZE_NAME = "C"
OUTPUT_HAS_C = ("elementwise", "global_pool")      # the kinds whose output has C channels


@dataclass(frozen=True)
class Erasure:
    size: int                               # C in the group at hand
    params: Tuple[Tuple[int, int], ...]     # (parameter index, axis) of size C
    kind: str                               # "elementwise", "global_pool" or the conv definition

    def shape(self, i, shape, var):
        """Parameter i's shape with its C axis (if any) the size variable `var`."""
        axes = {a for p, a in self.params if p == i}
        return tuple(var if k in axes else s for k, s in enumerate(shape))


class SymType:
    """A graph type whose shape holds a size variable (what topi's definitions read)."""
    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), dtype

    @property
    def ndim(self):
        return len(self.shape)


def size_var():
    return tdsl.size_var(SIZE_NAME)

def c_axis(t, ndim=4):
    """The axis of type `t` aligned (numpy broadcasting) with axis 1 of a rank-4 image."""
    a = 1 - (ndim - len(t.shape))
    return a if a >= 0 else None


def node_type(e: Optional[Erasure], n, var):
    """The type topi builds node `n` with: in an elementwise group generic in C, its C axis
    is the size variable `var`."""
    a = c_axis(n.type)
    if e is None or e.kind != "elementwise" or a is None or n.type.shape[a] != e.size:
        return n.type
    shape = list(n.type.shape)
    shape[a] = var
    return SymType(shape, n.type.dtype)
