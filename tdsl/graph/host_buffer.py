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
