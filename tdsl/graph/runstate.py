"""The buffers one run of an Executor writes: its arena, input buffers, non-constant output
buffers and the prepared kernel calls bound to them (`RunState`), made from the memory
plan by `make_state` (on the host, or on a GPU through device_state.DeviceMemory), and the
pool that gives each concurrent run its own (`StatePool`).

Kernels bind fixed arrays (Module.prepared), so two runs on one state would overwrite each
other's inputs and intermediates; constants (packed weights) are read-only and shared by
every state.

A host run hands its output arrays to the caller rather than copies (a language model's
logits are 26 MB: a copy writes as many fresh pages every run). The state lends them:
they lie in one buffer of a host_buffer.OutputBuffers (the state's own, `out`, or its
sizes.Slot's), and the caller gets views that buffer lends (`hand_out`), from which it
tells whether the caller still holds any (an output or a slice of one). When the state
is next taken while the caller holds some, the outputs move to another buffer of it,
paged in already once a holding loop has run twice, and the calls that write them (or a
view into them) are bound there (`relocate`), their bindings to the buffer left kept for
the way back; outputs the caller dropped are written again in place. An output named
twice, or that is an input or a constant, is copied as before.

A host run reads a large input from the caller's own array instead of copying it in (TVM's
`set_input_zero_copy`, what onnxruntime does with a numpy input): for a light kernel over a
large image the copy costs more than the kernel. The kernels that read the input are bound
to the caller's array (`bind_input`) and stay bound to it until an input of another array
comes; an input a kernel writes, a small one, or an array of another dtype, layout or
alignment is copied into the state's own buffer as before.

With symbolic sizes, what depends on the sizes alone (a T5's relative position buckets,
a causal mask: `size_only`), which a static build folds into constants, is computed when
a state of those sizes is made and not again at each run, into the arena past the plan's
peak (`once_layout`): memory Executor.reserve has paged in, where a state of its own
arrays faulted fresh pages in at each new size (a GPT-2's causal mask at batch 8 and
sequence 512 is 8 MiB). The states of other sizes share that arena, so a state computes
those values again when it runs after another size's (`RunState.once`: on the host the
operators' numpy meaning, size_values.py, where the run itself reads them many times).
"""
from __future__ import annotations

import threading
from typing import Dict, List

import numpy as np

from .host_buffer import OutputBuffers, zeros_aligned
from ..runtime.callseq import CallSequence
from ..errors import InternalError
from .ir import Const, Expr, TensorType
from .ir.dims import evaluate_shape


# Below this an input is copied: re-binding the kernels that read it to a new array costs
# more than copying a small input (128 KB lies between the sizes where each won)
ZERO_COPY_MIN_BYTES = 1 << 17


