"""The lowering script: schedule -> loop IR, one pass after another.

`PASSES` is the one ordered list of loop-IR passes, from the output of `schedule_ops` to
the function a code generator receives. Each entry says when it runs (its phase):
`lower()` runs the "lower" passes, and the "target" ones when it knows the target;
`build()` runs what is left for its target, then the "build" passes with its options.

Set TDSL_DEBUG=2 to print the IR after every pass. With TDSL_DEBUG set, or TDSL_VERIFY=1
(the test suite sets it), `tdsl.passes.verify` checks the IR after every pass.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Callable, NamedTuple, Tuple

from .errors import LoweringError, TdslError, InternalError
from .ir import expr as E
from .ir import stmt as S
from .ir.expr import Range
from .passes.bounds_check import bounds_check
from .passes.double_buffer import inject_double_buffer
from .passes.fuse_siblings import fuse_sibling_loops
from .passes.gpu import gpu_storage_scope, split_kernels
from .passes.intrin_rules import lower_intrinsics
from .passes.legalize_bf16 import legalize_bf16
from .passes.loop_partition import loop_partition
from .passes.mma_fragments import lower_mma_fragments
from .passes.simplify import simplify_func
from .passes.storage_flatten import storage_flatten
from .passes.thread_sync import thread_sync
from .passes.verify import verify
from .passes.virtual_thread import inject_virtual_thread
from .schedule.schedule import Schedule
from .schedule.schedule_ops import schedule_to_func
from .target_kind import kind_of
from .te.extern import ExternOp
from .te.regions import check_reads
from .te.scan import scan_roles
from .te.tensor import PlaceholderOp

# the phases: when a pass runs
LOWER = "lower"     # in every lower()
TARGET = "target"   # once the target is known: in lower() given one, else in build()
CPU = "cpu"         # in lower(), for a schedule that binds no GPU threads
GPU = "gpu"         # as "target", for GPU targets (and GPU schedules built for "c")
BUILD = "build"     # in build(), on the function lowered for its target


class Pass(NamedTuple):
    name: str
    fn: Callable                    # fn(func, **options) -> func
    phase: str = LOWER
    options: Tuple[str, ...] = ()   # the `Options` fields it takes, as keywords


@dataclass(frozen=True)
class Options:
    """What a pass may be told besides the function."""
    kind: str = "llvm"          # the target kind
    data_only: bool = True      # bounds_check: only the accesses whose index is read from memory


PASSES = [
    Pass("inject_double_buffer", inject_double_buffer),
    Pass("fuse_sibling_loops", fuse_sibling_loops),
    Pass("simplify", simplify_func),
    Pass("loop_partition", loop_partition),
    Pass("lower_mma_fragments", lower_mma_fragments),
    Pass("storage_flatten", storage_flatten),
    Pass("simplify", simplify_func),
    Pass("legalize_bf16", legalize_bf16),
    Pass("lower_intrinsics", lower_intrinsics, TARGET, ("kind",)),
    # virtual threads on the CPU run interleaved; a GPU schedule keeps them for the GPU
    # passes, where barriers exist
    Pass("inject_virtual_thread", inject_virtual_thread, CPU),
    Pass("gpu_storage_scope", gpu_storage_scope, GPU),
    Pass("thread_sync", thread_sync, GPU),
    # after thread_sync: its barriers (placed as if virtual threads were threads) are where
    # the interleaving of virtual threads must meet
    Pass("inject_virtual_thread", inject_virtual_thread, GPU),
    Pass("split_kernels", split_kernels, GPU),
    Pass("bounds_check", bounds_check, BUILD, ("data_only",)),
]


def binds_threads(sched) -> bool:
    """Whether any loop of the schedule is bound to blockIdx/threadIdx (an extern stage's
    ir_builder body included)."""
    return any(a.thread is not None and a.thread.thread_tag != "vthread"
               for st in sched.stages for a in st.iter_var_attrs.values()) or \
        any(isinstance(st.op, ExternOp) and st.op.binds_threads for st in sched.stages)


def target_kind(target) -> str:
    """'llvm', 'c', 'cuda' or 'opencl' from a target string (None: the enclosing
    `with Target(...)` block's, else 'llvm')."""
    if target is None:
        from .target import Target
        cur = Target.current()
        return cur.kind if cur is not None else "llvm"
    kind = getattr(target, "kind", None)    # a tdsl.target.Target
    if kind is not None:
        return kind
    if not isinstance(target, str) or not target.strip():
        raise LoweringError(f"target must be a string such as 'llvm' or 'cuda', got {target!r}")
    return target.split()[0]


def default_args(sched: Schedule):
    """The placeholders read by the schedule, then its outputs."""
    states = scan_roles([st.op for st in sched.stages])    # a scan's state is its output
    ins = [st.op.output(0) for st in sched.stages if isinstance(st.op, PlaceholderOp)
           and st.op not in states and any(st in sched.producers(c) for c in sched.stages)]
    outs = [t for op in sched.outputs for t in sched.stage_map[op].origin_op.outputs]
    return ins + outs


def _size_ranges(func):
    """Sizes of argument buffers are non-negative: a fact the passes may use."""
    out = {}
    for p in func.params:
        if isinstance(p, S.Buffer):
            for d in p.shape:
                if isinstance(d, E.Var):
                    out[d] = Range(E.const(0), E.const(2**31 - 1))
    return out


def lower(s, args=None, name="main", target=None) -> S.PrimFunc:
    """The loop IR of schedule `s` as a PrimFunc; `str()` prints it.

    With a GPU `target` ("cuda", "opencl") the schedule is checked for the grid, barriers
    are inserted and the kernels are recorded in `func.attrs["kernels"]`. Without one, the
    target of an enclosing `with tdsl.target.Target(...)` block applies; with neither, the
    function is target-neutral: `build(func, target=...)` adds what a GPU target needs."""
    if not isinstance(s, Schedule):
        raise LoweringError(f"lower: expected a schedule from tdsl.create_schedule, got {s!r}")
    if args is None:
        args = default_args(s)
    if not isinstance(args, (list, tuple)):
        raise LoweringError(f"lower: args must be a list of tensors and vars, got {args!r}")
    if not isinstance(name, str) or not name.isidentifier():
        raise LoweringError(f"lower: the name must be an identifier, got {name!r}")
    kind = target_kind(target)
    gpu = _needs_gpu_passes(s, kind)
    if gpu:     # before any work: a schedule that cannot run on the grid fails at once
        from .passes.gpu import check_gpu_schedule
        check_gpu_schedule(s, kind)

    def start():
        checks = check_reads([st.op for st in s.stages])
        func = schedule_to_func(s, list(args), name, _warp_size(target, kind))
        func.attrs["size_ranges"] = _size_ranges(func)
        func.attrs["region_checks"] = checks
        return func
    phases = {LOWER}
    if gpu:
        phases.add(GPU)
    elif not binds_threads(s):
        phases.add(CPU)
    # a function lowered for no target gets the target's passes when it is built for one
    if target is not None or _current_target() is not None:
        phases.add(TARGET)
    func = _run(start, phases, Options(kind), "schedule_ops")
    func.attrs["target"] = kind
    return func


def lower_for_target(func: S.PrimFunc, target, name=None) -> S.PrimFunc:
    """`func` from `lower()` made ready for `target`: the GPU passes when the target
    needs them and `func` was lowered without them; renamed to `name` if given."""
    kind = target_kind(target)
    if name is not None and name != func.name:
        if not isinstance(name, str) or not name.isidentifier():
            raise LoweringError(f"build: the name must be an identifier, got {name!r}")
        if "kernels" in func.attrs:
            raise LoweringError(f"build: function '{func.name}' was lowered for a GPU target; "
                                "name it in lower(..., name=...)")
        func = S.PrimFunc(name, func.params, func.body, dict(func.attrs))
    sched = func.attrs.get("schedule")
    gpu = sched is not None and _needs_gpu_passes(sched, kind)
    lowered_for = func.attrs.get("target", "llvm")
    if "kernels" in func.attrs and not gpu:
        raise LoweringError(f"build: function '{func.name}' was lowered for the GPU target "
                            f"'{lowered_for}'; lower the schedule again for target '{kind}'")
    phases = set()
    if func.attrs.get("intrinsics_lowered_for") != kind and "kernels" not in func.attrs:
        phases.add(TARGET)
    if gpu and "kernels" not in func.attrs:
        from .passes.gpu import check_gpu_schedule
        check_gpu_schedule(sched, kind)
        phases.add(GPU)
    if phases:
        func = _run(lambda: func, phases, Options(kind), "lower")
    if func.attrs.get("target") != kind:
        func = func.with_body(func.body)
        func.attrs["target"] = kind
    return func


def _warp_size(target, kind):
    """The warp cross-thread reductions shuffle within, for kinds that shuffle (CUDA).
    OpenCL's sub-group shuffles are not portable (PoCL) and "c" runs the lanes as fibers:
    both keep shared memory."""
    if not kind_of(kind).warp_shuffles:
        return 0
    from .target import Target
    if not isinstance(target, Target):
        target = Target.current() if target is None else Target(target)
    return target.warp_size


def _current_target():
    from .target import Target
    return Target.current()


def _needs_gpu_passes(sched, kind):
    k = kind_of(kind)
    return k.is_gpu or (k.emulates_gpu and binds_threads(sched))


def build_passes(func: S.PrimFunc, bounds_check=False) -> S.PrimFunc:
    """The "build" passes of PASSES on `func` from `lower_for_target`: the accesses whose
    index is read from memory checked, and all others too when `bounds_check`."""
    return _run(lambda: func, {BUILD}, Options(func.attrs.get("target", "llvm"),
                                               data_only=not bounds_check), None)


def verifies() -> bool:
    """Whether lowering checks the IR after every pass: TDSL_DEBUG set (any level but 0)
    or TDSL_VERIFY=1."""
    return os.environ.get("TDSL_VERIFY", "") not in ("", "0") or _debug_level() > 0


def _debug_level():
    return int(os.environ.get("TDSL_DEBUG", "0") or 0)


def _run(start, phases, options, start_name):
    """start() and then each pass of PASSES in `phases`, told its `options`; TDSL_DEBUG=2
    prints the IR after each, and the verifier checks it (`verifies()`). Errors that are
    not the user's become InternalError."""
    debug = _debug_level()
    check = verifies()
    try:
        func = start()
        if start_name is not None:
            _after(func, start_name, debug, check)
        for p in PASSES:
            if p.phase in phases:
                func = p.fn(func, **{o: getattr(options, o) for o in p.options})
                _after(func, p.name, debug, check)
    except TdslError:
        raise
    except RecursionError as e:
        raise LoweringError(f"lower: expression too deep to lower ({e})") from None
    except Exception as e:  # our bug, not the user's
        raise InternalError(f"lowering failed unexpectedly: {type(e).__name__}: {e}. "
                            "Please report this with the code that defines the schedule.") from e
    return func


def _after(func, pass_name, debug, check):
    if debug >= 2:
        print(f"# after {pass_name}\n{func}\n", file=sys.stderr)
    if check:
        verify(func, pass_name)
