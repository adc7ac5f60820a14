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
from .passes.loop_partition import loop_partition
from .passes.simplify import simplify_func
from .passes.storage_flatten import storage_flatten
from .schedule.schedule import Schedule
from .schedule.schedule_ops import schedule_to_func
from .te.tensor import PlaceholderOp, Tensor

PASSES = [
    ("simplify", simplify_func),
    ("loop_partition", loop_partition),
    ("storage_flatten", storage_flatten),
    ("simplify", simplify_func),
]

GPU_TARGETS = ("cuda", "opencl")


def _gpu_passes():
    from .passes.gpu import gpu_storage_scope, split_kernels
    from .passes.thread_sync import thread_sync
    return [("gpu_storage_scope", gpu_storage_scope), ("thread_sync", thread_sync),
            ("split_kernels", split_kernels)]


def binds_threads(sched) -> bool:
    """Whether any loop of the schedule is bound to blockIdx/threadIdx."""
    return any(a.thread is not None for st in sched.stages for a in st.iter_var_attrs.values())


def target_kind(target) -> str:
    """'llvm', 'c', 'cuda' or 'opencl' from a target string (None means 'llvm')."""
    if target is None:
        return "llvm"
    kind = getattr(target, "kind", None)    # a tdsl.target.Target
    if kind is not None:
        return kind
    if not isinstance(target, str) or not target.strip():
        raise LoweringError(f"target must be a string such as 'llvm' or 'cuda', got {target!r}")
    return target.split()[0]


def default_args(sched: Schedule):
    """The placeholders read by the schedule, then its outputs."""
    ins = [st.op.output for st in sched.stages if isinstance(st.op, PlaceholderOp)
           and any(st in sched.producers(c) for c in sched.stages)]
    outs = [sched.stage_map[op].origin_op.output for op in sched.outputs]
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
    are inserted and the kernels are recorded in `func.attrs["kernels"]`."""
    if not isinstance(s, Schedule):
        raise LoweringError(f"lower: expected a schedule from tdsl.create_schedule, got {s!r}")
    if args is None:
        args = default_args(s)
    if not isinstance(args, (list, tuple)):
        raise LoweringError(f"lower: args must be a list of tensors and vars, got {args!r}")
    if not isinstance(name, str) or not name.isidentifier():
        raise LoweringError(f"lower: the name must be an identifier, got {name!r}")
    debug = int(os.environ.get("TDSL_DEBUG", "0") or 0)
    kind = target_kind(target)
    passes = list(PASSES)
    if kind in GPU_TARGETS or (kind == "c" and binds_threads(s)):
        from .passes.gpu import check_gpu_schedule
        check_gpu_schedule(s, kind)
        passes += _gpu_passes()
    try:
        func = schedule_to_func(s, list(args), name)
        func.attrs["size_ranges"] = _size_ranges(func)
        if debug >= 2:
            print(f"# after schedule_ops\n{func}\n", file=sys.stderr)
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
    func.attrs["target"] = kind
    return func