class RunState:
    __slots__ = ("arena", "inputs", "outputs", "calls", "launches", "mem", "bound", "lendable",
                 "home", "readers", "once", "slot", "moving", "placed", "out", "lend_from",
                 "lend_at")

    def __init__(self, arena, inputs, outputs, calls, launches=None, mem=None, bound=None,
                 lendable=None, readers=None, once=()):
        self.arena = arena
        # input name -> the array the kernels read it from: the state's own buffer
        # (`home`), or the caller's array of the last run (bind_input)
        self.inputs: Dict[str, np.ndarray] = inputs
        self.home: Dict[str, np.ndarray] = dict(inputs)
        self.outputs: List[np.ndarray] = outputs
        self.calls: list = calls
        self.launches = launches      # GPU: every call joined into one LaunchSequence
        self.mem = mem
        self.bound: List[tuple] = bound or []     # (module, argument arrays) of each call
        # the indices of the outputs lent to the caller (hand_out), the others copied
        self.lendable: set = lendable or set()
        # input name -> ([(call index, argument index)], [output index]) that view it, for
        # the inputs that may be read from the caller's array (no kernel writes them)
        self.readers: Dict[str, tuple] = readers or {}
        # the calls computing the values of the sizes alone into the arena (make_state's
        # `once`): run again when another size's state used the arena in between (on the
        # host numpy's: entries that hand back to Python, runtime/callseq.py)
        self.once = CallSequence(once)
        self.slot = None        # with symbolic sizes: the executor's slot it lives in
        # relocate's ([(call index, [(argument index, byte offset)])], [(output index, byte offset)])
        self.moving = None
        # id(output array) -> (that array, the moving calls' (bound, calls), the moved
        # outputs) as they were there: relocate's way back without binding
        self.placed: Dict[int, tuple] = {}
        # on the host without symbolic sizes: the OutputBuffers its outputs lie in (a
        # Slot's state is placed in its slot's: sizes.Slot.state)
        self.out = None
        # on the host, the buffer (host_buffer.GrowingBuffer) the outputs lie in: the
        # caller gets its views of them (`hand_out`); set by `place`
        self.lend_from = None
        # hand_out's plan: per output its byte offset in the outputs' buffer, None to copy
        self.lend_at: list = [None] * len(outputs)

    def bind_input(self, name, arr, zero_copy=True) -> bool:
        """Binds the kernels that read input `name` to `arr` itself (no copy) when they
        can read it there: a C-contiguous, aligned numpy array of the input's exact shape
        and dtype, large enough to be worth it, of an input no kernel writes. Otherwise
        (or not `zero_copy`) binds them back to the state's own buffer, for the caller to
        copy into, and returns False."""
        if name not in self.readers:
            return False
        home = self.home[name]
        ok = zero_copy and type(arr) is np.ndarray and arr.dtype == home.dtype \
            and arr.shape == home.shape and arr.nbytes >= ZERO_COPY_MIN_BYTES \
            and arr.flags.c_contiguous and arr.flags.aligned
        target = arr if ok else home
        if self.inputs[name] is not target:
            self._rebind_input(name, target)
        return ok

    def _rebind_input(self, name, new):
        old = self.inputs[name]
        args_at, outs_at = self.readers[name]
        changed: Dict[int, list] = {}
        for ci, ai in args_at:
            args = changed.setdefault(ci, list(self.bound[ci][1]))
            args[ai] = self._same_view(args[ai], old, new)
        for ci, args in changed.items():
            self._bind(ci, args)
        for i in outs_at:
            self.outputs[i] = self._same_view(self.outputs[i], old, new)
        self.inputs[name] = new
        self.placed = {}        # bound to the input's old array

    def hand_out(self) -> List[np.ndarray]:
        """The outputs for the caller: views of the lendable ones that their buffer
        lends (`lend_from`: it then tells whether the caller still holds any), the
        others copied."""
        buf = self.lend_from
        if buf is None:     # a device state's outputs: never lent
            return [o.copy() for o in self.outputs]
        return [o.copy() if off is None else buf.lend(off, o.shape, o.dtype)
                for o, off in zip(self.outputs, self.lend_at)]

    def reclaim(self):
        """Before the state's kernels run again (StatePool.take): where the caller
        still holds an output it lent, the outputs move to another buffer of `out`
        (the caller keeps that memory)."""
        if self.out is not None:
            self.out.leave()
            self.place(self.out)

    def place(self, out):
        """The state's outputs in `out`'s current buffer (a host_buffer.OutputBuffers):
        moved there if they lie in another one of it (`relocate`), and lent from it."""
        arr = out.array
        if self.mem.outputs is not arr:
            self.relocate(self.mem.outputs, arr, out.arrays())
        self.lend_from = out.current

    def relocate(self, old, new, live=()):
        """Every buffer of the state in array `old`'s memory (its outputs, and what views
        them) moved to the same offset in array `new`, the calls that write them bound
        there: the caller keeps what it holds of `old` (host only). The bindings to `old`
        are kept, and those to the arrays in `live` kept before: moving back to one of
        them (a loop holding its last output alternates between two) binds nothing."""
        if self.moving is None:     # the same places at every move: the buffers move as one
            self.moving = ([(ci, at) for ci, (_, args) in enumerate(self.bound) if (at := _places(args, old))],
                           _places(self.outputs, old))
        calls, outs = self.moving
        back = self.placed.pop(id(new), None)
        placed = {k: v for k, v in self.placed.items() if any(v[0] is a for a in live)}
        if any(old is a for a in live):     # else a buffer left to the caller alone
            placed[id(old)] = (old, [(self.bound[ci], self.calls[ci]) for ci, _ in calls],
                               [self.outputs[i] for i, _ in outs])
        if back is not None and back[0] is new:
            for (ci, _), (bound, call) in zip(calls, back[1]):
                self.bound[ci], self.calls[ci] = bound, call
            for (i, _), o in zip(outs, back[2]):
                self.outputs[i] = o
        else:
            view = self.mem.view
            for ci, at in calls:
                args = list(self.bound[ci][1])
                for j, off in at:
                    args[j] = view(new, off, args[j])
                self._bind(ci, args)
            for i, off in outs:
                self.outputs[i] = view(new, off, self.outputs[i])
        self.mem.outputs = new      # nothing of the state keeps `old` exported
        self.placed = placed

    def _bind(self, ci, args):
        """Call `ci` bound to the arrays `args` from now on."""
        module = self.bound[ci][0]
        self.bound[ci] = (module, args)
        self.calls[ci] = self.mem.bind(module, args)

    def _same_view(self, a, old, new):
        """`a` if it is not in array `old`'s memory, else the same view of array `new` (an
        intermediate computed straight into the output, a part of a concatenated output,
        a reshape of an input)."""
        if not (isinstance(a, np.ndarray) and np.may_share_memory(a, old)):
            return a
        return new if a is old else self.mem.view(new, a.ctypes.data - old.ctypes.data, a)


