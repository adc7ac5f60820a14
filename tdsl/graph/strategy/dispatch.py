"""The kernel of a fused group: its definition (groupdef.py) scheduled by the schedule of
its target (`SCHEDULES`: cpu/schedule.py for llvm and C, gpu/schedule.py for cuda and
opencl, each choosing from the registry of implementations; `register_schedule` adds a
target's), then built; and the tuning of the groups that take the auto-scheduler's
rules."""
from __future__ import annotations

import operator
from typing import Callable, Dict

import numpy as np
import sympy

import tdsl

from ...errors import GraphError, TdslError
from ...fingerprint import fingerprint
from ...target import as_target
from ...ir import expr as E
from ...ir.visitor import free_vars
from ..ir import Function
from ..ir.dims import evaluate, prepare
from ..ir.text import print_function
from . import registry, topi
from .class_reach import may_hold, size_intervals
from .cpu.schedule import schedule_llvm
from .erasure import SIZE_NAME
from .gpu.schedule import schedule_gpu
from .stages import stages_of
from .symbolic import SHORT, SHORT_CLASSES, representative
from .groupdef import GroupDef


class Kernel:
    """A compiled group: `module(*args)` with args in `param_order`, then the output, then
    the values of `size_args` (size variables that no argument's shape holds and its
    stages read).
    `scheduled_by`: the name of the registry implementation whose schedule it has (None
    where none ran: the C target's scalar loops)."""

    def __init__(self, name, module, param_order, transforms, out_type, source_key, size_args=(),
                 scheduled_by=None):
        self.name = name
        self.module = module
        self.param_order = param_order
        self.transforms = transforms
        self.out_type = out_type
        self.key = source_key
        self.size_args = tuple(size_args)
        self.scheduled_by = scheduled_by
        # size classes of a kernel with symbolic sizes: [(condition, Kernel)], the first
        # whose condition holds at a call's sizes runs instead (same arguments)
        self.variants = []
        self.size_values = {}    # {kernel size variable: f(network sizes) -> its value}
        self._cond_vars = []     # the size variables of each variant's condition

    def at(self, sizes) -> "Kernel":
        """The kernel that runs at `sizes` ({size variable: int}, the network's): a
        variant whose condition holds there, else this one. Called when a call first
        meets its sizes: a few integer operations, no simplifier."""
        if len(self._cond_vars) != len(self.variants):     # each condition walked once
            self._cond_vars = [tuple(free_vars(cond)) for cond, _ in self.variants]
        for (cond, k), names in zip(self.variants, self._cond_vars):
            env = {v: self.size_values[v.name](sizes) for v in names}
            if _holds(cond, env):
                return k
        return self


_INT_OPS = {E.Add: operator.add, E.Sub: operator.sub, E.Mul: operator.mul, E.FloorDiv: operator.floordiv,
            E.FloorMod: operator.mod, E.Min: min, E.Max: max, E.LT: operator.lt, E.LE: operator.le,
            E.GT: operator.gt, E.GE: operator.ge, E.EQ: operator.eq, E.NE: operator.ne,
            E.And: lambda a, b: a and b, E.Or: lambda a, b: a or b}


def _holds(e, env):
    """The value of a size condition (integer arithmetic and comparisons of size
    variables bound in `env`)."""
    t = type(e)
    if t is E.IntImm:
        return e.value
    if t is E.Var:
        return env[e]
    if t is E.Cast:
        return _holds(e.value, env)
    if t is E.Not:
        return not _holds(e.a, env)
    return _INT_OPS[t](_holds(e.a, env), _holds(e.b, env))


def _size_function(expr):
    """f({network size name: int}) -> the value of graph dimension `expr` (its Python
    function made now, at build, not by the first call at new sizes)."""
    prepare([(expr,)])
    return lambda sizes: evaluate(expr, sizes)


SCHEDULES: Dict[str, Callable] = {
    "llvm": schedule_llvm,
    "c": lambda s, out, g: schedule_llvm(s, out, g, vectorize=False, parallel=False),
    "cuda": schedule_gpu,
    "opencl": schedule_gpu,
}


# which definitions a target's groups take: "cpu" (the fast definitions of cpu/, packed
# weights) or "gpu" (topi's, as the GPU schedules expect them)
FAMILIES: Dict[str, str] = {"llvm": "cpu", "c": "cpu", "cuda": "gpu", "opencl": "gpu"}


def register_schedule(target_kind: str, fn: Callable, family: str = "cpu"):
    """fn(schedule, output_tensor, group_def) schedules a fused group for `target_kind`;
    `family` "gpu" gives it the definitions the GPU schedules take (so "c" with
    `schedule_gpu` emulates the GPU kernels on the CPU)."""
    SCHEDULES[target_kind] = fn
    FAMILIES[target_kind] = family
    registry.changed()


