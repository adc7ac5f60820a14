"""The sizes of one call of a network with symbolic sizes: the size variables read from the
inputs' shapes and checked (`SizeBinder`), the memory plan of each set of sizes (`Plans`)
and the run states of each, kept per concurrent caller (`Slot`, `SizedPool`).

A network imported with its batch or sequence left symbolic is built once: its kernels
take the sizes at call time, and its buffers depend on them, so each set of sizes gets
its own memory plan and run states (made on the first call at those sizes, from kernels
compiled at build: no compile on the request path), views of one arena per concurrent
caller that grows to the largest sizes run (`Slot`).
"""
from __future__ import annotations

import re
import threading
from collections import OrderedDict
from typing import Callable, Dict, Mapping

import numpy as np
import sympy

from ..errors import GraphError
from .host_buffer import GrowingBuffer, OutputBuffers
from .ir import Function
from .ir.dims import dim_str, evaluate, free_vars

# operators whose output slides a window over the input: an input shorter than the window
# leaves no output position, which ONNX (and onnxruntime) treats as an invalid input
_WINDOWED = re.compile(r"nn\.(conv\dd(_transpose|_blocked)?|(max|avg)_pool\dd)$")


def window_extents(fn: Function) -> list:
    """[(symbolic output extent, operator, span)] of the windowed operators in the groups
    of fused `fn`: each must be at least 1 at a call's sizes."""
    out, seen = [], set()
    for n in fn.nodes():
        for m in (n.op.nodes() if isinstance(n.op, Function) else [n]):
            if not _WINDOWED.match(m.op_name):
                continue
            for d in m.type.shape[2:]:
                if not isinstance(d, int) and d not in seen:
                    seen.add(d)
                    out.append((d, m.op_name, m.span))
    return out


class SizeBinder:
    """Reads the size variables of `params` (the network's inputs) from the shapes of one
    call's arrays; `bounds` {name: (low, high)} are checked."""

    def __init__(self, params, bounds=None, windows=()):
        self.params = list(params)
        self.bounds = dict(bounds or {})
        self.windows = list(windows)          # window_extents: checked once per new sizes
        self.where: Dict[str, list] = {}      # size variable -> [(input, axis)] that name it bare
        for p in self.params:
            for ax, d in enumerate(p.type.shape):
                if isinstance(d, sympy.Symbol):
                    self.where.setdefault(d.name, []).append((p.name, ax))
        self.names = sorted(self.where)
        missing = sorted(v.name for v in free_vars([p.type.shape for p in self.params]) if v.name not in self.where)
        if missing:
            raise GraphError(f"build: the size variables {missing} appear in the inputs' shapes only inside "
                             "expressions; an input axis must have each one as its size")

    def bind(self, shapes: Mapping[str, tuple]) -> Dict[str, int]:
        """{size variable: value} for the inputs' `shapes` ({input name: shape}); a rank
        that differs, two inputs that disagree on a size, a fixed axis of another size or
        a size outside its bounds is a GraphError naming the dimension and the inputs, and
        nothing runs."""
        sizes: Dict[str, int] = {}
        seen: Dict[str, tuple] = {}
        for p in self.params:
            shape = shapes.get(p.name)
            if shape is None:
                continue
            if len(shape) != len(p.type.shape):
                raise GraphError(f"input '{p.name}': expected rank {len(p.type.shape)} "
                                 f"({', '.join(map(dim_str, p.type.shape))}), got shape {tuple(shape)}")
            for ax, d in enumerate(p.type.shape):
                if isinstance(d, sympy.Symbol):
                    v = int(shape[ax])
                    if d.name in sizes and sizes[d.name] != v:
                        i0, a0 = seen[d.name]
                        raise GraphError(f"dimension '{d.name}' is {sizes[d.name]} in input '{i0}' (axis {a0}) "
                                         f"but {v} in input '{p.name}' (axis {ax})")
                    sizes[d.name] = v
                    seen.setdefault(d.name, (p.name, ax))
        for name, v in sizes.items():
            lo, hi = self.bounds.get(name, (1, None))
            if v < lo or hi is not None and v > hi:
                i0, a0 = seen[name]
                rng = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
                raise GraphError(f"dimension '{name}' = {v} (input '{i0}' axis {a0}) is outside its "
                                 f"bounds {rng}")
        for p in self.params:
            shape = shapes.get(p.name)
            if shape is None:
                continue
            for ax, d in enumerate(p.type.shape):
                if isinstance(d, sympy.Symbol):
                    continue
                if all(v.name in sizes for v in free_vars([d])) and evaluate(d, sizes) != int(shape[ax]):
                    raise GraphError(f"input '{p.name}': axis {ax} must be {dim_str(d)}"
                                     + (f" = {evaluate(d, sizes)}" if not isinstance(d, int) else "")
                                     + f", got {shape[ax]} (shape {tuple(shape)})")
        return sizes

    def check_windows(self, sizes: Mapping[str, int]):
        """A GraphError where an input is shorter than a windowed operator's window at
        `sizes` (that operator would have no output position)."""
        for d, op, span in self.windows:
            v = evaluate(d, sizes)
            if v < 1:
                named = ", ".join(f"{n} = {sizes[n]}" for n in sorted(x.name for x in free_vars([d])))
                where = f" (node '{span}')" if span else ""
                raise GraphError(f"{op}{where}: its input is shorter than its window at {named}: "
                                 f"the output size {dim_str(d)} would be {v}")

    def key(self, sizes: Mapping[str, int]) -> tuple:
        return tuple(sizes[n] for n in self.names)

    def check(self, sizes: Mapping[str, int]) -> Dict[str, int]:
        """`sizes` given by name ({size variable: int}, every one of them), checked
        against the bounds; a GraphError names what is wrong."""
        unknown = sorted(set(sizes) - set(self.names))
        missing = [n for n in self.names if n not in sizes]
        if unknown or missing:
            raise GraphError(f"the size variables are {', '.join(self.names)}"
                             + (f"; unknown: {', '.join(unknown)}" if unknown else "")
                             + (f"; missing: {', '.join(missing)}" if missing else ""))
        out = {}
        for name in self.names:
            v = sizes[name]
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
                raise GraphError(f"size '{name}' must be an integer, got {v!r}")
            lo, hi = self.bounds.get(name, (1, None))
            if v < lo or hi is not None and v > hi:
                rng = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
                raise GraphError(f"dimension '{name}' = {v} is outside its bounds {rng}")
            out[name] = int(v)
        return out