class HostMemory:
    """Where make_state puts buffers on the host: numpy arrays, the arena 64-byte aligned.
    A device executor passes its own (device_state.DeviceMemory) with the same methods."""

    def __init__(self, plan, arena, outputs, nbytes=None):
        # `arena`: a buffer of at least `nbytes` (default peak) + 64 bytes to plan into (a
        # Slot's, shared by the states of several sizes that never run at once);
        # `outputs`: the buffer of the outputs (plan.output_bytes + 64)
        if arena is None:
            arena = np.empty((plan.peak_bytes if nbytes is None else nbytes) + 64, np.uint8)
        self.arena = arena
        self.base = (-self.arena.ctypes.data) % 64
        self.outputs = outputs
        self.out_at = (-outputs.ctypes.data) % 64

    def new(self, t):
        """An output's buffer."""
        end = self.out_at + t.nbytes
        if end > self.outputs.nbytes:
            raise InternalError(f"the outputs' buffer ({self.outputs.nbytes} bytes) is smaller than "
                                f"the memory plan's output_bytes ({end} bytes needed)")
        buf = self.outputs[self.out_at:end].view(t.dtype).reshape(t.shape)
        self.out_at = (end + 63) // 64 * 64
        return buf

    def new_input(self, t):
        # zeros, not garbage: `benchmark()` and `profile()` may run before any input is
        # set, and an index read from a garbage input would only raise a BoundsError;
        # on a cache line, as every other buffer a kernel reads
        return zeros_aligned(t.shape, t.dtype, 64)

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


def size_only(plan, fn) -> set:
    """The group calls of `plan` whose values depend on constants and the sizes alone
    (an `arange` of the sequence and what is computed from it and from constants), other
    than outputs and buffers shared with them."""
    shared = set(plan.output_views) | set(plan.concat_parts) | set(plan.concat_owners) | set(plan.prefix_views)
    outputs, out = set(fn.outputs), set()
    for n in plan.order:
        if n not in outputs and n not in shared and all(isinstance(a, Const) or a in out for a in n.args):
            out.add(n)
    return out