AUTO_FALLBACKS = []   # (kernel, error) where the auto rules failed and the plain schedule ran


def tune_group(fn: Function, target: str, consts: Dict[int, np.ndarray], name: str, seconds: float,
               log_file=None):
    """Tunes the auto-scheduler's parameters for a group that has no hand strategy (the
    search of tdsl.autotune.tune_auto_schedule, within `seconds`); returns them as a dict, or None when the
    group has a hand strategy or no candidate beat the untuned schedule's correctness check."""
    from ...autotune import tune_auto_schedule
    kind = as_target(target).kind
    sched = SCHEDULES.get(kind)
    if sched is None or as_target(target).family != "cpu":
        return None
    g = GroupDef(fn, consts, target, FAMILIES.get(kind, "cpu"))
    out = g.build()
    if isinstance(out.op, tdsl.te.PlaceholderOp):
        return None
    try:
        sched(tdsl.create_schedule(out), out, g)
    except TdslError:
        return None
    if g.explanation is None:
        return None          # a hand strategy, or the rules did not hold
    order, args, size_args = kernel_args(g, out)

    def definition():
        return [out], args
    definition.__qualname__ = f"graph_group_{abs(hash(print_group_key(fn, consts)))}"
    try:
        s, _, res = tune_auto_schedule(definition, (), target=target, timeout_s=seconds, log_file=log_file)
    except TdslError:
        return None
    if res.best is None:
        return None
    return dict(s.explanation.params)      # the picked parameters that differ from the rules'


def kernel_args(g, out, size_args=None):
    """(parameter order, the kernel's arguments, size_args) of group definition `g` with
    output `out`: its placeholders, the output, then the size variables that no
    argument's shape holds (passed as scalars: the values of ONNX's Shape), or
    `size_args` where given (a variant takes the arguments of its kernel)."""
    order = sorted(g.placeholders)
    args = [g.placeholders[i] for i in order] + [out]
    if size_args is not None:
        return order, args + [g.sizes.vars[n] for n in size_args], list(size_args)
    size_args = []
    if g.symbolic:
        shaped = set()
        for t in args:
            for d in t.shape:
                if not isinstance(d, int):
                    shaped |= {v.name for v in tdsl.ir.visitor.free_vars(d)}
        used = _vars_read(out)
        size_args = [n for n in sorted(g.sizes.vars) if n not in shaped
                     and (used is None or n in used)]
        args += [g.sizes.vars[n] for n in size_args]
    return order, args, size_args


def _vars_read(out):
    """The names of the variables the stages of `out` read (bodies, loop extents and
    shapes), or None where a stage is not a compute, which this cannot see into. A size
    variable none of them reads is no argument: a dense layer over `batch*sequence` rows
    reads that product alone (an argument of its own, buffer_atoms), and every argument
    costs each call of the kernel a conversion in ctypes."""
    names = set()
    stages = stages_of(out, computes_only=False)
    for t in stages:
        op = t.op
        if isinstance(op, tdsl.te.PlaceholderOp):
            parts = [list(op.shape)]
        elif isinstance(op, tdsl.te.ComputeOp):
            parts = [list(op.shape), list(op.bodies)]
            parts += [[iv.dom.min, iv.dom.extent] for iv in [*op.axis, *op.reduce_axis] if iv.dom is not None]
        else:
            return None
        for part in parts:
            names |= {v.name for x in part if isinstance(x, E.Expr) for v in free_vars(x)}
    return names


def print_group_key(fn, consts):
    return print_function(fn).split("(", 1)[1] + repr(sorted(consts))