class Slot:
    """What one caller at a time runs on: an arena that grows to the largest plan it has
    run, and the run states of the sizes it ran last (at most `keep`), all of them views
    of that arena. A call at sizes seen before reuses their state; at new sizes it binds
    a new state to the same arena (no allocation, no first touch of fresh pages) unless
    the arena must grow, which it does at least twofold.

    On the host (`alloc` None) the arena is a GrowingBuffer (host_buffer.py: growing
    keeps the pages already touched), and the memory of the outputs is a
    host_buffer.OutputBuffers, shared by the states of every size: a call at new sizes
    touches fresh memory only beyond the largest it ran. The caller gets the outputs as
    views the buffer lends (GrowingBuffer.lend); a caller who still holds one, or any
    view of one, when the slot runs again keeps that memory: the outputs move to another
    buffer (OutputBuffers.leave), each state moving its own when it next runs
    (RunState.place), with its kernels' bindings to the buffers it left kept
    (RunState.relocate). A server's loop, which holds its last output while the next
    call runs, so alternates between two buffers, binding no kernel again, at each of a
    few sizes in turn, and `reserve` pages in both: no call up to the reserved sizes,
    the first at new sizes
    included, touches a fresh page for its outputs. A device executor passes `alloc`
    (bytes -> a new device arena)."""

    def __init__(self, alloc: Callable = None, keep=8):
        self.alloc = alloc
        self.keep = keep
        self.host = alloc is None
        self._mem = GrowingBuffer() if self.host else None
        self._out = OutputBuffers() if self.host else None
        self.arena, self.arena_bytes = None, 0
        self.states: "OrderedDict[tuple, object]" = OrderedDict()
        self.last = None        # the sizes run last: their state may have lent outputs

    def reclaim(self):      # StatePool's hook; Slot.state places each state it hands out
        pass

    @property
    def outputs(self):
        """The outputs' memory (host), or None."""
        return self._out.array if self.host else None

    def reserve(self, nbytes, out_bytes=0, touch=False):
        """An arena of at least `nbytes` (and on the host `out_bytes` for the outputs,
        twice: the buffer the states write and the spare the next call takes while the
        caller holds the last outputs) now, faulted in with `touch` (host), so that no call
        up to those sizes allocates or first-touches memory."""
        if self.arena_bytes < nbytes or self.host and self._out.nbytes < out_bytes:
            self._grow(nbytes, out_bytes)
            if touch and self.host:
                self.arena.fill(0)
                if self._out.array is not None:
                    self._out.array.fill(0)
        if self.host and out_bytes:
            self._out.reserve_spare(touch)

    def state(self, key, sizes, plan, make, arena_bytes=None):
        """The state of sizes `key`, made by `make(plan, sizes, arena, outputs)` when new
        (`outputs`: the host memory for the outputs, or None) on an arena of at least
        `arena_bytes` (default: the plan's peak) + 64."""
        if self.host:
            self._out.leave(self._forget)
        st = self.states.get(key)
        if key == self.last and st is not None:     # run after run at one size: the shortest way
            if self.host:
                st.place(self._out)
            return st
        if st is not None:
            self.states.move_to_end(key)
            if self.last is not None:    # another size's run wrote over its values of the sizes
                st.once.run()
        else:
            need = (plan.peak_bytes if arena_bytes is None else arena_bytes) + 64
            out_need = plan.output_bytes + 64
            if self.arena is None or self.arena_bytes < need or self.host and self._out.nbytes < out_need:
                self._grow(need, out_need)
            st = make(plan, sizes, self.arena, self.outputs)
            self.states[key] = st
            while len(self.states) > self.keep:
                self.states.popitem(last=False)
        self.last = key
        if self.host:
            st.place(self._out)
        return st

    def forget(self, key):
        """Drops the state of sizes `key`, as if they had never run here; `last` is
        kept, so that a state of other sizes run next still computes its values of the
        sizes again (the arena holds the forgotten one's)."""
        self.states.pop(key, None)

    def _grow(self, need, out_need):
        # every state is a view of the memory that grows: dropped first (and on the
        # host, dropping every view lets the buffer grow in place)
        self.states.clear()
        self.arena = None
        if self.host:
            if self._mem.nbytes < need:
                self._mem.grow(max(need, 2 * self._mem.nbytes))
            if self._out.nbytes < out_need:
                self._out.grow(max(out_need, 2 * self._out.nbytes))
            self.arena, self.arena_bytes = self._mem.array, self._mem.nbytes
        else:
            size = max(need, 2 * self.arena_bytes)
            self.arena, self.arena_bytes = self.alloc(size), size

    def _forget(self, array):
        """Forgets the states whose outputs lie in `array`."""
        for key in [k for k, st in self.states.items() if st.mem.outputs is array]:
            del self.states[key]