def once_layout(plan, once, sizes) -> tuple:
    """({node: arena offset}, arena bytes) of the values of the `once` steps ((kernel,
    arguments, node): size_only's) at `sizes`, placed one after another past `plan`'s
    peak, each 64-byte aligned."""
    types, at, end = TypesAt(sizes), {}, -(-plan.peak_bytes // 64) * 64
    for _, _, n in once:
        at[n] = end
        end += -(-types(n.type).nbytes // 64) * 64
    return at, end


def make_state(plan, fn, steps, mem=None, sizes=None, once=()) -> RunState:
    """One set of buffers for `plan` (of the fused @main `fn`) made by `mem` (HostMemory
    by default), with the calls of `steps` ((kernel, arguments, node) where an argument is
    a graph node, standing for its buffer, or a constant array; the last is the node
    itself) bound to them. `sizes`: the values of the size variables of a network with
    symbolic sizes, the plan's (the buffers of one call's sizes). `once`: steps of
    `size_only` nodes, run here into the arena past the plan's peak (`once_layout`: `mem`'s
    arena holds that much), not by the state's calls but again by `RunState.once`."""
    fixed_at, fixed_end = once_layout(plan, once, sizes) if once else ({}, plan.peak_bytes)
    out = None
    if mem is None:
        out = OutputBuffers(plan.output_bytes + 64)
        mem = HostMemory(plan, None, out.array, nbytes=fixed_end)
    types = TypesAt(sizes)
    inputs = {p.name: mem.new_input(types(p.type)) for p in fn.params}
    bufs: Dict[Expr, object] = {p: inputs[p.name] for p in fn.params}
    outputs = set(fn.outputs)
    views = plan.output_views
    made = set()        # ids of the outputs' own buffers (mem.new)

    def own_buffer(n):
        t = types(n.type)
        if n not in bufs:
            if n in fixed_at:
                bufs[n] = mem.arena_view(fixed_at[n], t)
            elif n in outputs:
                bufs[n] = mem.new(t)
                made.add(id(bufs[n]))
            else:
                bufs[n] = mem.arena_view(plan.offsets[n], t)
        return bufs[n]
    for n in plan.order:
        t = types(n.type)
        if n in views:        # computed straight into the output that reshapes it
            bufs[n] = mem.view(own_buffer(views[n]), 0, t)
        elif n in plan.aliases:
            a = n.args[0]
            src = mem.const(a.data) if isinstance(a, Const) else bufs[a]
            bufs[n] = mem.view(src, plan.alias_offsets[n], t)
        elif n in plan.prefix_views:
            # a concatenation that begins a longer one: the first bytes of its buffer
            bufs[n] = mem.view(own_buffer(plan.prefix_views[n]), 0, t)
        elif n in plan.concat_parts:
            # written in place: a contiguous slice of the concatenation's buffer
            owner, off = plan.concat_parts[n]
            bufs[n] = mem.view(own_buffer(owner), off, t)
        else:
            own_buffer(n)
    bound = [(k.module, [bufs[a] if isinstance(a, Expr) else sizes[a.name] if isinstance(a, SizeArg) else a
                         for a in args])
             for k, args, _ in steps]
    calls = [mem.bind(module, args) for module, args in bound]
    if isinstance(mem, HostMemory):     # a run is one native call (runtime/callseq.py)
        calls = CallSequence(calls)
    once_calls = [mem.bind(k.module, [bufs[a] if isinstance(a, Expr) else sizes[a.name] if isinstance(a, SizeArg)
                                      else a for a in args])
                  for k, args, _ in once]
    outs = [mem.const(o.data) if isinstance(o, Const) else bufs[o] for o in fn.outputs]
    lendable, readers = set(), {}
    if isinstance(mem, HostMemory):
        for i, o in enumerate(fn.outputs):
            buf = outs[i]
            # a buffer of its own (not an input's, a constant or a view), named once; what
            # else shares its memory is a view into it, moved with it (relocate)
            if not isinstance(o, Const) and id(buf) in made and sum(x is buf for x in outs) == 1:
                lendable.add(i)
        for name, buf in inputs.items():
            args_at = [(ci, ai) for ci, (_, args) in enumerate(bound)
                       for ai, a in enumerate(args) if _shares(a, buf)]
            if not any(_writes(bound[ci][0], ai) for ci, ai in args_at):
                readers[name] = (args_at, [i for i, o in enumerate(outs) if _shares(o, buf)])
    state = RunState(mem.arena, inputs, outs, calls, mem=mem, bound=bound, lendable=lendable,
                     readers=readers, once=once_calls)
    state.once.run()
    if out is not None:
        state.out = out
        state.lend_from = out.current
    if lendable:
        start = mem.outputs.ctypes.data
        state.lend_at = [outs[i].ctypes.data - start if i in lendable else None for i in range(len(outs))]
    return state


class SizeArg:
    """A kernel argument that is the value of size variable `name` in the call's sizes."""
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name


class TypesAt:
    """Graph types with their symbolic sizes evaluated at `sizes` (each distinct type
    once: a network has few)."""

    def __init__(self, sizes):
        self.sizes = sizes
        self.memo = {}

    def __call__(self, t):
        if t.static:
            return t
        out = self.memo.get(t)
        if out is None:
            out = self.memo[t] = TensorType(evaluate_shape(t.shape, self.sizes), t.dtype)
        return out


def _places(arrays, buf) -> list:
    """[(index, byte offset in `buf`)] of the arrays of `arrays` in numpy array `buf`'s
    memory."""
    base = buf.ctypes.data
    return [(j, a.ctypes.data - base) for j, a in enumerate(arrays) if _shares(a, buf)]


def _shares(a, buf) -> bool:
    return isinstance(a, np.ndarray) and np.may_share_memory(a, buf)


def _writes(module, i) -> bool:
    """Whether `module` may write its argument `i` (a module with no signature: yes)."""
    sig = getattr(module, "signature", None)
    if sig is None or i >= len(sig.params):
        return True
    return bool(sig.params[i].get("written", True))


class StatePool:
    """Run states for concurrent runs. The first (`default`) is made at once and is the one
    taken whenever it is free, so single-threaded use never makes a second; another is made
    only when every state is busy (at most one per concurrent caller) and kept for reuse.
    The lock guards only taking and returning."""

    def __init__(self, make):
        self._make = make
        # a plain lock for the run path (cheaper per run than the condition's methods);
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

    def idle(self) -> List[RunState]:
        """The states no caller holds now (a state taken meanwhile is its caller's)."""
        with self._lock:
            return [self.default] * self._default_free + list(self._spare)
