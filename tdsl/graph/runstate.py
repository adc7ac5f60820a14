"""The buffers one run of an Executor writes: its arena, input buffers, non-constant output
buffers and the prepared kernel calls bound to them (`RunState`), made from the memory
plan by `make_state` (on the host, or on a GPU through device_state.DeviceMemory), and the
pool that gives each concurrent run its own (`StatePool`).

Kernels bind fixed arrays (Module.prepared), so two runs on one state would overwrite each
other's inputs and intermediates; constants (packed weights) are read-only and shared by
every state.

A host run hands its output arrays to the caller rather than copies (a language model's
logits are 26 MB: the copy and its fresh pages were 2 ms a run). The state lends them:
when it is next taken, an output the caller still holds (any reference beyond the state's
own) is replaced by a new array and the calls that write it (or a view into it) are bound
again; one the caller dropped is written again in place. An output named twice, or that
is an input or a constant, is copied as before.
"""
from __future__ import annotations

import sys
import threading
from typing import Dict, List

import numpy as np

from .ir import Const, Expr


class RunState:
    __slots__ = ("arena", "inputs", "outputs", "calls", "launches", "mem", "lendable", "lent")

    def __init__(self, arena, inputs, outputs, calls, launches=None, mem=None, lendable=None):
        self.arena = arena
        self.inputs: Dict[str, np.ndarray] = inputs
        self.outputs: List[np.ndarray] = outputs
        self.calls: list = calls
        self.launches = launches      # GPU: every call joined into one LaunchSequence
        self.mem = mem
        # output index -> [(call index, module, argument arrays)] of the calls that bind it
        self.lendable: Dict[int, list] = lendable or {}
        self.lent: Dict[int, int] = {}    # output index -> its reference count when lent

    def hand_out(self) -> List[np.ndarray]:
        """The outputs for the caller: the lendable ones themselves, the others copied."""
        for i in self.lendable:
            self.lent[i] = self._holders(i)
        return [o if i in self.lendable else o.copy() for i, o in enumerate(self.outputs)]

    def _holders(self, i) -> int:
        # counted the same way when lent and when reclaimed (no local name holds it)
        return sys.getrefcount(self.outputs[i])

    def reclaim(self):
        """Before the state's kernels run again: a new array for every lent output the
        caller still holds, with the calls that write it bound to that one."""
        for i, refs in self.lent.items():
            if self._holders(i) <= refs:
                continue
            old = self.outputs[i]
            new = np.empty_like(old)
            self.outputs[i] = new
            rebound = []
            for ci, module, args in self.lendable[i]:
                args = [self._same_view(a, old, new) for a in args]
                self.calls[ci] = self.mem.bind(module, args)
                rebound.append((ci, module, args))
            self.lendable[i] = rebound
        self.lent = {}

    def _same_view(self, a, old, new):
        """`a` if it is not in array `old`'s memory, else the same view of array `new` (an
        intermediate computed straight into the output, a part of a concatenated output)."""
        if not (isinstance(a, np.ndarray) and np.may_share_memory(a, old)):
            return a
        return new if a is old else self.mem.view(new, a.ctypes.data - old.ctypes.data, a)


class HostMemory:
    """Where make_state puts buffers on the host: numpy arrays, the arena 64-byte aligned.
    A device executor passes its own (device_state.DeviceMemory) with the same methods."""

    def __init__(self, plan):
        self.arena = np.empty(plan.peak_bytes + 64, np.uint8)
        self.base = (-self.arena.ctypes.data) % 64

    def new(self, t):
        return np.empty(t.shape, t.dtype)

    def arena_view(self, offset, t):
        off = self.base + offset
        return self.arena[off:off + t.nbytes].view(t.dtype).reshape(t.shape)

    def view(self, buf, offset, t):
        flat = buf.reshape(-1).view(np.uint8)
        return flat[offset:offset + t.nbytes].view(t.dtype).reshape(t.shape)

    def const(self, data):
        return data

    def bind(self, module, args):
        """A no-argument callable running `module` on the fixed buffers, with the arguments
        checked once (Module.prepared) where the module offers it."""
        prepared = getattr(module, "prepared", None)
        if prepared is not None:
            return prepared(*args)
        return lambda: module(*args)