class SizedPool:
    """The StatePool interface (take, give, default) of one set of sizes, over the slots
    of an executor with symbolic sizes: a caller takes a slot, and in it the state of
    these sizes."""

    def __init__(self, slots, key, sizes, plan, make, arena_bytes=None):
        self.slots, self.key, self.sizes, self.plan, self.make = slots, key, sizes, plan, make
        self.arena_bytes = arena_bytes      # Slot.state's

    def take(self, default=False):
        slot = self.slots.take(default)
        try:
            st = slot.state(self.key, self.sizes, self.plan, self.make, self.arena_bytes)
        except BaseException:
            self.slots.give(slot)
            raise
        # a state lives in one slot and is held by one caller at a time (its slot's):
        # it carries the slot back to `give`
        st.slot = slot
        return st

    def give(self, state):
        self.slots.give(state.slot)


class Plans:
    """The memory plan of each set of sizes (the most recent `keep`), computed once."""

    def __init__(self, compute: Callable, keep: int = 32):
        self._compute = compute
        self._keep = keep
        self._lock = threading.Lock()
        self._items: "OrderedDict[tuple, object]" = OrderedDict()

    def forget(self, key: tuple):
        with self._lock:
            self._items.pop(key, None)

    def get(self, key: tuple, sizes: Dict[str, int]):
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
                return item
        item = self._compute(sizes)
        with self._lock:
            self._items.setdefault(key, item)
            while len(self._items) > self._keep:
                self._items.popitem(last=False)
            return self._items[key]
