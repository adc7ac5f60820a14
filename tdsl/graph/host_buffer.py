"""Host memory that grows in place (`GrowingBuffer`): the arenas of an executor with
symbolic sizes (sizes.Slot), which grow when a call needs more than any before it.

A fresh allocation's pages are faulted in (and zeroed by the kernel) on their first
touch, which at a new largest size can cost more than the run itself (and in a virtual
machine many times more for memory the host has not handed out before). An
anonymous mapping extended with mremap keeps the pages it had, so growing touches only
the bytes added; it is advised for huge pages (one fault per 2 MiB, as numpy asks for its
own large arrays). Views of the buffer must be dropped before it grows: one that is
still held (a caller's output) keeps the old mapping alive, and the buffer moves to a
new one instead. `in_use` asks the mapping itself whether such a view is still alive
(only `array` exports it; every view holds `array`), so that memory a caller has
dropped can be written again without a fresh page.

`OutputBuffers` is the memory of run states' outputs, which they lend the caller
(runstate.py): a caller who still holds an output when the states run again keeps that
memory, and the states move to another buffer, one left before whose arrays the caller
has dropped since (its pages touched already), else a new one. A server's loop, which
holds its last output while the next call runs, so alternates between two buffers
instead of faulting a fresh array in at every call. The static executor's states
(runstate.make_state) and the slots of one with symbolic sizes (sizes.Slot) both keep
their outputs here.
"""
from __future__ import annotations

import mmap

import numpy as np

# the size of a huge page: a mapping a whole number of them long is placed on their
# boundary, so that every page of it can be a huge one
HUGE_PAGE = 2 << 20


class GrowingBuffer:
    """A uint8 host buffer (`array`, None until the first `grow`)."""

    def __init__(self):
        self._map = None
        self.array = None
        self.nbytes = 0
        self.address = 0        # of the mapping, which moves only when it grows

    def grow(self, nbytes: int) -> np.ndarray:
        """The buffer at `nbytes` or more, its contents kept; the caller has dropped every
        view of the old `array` (a view still held makes this a new mapping)."""
        if nbytes <= self.nbytes:
            return self.array
        if nbytes >= HUGE_PAGE // 8:
            nbytes = -(-nbytes // HUGE_PAGE) * HUGE_PAGE
        self.array = None
        if self._map is not None:
            try:
                self._map.resize(nbytes)
            except (BufferError, OSError, ValueError, SystemError):
                # views still hold the old mapping (they keep it alive) or mremap is missing
                self._map = None
        if self._map is None:
            self._map = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            advise = getattr(mmap, "MADV_HUGEPAGE", None)
            if advise is not None:
                try:
                    self._map.madvise(advise)
                except OSError:      # a kernel without transparent huge pages
                    pass
        self.array = np.frombuffer(self._map, np.uint8)
        self.nbytes = nbytes
        self.address = self.array.ctypes.data
        return self.array

    def in_use(self) -> bool:
        """Whether an array viewing this buffer (a caller's output) is still alive, other
        than `array` itself: the mapping then has an export that a resize refuses."""
        if self._map is None:
            return False
        self.array = None       # its export goes with it, unless a view holds it
        try:
            self._map.resize(self.nbytes)
            return False
        except (BufferError, OSError, ValueError, SystemError):
            return True         # a view is alive (or without mremap: cannot tell)
        finally:
            self.array = np.frombuffer(self._map, np.uint8)

    def holds(self, a) -> bool:
        """Whether numpy array `a` lies in this buffer's memory."""
        return self.array is not None and isinstance(a, np.ndarray) and np.may_share_memory(a, self.array)


# the most buffers kept that callers still hold (each is reused once they drop it): a
# loop holding its last outputs needs one
MAX_LEFT = 4


class OutputBuffers:
    """The buffer run states write their outputs to (`current`), and those left while a
    caller held arrays in them, the oldest first."""

    def __init__(self, nbytes: int = 0):
        self.current = GrowingBuffer()
        self._left: list = []
        if nbytes:
            self.current.grow(nbytes)

    @property
    def array(self):
        return self.current.array

    @property
    def nbytes(self) -> int:
        return self.current.nbytes

    def grow(self, nbytes: int):
        """The current buffer at `nbytes` or more (the states viewing it dropped first)."""
        return self.current.grow(nbytes)

    def reserve_spare(self, touch=False):
        """A buffer as large as the current one, besides it (a left one no array views,
        else a new one), for the call that runs while the caller holds the last outputs;
        faulted in with `touch`."""
        spare = next((b for b in self._left if not b.in_use()), None)
        if spare is None:
            spare = GrowingBuffer()
            self._left.append(spare)
        if spare.nbytes < self.current.nbytes:
            spare.grow(self.current.nbytes)
            if touch:
                spare.array.fill(0)

    def leave(self, held):
        """Where an array of `held` (the outputs a caller still holds) lies in the current
        buffer: that buffer is left to the caller and another becomes current (the first
        left one no array views any more, else a new one); returns (old array, new
        array, new array's address), for the states to move their outputs to the same
        offsets (RunState.relocate), else None.
        Left buffers found free beyond the one taken are released, and at most
        `MAX_LEFT` are kept (an older one is then the caller's alone): memory follows
        what the caller holds, not the number of calls."""
        old = self.current
        if not any(old.holds(a) for a in held):
            return None
        free = [b for b in self._left if not b.in_use()]
        new = free[0] if free else GrowingBuffer()
        self._left = [b for b in self._left if b not in free][-(MAX_LEFT - 1):] + [old]
        new.grow(old.nbytes)
        self.current = new
        return old.array, new.array, new.address
