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


@dataclass(eq=False)
class Fuse:
    outer: IterVar
    inner: IterVar
    fused: IterVar
