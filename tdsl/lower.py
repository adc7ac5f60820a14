"""The lowering script: schedule -> loop IR, one pass after another.

Set TDSL_DEBUG=2 to print the IR after every pass.
"""
from __future__ import annotations

import os
import sys

from .errors import LoweringError, TdslError, InternalError
from .ir import expr as E
from .ir import stmt as S
from .ir.expr import Range
from .passes.double_buffer import inject_double_buffer
from .passes.fuse_siblings import fuse_sibling_loops
from .passes.intrin_rules import lower_intrinsics
from .passes.legalize_bf16 import legalize_bf16
from .passes.loop_partition import loop_partition
from .passes.mma_fragments import lower_mma_fragments
from .passes.simplify import simplify_func
from .passes.storage_flatten import storage_flatten
from .passes.virtual_thread import inject_virtual_thread
from .schedule.schedule import Schedule
from .schedule.schedule_ops import schedule_to_func
from .target_kind import kind_of
from .te.regions import check_reads
from .te.scan import scan_roles
from .te.tensor import PlaceholderOp, Tensor

PASSES = [
    ("inject_double_buffer", inject_double_buffer),
    ("fuse_sibling_loops", fuse_sibling_loops),
    ("simplify", simplify_func),
    ("loop_partition", loop_partition),
    ("lower_mma_fragments", lower_mma_fragments),
    ("storage_flatten", storage_flatten),
    ("simplify", simplify_func),
    ("legalize_bf16", legalize_bf16),
]


def _gpu_passes():
    # virtual threads after thread_sync: its barriers (placed as if they were threads) are
    # where the interleaving of virtual threads must meet
    from .passes.gpu import gpu_storage_scope, split_kernels
    from .passes.thread_sync import thread_sync
    return [("gpu_storage_scope", gpu_storage_scope), ("thread_sync", thread_sync),
            ("inject_virtual_thread", inject_virtual_thread), ("split_kernels", split_kernels)]


def _cpu_passes(sched):
    """Virtual threads of a schedule that binds no GPU loops run interleaved on the CPU
    (a GPU schedule keeps them for the GPU passes, where barriers exist)."""
    return [] if binds_threads(sched) else [("inject_virtual_thread", inject_virtual_thread)]


def binds_threads(sched) -> bool:
    """Whether any loop of the schedule is bound to blockIdx/threadIdx."""
    return any(a.thread is not None and a.thread.thread_tag != "vthread"
               for st in sched.stages for a in st.iter_var_attrs.values())


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
    # a function lowered for no target gets the rules of the one it is built for
    rules = [] if target is None and _current_target() is None else \
        [("lower_intrinsics", lambda f: lower_intrinsics(f, kind))]
    func = _run(start, PASSES + rules + (_gpu_passes() if gpu else _cpu_passes(s)),
                "schedule_ops")
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
    rules = [("lower_intrinsics", lambda f: lower_intrinsics(f, kind))] \
        if func.attrs.get("intrinsics_lowered_for") != kind and "kernels" not in func.attrs else []
    if gpu and "kernels" not in func.attrs:
        from .passes.gpu import check_gpu_schedule
        check_gpu_schedule(sched, kind)
        func = _run(lambda: func, rules + _gpu_passes(), "lower")
    elif rules:
        func = _run(lambda: func, rules, "lower")
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


def _run(start, passes, start_name):
    """start() and then each pass, with TDSL_DEBUG=2 printing the IR after each; errors
    that are not the user's become InternalError."""
    debug = int(os.environ.get("TDSL_DEBUG", "0") or 0)
    try:
        func = start()
        if debug >= 2:
            print(f"# after {start_name}\n{func}\n", file=sys.stderr)
        for pass_name, fn in passes:
            func = fn(func)
            if debug >= 2:
                print(f"# after {pass_name}\n{func}\n", file=sys.stderr)
    except TdslError:
        raise
    except RecursionError as e:
        raise LoweringError(f"lower: expression too deep to lower ({e})") from None
    except Exception as e:  # our bug, not the user's
        raise InternalError(f"lowering failed unexpectedly: {type(e).__name__}: {e}. "
                            "Please report this with the code that defines the schedule.") from e
    return func
