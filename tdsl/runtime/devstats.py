"""Counts of what a device runtime did (allocations, transfers), kept per device so that a
caller can check a promise such as "a graph run on the GPU allocates nothing and copies only
its inputs in and its outputs out" (`tdsl.opencl(0).counts()`)."""
from __future__ import annotations

FIELDS = ("allocs", "alloc_bytes", "to_device", "to_host", "on_device")


class Counts:
    __slots__ = FIELDS

    def __init__(self):
        for f in FIELDS:
            setattr(self, f, 0)

    def alloc(self, nbytes):
        self.allocs += 1
        self.alloc_bytes += int(nbytes)

    def snapshot(self) -> dict:
        return {f: getattr(self, f) for f in FIELDS}
