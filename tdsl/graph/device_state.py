"""Run states on a GPU (cuda, opencl): the same plan binding as on the host
(runstate.make_state) with buffers made by `DeviceMemory`: one device arena per state, its
intermediates sub-buffers of it, device input and output buffers, and every kernel bound
once to them (DeviceModule.prepared) and joined into one LaunchSequence on the state's own
stream. A run then copies its inputs in, queues the sequence, and copies its outputs out:
nothing is allocated per run. On CUDA the sequence is captured as a CUDA graph.

All device work here goes through the runtime (tdsl.runtime: ndarray, launches); this
module only decides which buffer is which."""
from __future__ import annotations

import os

import numpy as np

from ..runtime import ndarray as nd
from ..runtime.launches import LaunchSequence
from .runstate import RunState, make_state


class DeviceMemory:
    """make_state's buffers on `device`; kernels bound on `stream`."""

    def __init__(self, plan, device, stream, arena=None):
        self.device, self.stream = device, stream
        self.arena = nd.empty(max(plan.peak_bytes, 1), "uint8", device) if arena is None else arena

    def new(self, t):
        return nd.empty(t.shape, t.dtype, self.device)

    def new_input(self, t):
        return nd.array(np.zeros(t.shape, t.dtype), self.device)

    def arena_view(self, offset, t):
        return self.arena.view(offset, t.shape, t.dtype)

    def view(self, buf, offset, t):
        return buf.view(offset, t.shape, t.dtype)

    def const(self, data):      # a constant output: uploaded once per state
        return nd.array(np.ascontiguousarray(data), self.device)

    def bind(self, module, args):
        return module.prepared(*args, stream=self.stream)


def cuda_graphs_enabled() -> bool:
    """TDSL_CUDA_GRAPHS=0 launches kernel by kernel (to compare, or to debug a kernel)."""
    return os.environ.get("TDSL_CUDA_GRAPHS", "1") != "0"


def make_device_state(plan, fn, steps, device, sizes=None, arena=None) -> RunState:
    api = device.api()
    stream = api.stream()
    state = make_state(plan, fn, steps, DeviceMemory(plan, device, stream, arena), sizes)
    state.launches = LaunchSequence.join(api, stream, state.calls)
    # one graph launch instead of one launch per kernel: host time is what batch-1 pays
    if device.kind == "cuda" and len(state.launches) > 1 and cuda_graphs_enabled():
        state.launches.capture()
    return state


def upload_constants(steps, device):
    """Steps with every constant array replaced by a device copy, each distinct array
    uploaded once (kernels that share packed weights share the copy)."""
    copies = {}

    def up(a):
        if not isinstance(a, np.ndarray):
            return a
        if id(a) not in copies:
            copies[id(a)] = (a, nd.array(a, device))
        return copies[id(a)][1]
    return [(k, [up(a) for a in args], n) for k, args, n in steps]
