"""Static memory planning: every intermediate of @main gets an offset in one arena; values
whose lifetimes (first definition to last use, in execution order) do not overlap share
bytes. Greedy first fit over the values in order of definition, offsets aligned to 64."""
from __future__ import annotations

from typing import Dict, List

from .ir import Call, Module

ALIGN = 64


class MemoryPlan:
    def __init__(self, offsets: Dict[int, int], sizes: Dict[int, int], peak: int, total: int, order):
        self.offsets = offsets
        self.sizes = sizes
        self.peak_bytes = peak
        self.total_bytes = total      # without reuse
        self.order = order

    def __repr__(self):
        return (f"MemoryPlan({len(self.offsets)} buffers, peak {self.peak_bytes / 2**20:.2f} MiB, "
                f"{self.total_bytes / 2**20:.2f} MiB without reuse)")


def _align(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


def plan_memory(mod: Module) -> MemoryPlan:
    fn = mod.main
    order: List[Call] = fn.nodes()
    pos = {id(n): i for i, n in enumerate(order)}
    outputs = {id(o) for o in fn.outputs}
    last_use: Dict[int, int] = {}
    for i, n in enumerate(order):
        for a in n.args:
            if id(a) in pos:
                last_use[id(a)] = i
    live = []     # (offset, end, free_at)
    offsets, sizes = {}, {}
    peak = total = 0
    for i, n in enumerate(order):
        if id(n) in outputs:
            continue      # outputs get their own buffers
        live = [b for b in live if b[2] >= i]
        size = _align(max(n.type.nbytes, 1))
        total += size
        off = 0
        for b in sorted(live):
            if off + size <= b[0]:
                break
            off = max(off, b[1])
        end_use = last_use.get(id(n), i)
        live.append((off, off + size, end_use))
        offsets[id(n)] = off
        sizes[id(n)] = size
        peak = max(peak, off + size)
    return MemoryPlan(offsets, sizes, peak, total, order)