def compile_group(fn: Function, target: str, consts: Dict[int, np.ndarray], name: str,
                  auto_params=None, erasure=None, bounds=None) -> Kernel:
    """The kernel of group `fn`; `erasure` (generic.find) makes it generic in the channel
    count. A group with symbolic sizes gets a kernel that takes them at call time, its
    schedule sized for representative ones within `bounds` ({name: (low, high)}), and
    the variants of its size classes."""
    kind = as_target(target).kind
    sched = SCHEDULES.get(kind)
    if sched is None:
        raise GraphError(f"build: no schedules for target '{kind}'; known: {', '.join(SCHEDULES)} "
                         "(tdsl.graph.strategy.register_schedule adds one)")
    g = GroupDef(fn, consts, target, FAMILIES.get(kind, "cpu"))
    g.auto_params = auto_params
    g.classes_run = erasure is None
    sizes = {}
    if g.symbolic:
        sizes = representative(g.sizes.vars, bounds)
    if erasure is not None:
        g.erasure, sizes = erasure, {**sizes, SIZE_NAME: erasure.size}
        # the auto-scheduler's rules read sizes as numbers: the plain schedule instead
        g.use_auto = erasure.kind != "elementwise"
    token = topi.representative.set(sizes)
    token2 = topi.symbolic_sizes.set(g.symbolic)
    # {schedule fingerprint: Kernel} of this group's kernel and variants: a size class
    # whose schedule comes out as one already built (an elementwise group's "short",
    # where no decision reads the size) shares that kernel instead of compiling its copy
    built = {}
    try:
        kernel = _compile_group(g, fn, target, name, sched, built)
    finally:
        topi.symbolic_sizes.reset(token2)
        topi.representative.reset(token)
    if g.size_classes and erasure is None:
        exprs = {**{n: sympy.Symbol(n) for n in g.sizes.vars}, **{a.name: e for e, a in g.sizes.atoms.items()}}
        kernel.size_values = {n: _size_function(e) for n, e in exprs.items()}
        # a class the declared bounds rule out would never run: not compiled
        reach = size_intervals(exprs, bounds)
        kernel.variants = [(cond, _variant(fn, target, consts, name, auto_params, bounds, sched, cls, sizes,
                                           g.size_pins.get(cls), kernel.size_args, built))
                           for cls, cond in g.size_classes.items() if may_hold(cond, reach)]
    return kernel


def _variant(fn, target, consts, name, auto_params, bounds, sched, cls, sizes, pins, size_args, built):
    """The kernel of group `fn` scheduled for size class `cls`: "small", for the smallest
    sizes its bounds allow (a dense layer's or an auto-scheduled matmul's register tile
    of one row for a single token); "short" and "short_keys" (SHORT_CLASSES), for
    sizes of `SHORT` (the auto-scheduler's rows of a short sequence); one with `pins`
    ({size variable: value}), for those sizes as constants, its schedule the static one
    of that size (a single token's) where the others stay symbolic; another, for the
    representative `sizes`, the schedule told its class. Each takes its kernel's
    arguments (`size_args`); one whose schedule is in `built` is that kernel (see
    compile_group)."""
    g = GroupDef(fn, consts, target, FAMILIES.get(as_target(target).kind, "cpu"))
    g.auto_params, g.size_class = auto_params, cls
    if pins:
        g.sizes.pinned = dict(pins)
        sizes = {**sizes, **pins}
    elif cls == "small":
        sizes = {n: max(1, (bounds or {}).get(n, (1, None))[0]) for n in g.sizes.vars}
    elif cls in SHORT_CLASSES:
        sizes = representative(g.sizes.vars, bounds, SHORT)
    token = topi.representative.set(sizes)
    token2 = topi.symbolic_sizes.set(True)
    try:
        return _compile_group(g, fn, target, f"{name}_{cls}", sched, built, size_args)
    finally:
        topi.symbolic_sizes.reset(token2)
        topi.representative.reset(token)


def _compile_group(g, fn, target, name, sched, built, size_args=None):
    """The Kernel `name` of group definition `g`; where `built` ({schedule fingerprint:
    Kernel}) holds the schedule it gets, that kernel: the same code under another name.
    The fingerprint is taken once, here: `tdsl.build`'s compile cache is handed it."""
    out = g.build()
    if isinstance(out.op, tdsl.te.PlaceholderOp):
        out = tdsl.compute(out.shape, lambda *i: out[i], name="copy")
    order, args, size_args = kernel_args(g, out, size_args)
    fp = None
    try:
        s = tdsl.create_schedule(out)
        sched(s, out, g)
        fp = fingerprint(s, args)
        if fp is not None and fp in built:
            return built[fp]
        mod = tdsl.build(s, args, target=target, name=name, schedule_key=fp)
    except TdslError as e:
        if g.explanation is None:
            raise GraphError(f"build: kernel @{name} failed for target '{target}': "
                             f"{type(e).__name__}: {e}") from None
        # the auto-scheduler's rules did not hold for this group: the plain schedule
        AUTO_FALLBACKS.append((name, f"{type(e).__name__}: {e}"))
        g.use_auto, g.explanation = False, None
        s = tdsl.create_schedule(out)
        sched(s, out, g)
        try:
            mod = tdsl.build(s, args, target=target, name=name)
        except TdslError as e2:
            raise GraphError(f"build: kernel @{name} failed for target '{target}': "
                             f"{type(e2).__name__}: {e2}") from None
    kernel = Kernel(name, mod, order, dict(g.transforms), fn.outputs[0].type, None, size_args, g.scheduled_by)
    if fp is not None:
        built[fp] = kernel
    return kernel
