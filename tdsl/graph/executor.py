"""`build(mod, target)` -> `Executor`: one tdsl kernel per fused group, buffers preallocated
from the memory plan (one arena per run state, see runstate.py), constants re-laid out
once for their kernels. For GPU targets (cuda, opencl) all of it lives on the device:
constants are uploaded once at build, each run state is a device arena with its kernels
bound (device_state.py), and a run copies only its inputs in and its outputs out.

Kernels are cached by (target, group text with parameter types, which parameters are
constants): identical layers compile once per process.
"""
from __future__ import annotations

import functools
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Dict, List

import numpy as np

from ..errors import ArgumentError, BoundsError, GraphError, TdslError
from ..runtime import ndarray as nd
from ..runtime.callseq import runner
from ..target import Target, as_target, kind_of
from .device_state import make_device_state, upload_constants
from .host_buffer import align_constant, aligned
from .executor_timing import Timing
from .kernel_cache import KERNELS, clear_kernel_cache, compile_all, group_key  # noqa: F401
from .ir import Const, Function, Module
from .passes import fuse_ops, plan_memory, specialize
from .passes.memory import ALIGN
from .ir.dims import free_vars, prepare
from .runstate import HostMemory, SizeArg, StatePool, make_state, once_layout, size_only
from .size_values import SizeValue
from .sizes import Plans, SizeBinder, SizedPool, Slot, window_extents
from .strategy import tune_group
from .strategy.groupdef import derived_source
from .strategy.symbolic import representative

# the shapes of positional inputs whose run-state pools a call finds without binding
# their sizes again
RECENT_SHAPES = 16