def make_state(plan, fn, steps, mem=None) -> RunState:
    """One set of buffers for `plan` (of the fused @main `fn`) made by `mem` (HostMemory
    by default), with the calls of `steps` ((kernel, arguments, node) where an argument is
    a graph node, standing for its buffer, or a constant array; the last is the node
    itself) bound to them."""
    mem = mem or HostMemory(plan)
    inputs = {p.name: mem.new(p.type) for p in fn.params}
    bufs: Dict[int, object] = {id(p): inputs[p.name] for p in fn.params}
    outputs = {id(o) for o in fn.outputs}
    views = plan.output_views
    node_of = {id(n): n for n in plan.order}

    def own_buffer(n):
        t = n.type
        if id(n) not in bufs:
            if id(n) in outputs:
                bufs[id(n)] = mem.new(t)
            else:
                bufs[id(n)] = mem.arena_view(plan.offsets[id(n)], t)
        return bufs[id(n)]
    for n in plan.order:
        t = n.type
        if id(n) in views:        # computed straight into the output that reshapes it
            bufs[id(n)] = mem.view(own_buffer(node_of[views[id(n)]]), 0, t)
        elif id(n) in plan.aliases:
            bufs[id(n)] = mem.view(bufs[id(n.args[0])], plan.alias_offsets[id(n)], t)
        elif id(n) in plan.prefix_views:
            # a concatenation that begins a longer one: the first bytes of its buffer
            bufs[id(n)] = mem.view(own_buffer(node_of[plan.prefix_views[id(n)]]), 0, t)
        elif id(n) in plan.concat_parts:
            # written in place: a contiguous slice of the concatenation's buffer
            owner, off = plan.concat_parts[id(n)]
            bufs[id(n)] = mem.view(own_buffer(owner), off, t)
        else:
            own_buffer(n)
    bound = [(k.module, [bufs[id(a)] if isinstance(a, Expr) else a for a in args])
             for k, args, _ in steps]
    calls = [mem.bind(module, args) for module, args in bound]
    outs = [mem.const(o.data) if isinstance(o, Const) else bufs[id(o)] for o in fn.outputs]
    lendable = {}
    if isinstance(mem, HostMemory):
        for i, o in enumerate(fn.outputs):
            buf = outs[i]
            # an array of its own (not an input's, a constant or a view), named once; what
            # else shares its memory is a view into it, remade on the new array when lent
            if isinstance(o, Const) or buf.base is not None or \
                    any(buf is x for x in inputs.values()) or sum(x is buf for x in outs) > 1:
                continue
            lendable[i] = [(ci, module, args) for ci, (module, args) in enumerate(bound)
                           if any(isinstance(a, np.ndarray) and np.may_share_memory(a, buf)
                                  for a in args)]
    return RunState(mem.arena, inputs, outs, calls, mem=mem, lendable=lendable)


class StatePool:
    """Run states for concurrent runs. The first (`default`) is made at once and is the one
    taken whenever it is free, so single-threaded use never makes a second; another is made
    only when every state is busy (at most one per concurrent caller) and kept for reuse.
    The lock guards only taking and returning."""

    def __init__(self, make):
        self._make = make
        # a plain lock for the run path (~1 us less per run than the condition's methods);
        # the condition, on the same lock, only for callers waiting for the default state
        self._lock = threading.Lock()
        self._default_back = threading.Condition(self._lock)
        self._waiting = 0
        self.default = make()
        self._default_free = True
        self._spare: List[RunState] = []
        self.made = 1

    def take(self, default=False) -> RunState:
        """A state for one caller, who gives it back (`give`, in a finally); `default=True`
        waits for the default one (the state set_input, benchmark and profile act on)."""
        with self._lock:
            if default and not self._default_free:
                self._waiting += 1
                try:
                    self._default_back.wait_for(lambda: self._default_free)
                finally:
                    self._waiting -= 1
            state = None
            if self._default_free:
                self._default_free = False
                state = self.default
            elif self._spare:
                state = self._spare.pop()
        if state is not None:
            state.reclaim()       # outputs lent to an earlier caller who still holds them
            return state
        state = self._make()      # outside the lock: other runs go on meanwhile
        with self._lock:
            self.made += 1
        return state

    def give(self, state: RunState):
        with self._lock:
            if state is self.default:
                self._default_free = True
                if self._waiting:
                    self._default_back.notify_all()
            else:
                self._spare.append(state)
