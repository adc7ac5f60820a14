"""`LaunchSequence`: kernel launches bound once to fixed device arguments (grid and block
sizes evaluated, argument pointers packed), run again and again with no allocation and no
copy: what `DeviceModule.prepared` returns and what a graph executor joins into one run.

On CUDA a sequence on a stream of its own can be captured once as a CUDA graph
(`capture()`): a run is then one `cuGraphLaunch` instead of one `cuLaunchKernel` per
kernel, which is most of a small network's host time at batch 1."""
from __future__ import annotations

from typing import Callable, List, Sequence


class LaunchSequence:
    def __init__(self, api, stream, runs: List[Callable], keep=(), checks=()):
        self.api = api
        self.stream = stream
        self.runs = list(runs)
        self._keep = list(keep)        # buffers the launches point into
        self._checks = list(checks)    # read back the records of checked accesses
        self._replay = None

    @classmethod
    def join(cls, api, stream, parts: Sequence["LaunchSequence"]) -> "LaunchSequence":
        for p in parts:
            if p.stream is not stream:
                raise ValueError("LaunchSequence.join: every part must launch on the same stream")
        return cls(api, stream, [r for p in parts for r in p.runs], [p._keep for p in parts],
                   [c for p in parts for c in p._checks])

    def __len__(self):
        return len(self.runs)

    def launch_each(self):
        """Every launch, one driver call each (what a captured graph replays); returns what
        the launches return (OpenCL events, for `api.time`)."""
        return [r() for r in self.runs]

    def __call__(self):
        """Queues the whole sequence on its stream; does not wait."""
        if self._replay is not None:
            self._replay()
            return []
        return [r() for r in self.runs]

    def capture(self) -> bool:
        """Records the sequence as a CUDA graph replayed by later calls; False (and nothing
        changes) where the runtime cannot (OpenCL, the emulator, pycuda, no stream)."""
        if self._replay is None and self.runs:
            self._replay = self.api.capture(self.launch_each, self.stream)
        return self._replay is not None

    @property
    def captured(self) -> bool:
        return self._replay is not None

    def sync(self):
        self.api.sync(self.stream)

    def check(self):
        """After a run: waits for it and raises tdsl.BoundsError when a kernel met an index
        outside its buffer (an index read from the data: a gather's), which it skipped. A
        few bytes copied back per checked kernel; nothing without one."""
        if self._checks:
            self.sync()
        for c in self._checks:
            c()

    def time(self, number, each=False):
        """Device seconds per run (device events); `each=True` times the launches one by
        one even when captured (what the graph saves is the difference)."""
        return self.api.time(self.launch_each if each else self, number, self.stream)