class Executor(Timing):
    """Runs a built graph: `exe.run(name=array, ...)` or `exe(*arrays)` -> list of arrays.

    Threads: `run` and `__call__` (with every input given) are safe from several threads
    at once, like onnxruntime's InferenceSession.run: a call takes a run state (arena,
    input and output buffers, kernel calls bound to them) from a pool, making one only
    when every state is busy, so concurrent calls never share buffers; constants are
    shared. `input_names`, `peak_memory_bytes`, `steps` and `stats` are read-only after
    build. `set_input`, `benchmark`, `profile` and `profile_text` act on the default state
    (the first, made at build): each waits until no run uses it, so they are safe beside
    concurrent runs, but the inputs they see are per-executor state, as in TVM's graph
    executor: a run that took the default state in between (the state a lone caller's run
    always takes) leaves its own inputs there.
    """

    def __init__(self, mod: Module, target=None, tune_minutes=0.0, log_file=None):
        if target is None:      # fixed now: the executor outlives the `with Target` block
            target = Target.current() or "llvm"
        if not isinstance(mod, Module):
            raise GraphError(f"build: expected a tdsl.graph.Module, got {type(mod).__name__}")
        if not isinstance(tune_minutes, (int, float)) or tune_minutes < 0:
            raise GraphError(f"build: tune_minutes must be a number >= 0, got {tune_minutes!r}")
        # a module optimized for no target gets the target's layout and integer choices now
        fused = fuse_ops(specialize(mod, target))
        self.mod = fused
        self.target = target
        kind = as_target(target).kind
        # GPU targets keep their buffers on the device; "c" emulates GPU schedules on the host
        device = kind_of(kind).device
        self.device = nd.Device(device, 0) if device != "cpu" else None
        api, self._unavailable = None, None
        if self.device is not None:
            try:
                api = self.device.api()
            except TdslError as e:      # build anyway (kernels need no GPU); runs say why
                self._unavailable = str(e)
        self._align = max(ALIGN, getattr(api, "view_alignment", 1))
        # symbolic sizes (ir/dims.py): read per call from the inputs; the plan here is of
        # representative sizes, each call's is of its own (StatesBySize)
        fn = fused.main
        self.binder = None
        shapes = [n.type.shape for n in [*fn.params, *fn.nodes()]]
        if free_vars(shapes):
            self.binder = SizeBinder(fn.params, fused.info.get("dim_bounds"), window_extents(fn))
            prepare(shapes)     # each call's sizes are then plain integer arithmetic
        self.bounds = fused.info.get("dim_bounds")
        # the kernels to compile are those of a plan at sizes above 1 (a batch of 1 may write
        # concats in place and view slices, leaving kernels out); each call has its own plan
        rep = representative(self.binder.names, self.bounds) if self.binder else None
        self.plan = plan_memory(fused, self._align, rep)
        self.stats = {"compiled": 0, "cached": 0, "compile_s": 0.0}
        self.input_vars = list(fn.params)
        views = self.plan.output_views
        packed_cache: Dict[tuple, np.ndarray] = {}
        self.tuned = self._tune(fused, target, tune_minutes, log_file) if tune_minutes else {}
        # (kernel, arguments, node): an argument is a constant array or the node whose
        # buffer it reads, so that each run state binds its own buffers (runstate.make_state)
        self.steps: List[tuple] = []
        for n in self.plan.order:
            if not isinstance(n.op, Function):
                raise GraphError(f"build: unexpected unfused operator {n.op_name}")
        calls = [n for n in self.plan.order if isinstance(n.op, Function) and n.type.size
                 and n not in self.plan.aliases and n not in views.values()
                 and n not in self.plan.concat_owners and n not in self.plan.prefix_views]
        # on the host, the values of the sizes alone are computed with numpy, not compiled
        # (size_values.py); a GPU's stay kernels, writing into device memory
        once = size_only(self.plan, fn) if self.binder and self.device is None else ()
        keys = compile_all([n for n in calls if n not in once], target, self.stats, self.tuned, self.bounds)
        # constants are re-laid out two at a time (numpy copies without the GIL): most of
        # a warm build of a large model is this first touch of its packed weights
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="tdsl-pack") as pool:
            for n in calls:
                k = SizeValue(n.op, self.binder.names) if n in once else KERNELS[keys[n]]
                args = []
                for i in k.param_order:
                    a = n.args[derived_source(i)]
                    if isinstance(a, Const):
                        tf = k.transforms.get(i)
                        if tf is None:
                            args.append(align_constant(a, self._align) if self.device is None else
                                        a.data if a.data.flags.c_contiguous else np.ascontiguousarray(a.data))
                        else:
                            ck = (a, k.key or id(k), i)
                            if ck not in packed_cache:
                                if self.device is None:     # the device copies them anyway
                                    tf = functools.partial(_pack_aligned, tf, self._align)
                                packed_cache[ck] = pool.submit(tf, a.data)
                            args.append(packed_cache[ck])
                    else:
                        args.append(a)
                args.append(n)
                args += [SizeArg(name) for name in k.size_args]
                self.steps.append((k, args, n))
        for _, args, _ in self.steps:
            args[:] = [a.result() if isinstance(a, Future) else a for a in args]
        if self.device is None:     # what the states view (a slice of a position table)
            for c in {a for n in set(self.plan.order) - set(calls) for a in n.args if isinstance(a, Const)}:
                align_constant(c, self._align)
        self.stats["cached"] = sum(not isinstance(k, SizeValue) for k, _, _ in self.steps) - self.stats["compiled"]
        if self.binder is not None:
            def plan_at(sizes):     # a call's sizes are checked where its plan is made
                self.binder.check_windows(sizes)
                return plan_memory(fused, self._align, sizes)
            self._plans = Plans(plan_at)
            self._pool, self._sizes, self.inputs = None, None, {}
            self._by_shapes = {}
            if self.device is not None:
                if kind == "cuda":
                    for src in dict.fromkeys(k.module for k, _, _ in self.steps):
                        src.get_source("ptx")
                if self._unavailable is not None:
                    self._slots = _NoDevice(self._unavailable)
                    return
                self.steps = upload_constants(self.steps, self.device)
            self._slots = StatePool(lambda: Slot(self._alloc_arena if self.device is not None else None))
            if self.device is None:
                runner()        # the native walk looked up now, not by the first call's state
            hi = {n: self.bounds[n][1] for n in self.binder.names if n in (self.bounds or {})}
            if len(hi) == len(self.binder.names):
                # every size bounded: the memory of the largest, paged in now (not run:
                # the bounds may lie far above the sizes served)
                self._reserve(hi, run=False)
            return
        if self.device is None:
            self._pool = StatePool(lambda: make_state(self.plan, fn, self.steps))
        else:
            if kind == "cuda":       # NVRTC errors at build, GPU or not
                for src in dict.fromkeys(k.module for k, _, _ in self.steps):
                    src.get_source("ptx")
            if self._unavailable is None:
                self.steps = upload_constants(self.steps, self.device)
                self._pool = StatePool(lambda: make_device_state(self.plan, fn, self.steps, self.device))
            else:
                self._pool = _NoDevice(self._unavailable)
        self.inputs = self._pool.default.inputs

    def reserve(self, **sizes):
        """Makes the memory of a lone caller (the default state's: a single-threaded
        server's) large enough for `sizes` ({size variable: int}, the largest expected;
        the arena holds the values of the sizes alone too, runstate.once_layout; the
        outputs' memory is held twice, for a caller that holds the last outputs while the
        next call runs: sizes.Slot) now,
        paged in, so that no call up to them allocates or touches fresh memory: a
        first touch of fresh pages can cost more than the run. On the host it also runs
        the network once at `sizes` on zero inputs, which pages in what only a run
        touches: the kernels' heap scratch (kept by the runtime, runtime/scratch.c) and
        the worker threads' stacks. Sizes are checked as a call's are (GraphError). A
        network without symbolic sizes has its memory already."""
        self._reserve(sizes, run=True)

    def _reserve(self, sizes, run):
        if self.binder is None:
            return
        sizes = self.binder.check(sizes)
        if isinstance(self._slots, _NoDevice):
            self._slots.take()
        key = self.binder.key(sizes)
        plan = self._plans.get(key, sizes)
        make, need = self._sized_make(plan, sizes)
        slot = self._slots.take(default=True)
        try:
            slot.reserve(need + 64, plan.output_bytes + 64, touch=True)
        finally:
            self._slots.give(slot)
        if run and self.device is None:
            pool = SizedPool(self._slots, key, sizes, plan, make, need)
            state = pool.take(default=True)
            try:
                state.calls.run()
            except TdslError:       # zeros a network rejects (a checked index): memory is reserved
                pass
            finally:
                pool.give(state)

    def forget_sizes(self, **sizes):
        """Returns the executor to where it would be had it never run at `sizes`
        ({size variable: int}, all of them): their memory plan, their run state in each
        idle slot (its kernels' bindings, its values of the sizes) and the shapes that find
        it are dropped; the memory (arenas, outputs, the kernels' scratch) is kept, as a
        server's reserve left it. A run in flight keeps its state until it returns. What a
        benchmark of first calls at a size needs (bench/dynamic.py), and a server's way to
        drop the states of sizes it no longer expects. No-op where the sizes are fixed."""
        if self.binder is None:
            return
        key = self.binder.key(self.binder.check(sizes))
        self._plans.forget(key)
        self._by_shapes = {s: p for s, p in self._by_shapes.items() if p.key != key}
        if self._pool is not None and self._pool.key == key:
            self._pool, self._sizes = None, None
        if not isinstance(self._slots, _NoDevice):
            for slot in self._slots.idle():
                slot.forget(key)

    def _sized_make(self, plan, sizes, steps=None):
        """(make for SizedPool, the arena bytes a state at `sizes` needs: the plan's peak,
        and on the host the values of the sizes alone past it, runstate.once_layout)."""
        if self.device is not None:
            return functools.partial(self._make_sized, steps=steps), plan.peak_bytes
        once = self.steps_at(plan, sizes, once=True)
        return (functools.partial(self._make_sized, steps=steps, once=once),
                once_layout(plan, once, sizes)[1])

    def _make_sized(self, plan, sizes, arena, outputs=None, steps=None, once=()):
        """The run state of `sizes` on `arena` (a Slot's), its outputs in `outputs`;
        `steps`: steps_at(plan, sizes) where the caller has them; `once`: on the host,
        steps_at(plan, sizes, once=True)."""
        fn = self.mod.main
        steps = steps or self.steps_at(plan, sizes)
        if self.device is None:
            return make_state(plan, fn, steps, HostMemory(plan, arena, outputs), sizes, once)
        return make_device_state(plan, fn, steps, self.device, sizes, arena)

    def steps_at(self, plan, sizes, once=False):
        """The steps a call planned by `plan` at `sizes` runs: concats written in place
        and slices viewed at its sizes only (a batch of 1) leave their kernels out; a
        kernel with size classes runs its variant for `sizes` (Kernel.at). On the host,
        the values of the sizes alone (size_values.SizeValue steps) are computed once per
        state instead (`once`: those; runstate.size_only)."""
        fixed = size_only(plan, self.mod.main) if self.device is None else set()
        return [(k.at(sizes), a, n) for k, a, n in self.steps
                if not plan.runs_no_kernel(n) and (n in fixed) == once]

    def _alloc_arena(self, nbytes):      # a device executor's (the host's grow: sizes.Slot)
        return nd.empty(nbytes, "uint8", self.device)

    def _pool_for(self, args, inputs):
        """The state pool of this call: the executor's, or with symbolic sizes the one of
        the sizes the inputs have (made on the first call at them)."""
        if self.binder is None:
            return self._pool
        # positional inputs of shapes run recently (a server's few lengths): their sizes
        # are checked already
        shape_key = None if inputs else tuple([getattr(a, "shape", None) for a in args])     # a list: no generator frame per call
        pool = self._by_shapes.get(shape_key)
        if pool is not None:
            self._pool = pool       # what benchmark and profile run: the last call's sizes
            return pool
        pool = self._sized_pool(args, inputs)
        if shape_key is not None and None not in shape_key:
            if len(self._by_shapes) >= RECENT_SHAPES:      # threads may add meanwhile
                self._by_shapes = {}
            self._by_shapes[shape_key] = pool
        return pool

    def _sized_pool(self, args, inputs):
        shapes = {p.name: _shape_of(a) for p, a in zip(self.input_vars, args)}
        shapes.update({k: _shape_of(v) for k, v in inputs.items()})     # the binder reads only the network's inputs
        sizes = self.binder.bind(shapes)
        if len(sizes) < len(self.binder.names):
            missing = [n for n in self.binder.names if n not in sizes]
            raise ArgumentError(f"missing input{'s' * (len(missing) > 1)} for the sizes {', '.join(missing)}")
        key = self.binder.key(sizes)
        if self._pool is not None and self._pool.key == key:
            return self._pool
        if isinstance(self._slots, _NoDevice):
            self._slots.take()
        plan = self._plans.get(key, sizes)
        steps = self.steps_at(plan, sizes)      # also for the profile's names
        pool = SizedPool(self._slots, key, sizes, plan, *self._sized_make(plan, sizes, steps))
        pool.steps = steps
        self._pool, self._sizes = pool, sizes
        return pool

    def current_pool(self):
        """The pool of run states of the sizes last run (of the network's one plan where
        its sizes are fixed): what `benchmark`, `profile` and `trace` run on."""
        if self._pool is None:
            raise GraphError("this network has symbolic sizes "
                             f"({', '.join(self.binder.names)}): run it (or set_input) first, "
                             "so that its sizes are known")
        return self._pool

    def _tune(self, fused, target, minutes, log_file):
        """The distinct groups without a hand strategy share `minutes` of search of the
        auto-scheduler's parameters (tdsl.autotune.tune_auto_schedule); records go to `log_file` and are
        reused by the next build. Returns {kernel key: parameters}."""
        groups = {}
        for n in self.plan.order:
            if isinstance(n.op, Function) and n.type.size and n not in self.plan.aliases \
                    and n not in self.plan.concat_owners:
                consts = {i: a.data for i, a in enumerate(n.args) if isinstance(a, Const)}
                groups.setdefault(group_key(n.op, target, consts), (n.op, consts))
        tuned, deadline = {}, time.perf_counter() + 60.0 * minutes
        todo = list(groups.items())
        for i, (key, (fn, consts)) in enumerate(todo):
            left = deadline - time.perf_counter()
            if left <= 1:
                break
            params = tune_group(fn, target, consts, fn.name, left / (len(todo) - i), log_file)
            if params:
                tuned[key] = params
        self.stats["tuned"] = len(tuned)
        return tuned

    # ------------------------------------------------------------------ running
    @property
    def input_names(self):
        return [p.name for p in self.input_vars]

    def set_input(self, name, value):
        """Copies `value` into input `name` of the default state (what benchmark and
        profile run on)."""
        pool = self._pool
        if self.binder is not None:
            if name not in self.input_names:
                raise ArgumentError(f"unknown input '{name}'; the inputs are {', '.join(self.input_names)}")
            known = {p.name: tuple(self.inputs[p.name].shape) for p in self.input_vars
                     if p.name in self.inputs and p.name != name}
            known[name] = _shape_of(value)
            pool = self._pool_for([], known)
        state = pool.take(default=True)
        try:
            self._set(state, name, value, copy_host=True)
            if self.binder is not None:
                self.inputs = state.inputs
        finally:
            pool.give(state)

    def _set(self, state, name, value, copy_host=False):
        """Sets input `name` of `state` to `value`: on the host the caller's array itself
        where the kernels can read it there (RunState.bind_input), unless `copy_host`."""
        if name not in state.inputs:
            raise ArgumentError(f"unknown input '{name}'; the inputs are {', '.join(self.input_names)}")
        buf = state.inputs[name]
        if isinstance(value, nd.NDArray):
            if value.host is not None:
                value = value.host
            elif self.device is None or value.device != self.device:
                value = value.numpy()
            else:        # already on this device: one copy on the device, in the run's order
                if value.shape != buf.shape or value.dtype != buf.dtype:
                    raise ArgumentError(f"input '{name}': expected shape {buf.shape} and dtype "
                                        f"{buf.dtype}, got {value.shape} {value.dtype}")
                buf.copyfrom(value, state.launches.stream)
                return
        arr = np.asarray(value)
        if state.launches is None and state.bind_input(name, arr, zero_copy=not copy_host):
            return
        buf = state.home[name]
        if arr.shape != buf.shape:
            raise ArgumentError(f"input '{name}': expected shape {buf.shape}, got {arr.shape}")
        if arr.dtype != buf.dtype:
            if not np.can_cast(arr.dtype, buf.dtype, casting="same_kind"):
                raise ArgumentError(f"input '{name}': expected dtype {buf.dtype}, got {arr.dtype}")
        if isinstance(buf, np.ndarray):
            np.copyto(buf, arr, casting="unsafe")
        else:
            buf.copyfrom(arr.astype(buf.dtype, copy=False), state.launches.stream)

    def run(self, *args, output="numpy", **inputs):
        """Sets the inputs (positional in parameter order, or by name: numpy arrays, or
        `tdsl.nd` arrays, which on the executor's GPU are copied on the device), runs every
        kernel, returns the outputs as a list of arrays the caller owns (no later run writes
        them while they are referenced; on the host they are the arrays the kernels wrote,
        not copies, see runstate.py): numpy (`output="numpy"`), or
        `tdsl.nd` arrays on the executor's device (`output="device"`: copied on the device,
        never to the host; each is a new allocation). An input named `output` is set
        positionally. Safe to call from several threads at once: each concurrent call runs
        on a state of its own."""
        if output not in ("numpy", "device"):
            raise ArgumentError(f"output must be 'numpy' or 'device', got {output!r}")
        if len(args) > len(self.input_vars):
            raise ArgumentError(f"expected {len(self.input_vars)} inputs, got {len(args)}")
        pool = self._pool_for(args, inputs)
        state = pool.take()
        try:
            for p, a in zip(self.input_vars, args):
                self._set(state, p.name, a)
            for name, v in inputs.items():
                self._set(state, name, v)
            given = {p.name for p in self.input_vars[:len(args)]} | set(inputs)
            missing = [p.name for p in self.input_vars if p.name not in given]
            if missing:
                raise ArgumentError(f"missing input{'s' * (len(missing) > 1)}: {', '.join(missing)}")
            try:
                if state.launches is None:
                    state.calls.run()
                    if output == "device":
                        return [nd.array(o) for o in state.outputs]
                    # the outputs themselves where the state can lend them (runstate.py)
                    return state.hand_out()
                seq = state.launches
                seq()
                if output == "device":
                    outs = [nd.empty(o.shape, o.dtype, self.device).copyfrom(o, seq.stream)
                            for o in state.outputs]
                    seq.sync()
                else:
                    outs = [o.numpy(seq.stream) for o in state.outputs]
                seq.check()
                return outs
            except BoundsError as e:
                raise self._in_network(e) from None
        finally:
            pool.give(state)

    def _in_network(self, e) -> BoundsError:
        """A kernel's BoundsError with the graph operators it computes and the network
        inputs it reads: an index read from the data (a token id past the vocabulary)."""
        for k, _, n in self.steps:
            if k.name == e.module:
                ops = ", ".join(dict.fromkeys(o.op for o in n.op.nodes() if isinstance(o.op, str)))
                inputs = [a.name for a in n.args if any(a is p for p in self.input_vars)]
                where = f" on input{'s' * (len(inputs) > 1)} {', '.join(map(repr, inputs))}" if inputs else ""
                err = BoundsError(f"{e} (the network's {ops}{where}: an index in the data is out of range)")
                err.module = e.module
                return err
        return e

    __call__ = run

    @property
    def peak_memory_bytes(self):
        """The arena of one run (from the memory plan; with symbolic sizes, of the sizes
        of the last run); each concurrent run holds one."""
        pool = self._pool if self.binder is not None else None
        return (pool.plan if pool is not None else self.plan).peak_bytes

    def __repr__(self):
        return (f"<tdsl.graph.Executor {len(self.steps)} kernels ({self.stats['compiled']} compiled, "
                f"{self.stats['cached']} cached) target={self.target!r} "
                + (f"sizes {', '.join(self.binder.names)}>" if self.binder is not None
                   else f"arena={self.plan.peak_bytes} B>"))


def _pack_aligned(transform, align, data):
    return aligned(transform(data), align)


class _NoDevice:
    """The state pool of a GPU executor built where its device is missing (kernels build
    without one): every run says why it cannot run."""

    def __init__(self, reason):
        self.reason = reason

    @property
    def default(self):
        return self

    inputs = property(lambda self: {})
    made = 0

    def take(self, default=False):
        raise TdslError(f"this executor was built for a GPU that is not here: {self.reason}")


def _shape_of(v):
    if isinstance(v, nd.NDArray):
        return tuple(v.shape)
    return tuple(np.shape(v))


def build(mod: Module, target=None, tune_minutes: float = 0.0, log_file=None) -> Executor:
    """Compiles every fused group of `mod` for `target` (None: the enclosing `with
    tdsl.target.Target(...)` block's, else "llvm") and returns an Executor. An
    unoptimized module is fused first (one kernel per operator chain); one from
    `optimize(mod)` without a target is first made for this one, as
    `optimize(mod, target=...)` would have. `tune_minutes`: the
    groups without a hand strategy share that much search of the auto-scheduler's
    parameters (records in `log_file`, reused by later builds)."""
    return Executor(mod, target, tune_minutes, log_file)
