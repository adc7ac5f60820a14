"""Where the values of the sizes alone (size_values.py) keep their intermediates: slots
of memory that outlive a call, so that a first call at a new size writes into pages an
earlier call (reserve's, at the largest sizes) already faulted in.

numpy's own temporaries come from malloc, and a 512 x 512 int64 array (2 MB) is above
glibc's mmap threshold or at the top of its heap: freed, it goes back to the kernel, and
the next one is mapped and zeroed again (T5's relative position buckets at 1 x 512: ~2000
page faults, tens of ms of system time, after onnxruntime's or another size's run).

Each group's nodes get slots from a liveness plan made once from the graph alone (not
from the sizes), so a node lands in the same slot at every size and a slot's memory only
grows. A value that may be a view of its operand (a reshape, a transpose, a broadcast,
and whatever numpy's own meaning of an operator returns) keeps the operand's slot alive as
long as itself.
"""
from __future__ import annotations

from typing import Dict, List

import numpy as np

from .ir import Function

# operators written into a slot whose value may still be a view of an operand's memory
_VIEWS = frozenset({"reshape"})


def slot_plan(fn: Function, computed) -> Dict[object, int]:
    """{node of `fn`: slot} for the nodes in `computed` (those written into a slot), slots
    reused once every value that may read them is dead; `fn`'s output keeps its slot."""
    nodes = list(fn.nodes())
    pos = {n: i for i, n in enumerate(nodes)}
    end = {n: i for i, n in enumerate(nodes)}
    for n in reversed(nodes):
        # a node's memory is read by its consumers, and by what views it, until they die
        for a in n.args:
            if a in pos:
                reach = end[n] if n.op in _VIEWS or n not in computed else pos[n]
                end[a] = max(end[a], reach)
    for out in fn.outputs:
        if out in end:
            end[out] = len(nodes)
    slots, free, live = {}, [], []
    count = 0
    for i, n in enumerate(nodes):
        for m in [m for m in live if end[m] < i]:
            live.remove(m)
            free.append(slots[m])
        if n in computed:
            if free:
                slots[n] = free.pop()
            else:
                slots[n], count = count, count + 1
            live.append(n)
    return slots


class Workspace:
    """The slots' memory, grown to the largest value each has held."""

    def __init__(self):
        self.buffers: List[np.ndarray] = []

    def array(self, slot: int, shape, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        while len(self.buffers) <= slot:
            self.buffers.append(np.empty(0, np.uint8))
        if self.buffers[slot].nbytes < nbytes:
            self.buffers[slot] = np.empty(nbytes, np.uint8)
        return self.buffers[slot][:nbytes].view(dtype).reshape(shape)

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.buffers)


class WorkspacePool:
    """One workspace per concurrent computation (calls of different sizes from several
    threads make their states at once); list.pop and append are atomic under the GIL."""

    def __init__(self):
        self._free: List[Workspace] = []

    def take(self) -> Workspace:
        try:
            return self._free.pop()
        except IndexError:
            return Workspace()

    def give(self, ws: Workspace):
        self._free.append(ws)

    @property
    def idle(self) -> tuple:
        """The workspaces no computation holds now."""
        return tuple(self._free)
