"""The process's compiled kernels, keyed by (target, group text with parameter types,
which parameters are constants): identical layers compile once per process, and groups
that differ only in a channel count can share one kernel generic in it."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Dict

from ..runtime import cpu
from .ir import Const, Function
from .ir.text import print_function
from .strategy import compile_group, registry
from .strategy.cpu import generic
from .strategy.symbolic import group_size_vars

KERNELS: Dict[tuple, object] = {}


def clear_kernel_cache():
    KERNELS.clear()


registry.on_change(clear_kernel_cache)      # kernels built with other implementations


def group_key(fn: Function, target, const_args):
    return (target, print_function(fn).split("(", 1)[1], tuple(sorted(const_args)))


def _kernel_key(fn: Function, target, const_args, tuned):
    """(key, tuned parameters, generic key, erasure): groups with one key share a kernel;
    a group that can be generic in its channel count (generic.find) can share one with
    the groups that differ from it only in that count, under the generic key."""
    key = group_key(fn, target, const_args)
    params = (tuned or {}).get(key)
    if params:
        return key + (repr(sorted(params.items())),), params, None, None
    erasure = generic.find(fn, const_args, target)
    if erasure is None:
        return key, params, None, None
    return key, params, (target, generic.key_text(fn, erasure), tuple(sorted(const_args))), erasure


def _compile(fn, target, const_args, params, erasure, bounds=None):
    with cpu.python_side():
        return compile_group(fn, target, const_args, fn.name, auto_params=params, erasure=erasure,
                             bounds=bounds)


def compile_all(calls, target, stats, tuned, bounds=None):
    """Compiles the distinct kernels of `calls` (group calls of @main) not compiled yet,
    two at a time: one thread's LLVM work runs while the other lowers its next kernel
    (tdsl's Python half runs one thread at a time, see runtime.cpu.python_side). Errors
    are raised in the order of the calls. Returns {call: kernel key}."""
    todo, keys, entries, sizes = {}, {}, [], {}
    for n in calls:
        consts = {i: a.data for i, a in enumerate(n.args) if isinstance(a, Const)}
        key, params, gkey, erasure = _kernel_key(n.op, target, consts, tuned)
        # a symbolic kernel's schedule, and which of its size classes are compiled at
        # all, follow the bounds of its sizes
        names = {s.name for s in group_size_vars(n.op)} if bounds else ()
        if names:
            suffix = tuple(sorted((k, v) for k, v in bounds.items() if k in names))
            key += suffix
            gkey = gkey + suffix if gkey is not None else None
        entries.append((n, consts, key, params, gkey, erasure))
        if gkey is not None:
            sizes.setdefault(gkey, set()).add(erasure.size)
    for n, consts, key, params, gkey, erasure in entries:
        # generic only where groups of two or more channel counts share the kernel: a
        # group alone keeps one specialized to its sizes (trip counts LLVM can see)
        if gkey is not None and len(sizes[gkey]) > 1:
            key = gkey
        else:
            erasure = None
        keys[n] = key
        if key in KERNELS:
            continue
        # a generic kernel is scheduled for its largest size: where the size decides whether
        # a loop is worth threads, the small groups then pay a fork-join, not the large ones
        # a serial loop
        if key not in todo or erasure is not None and erasure.size > todo[key][3].size:
            todo[key] = (n.op, consts, params, erasure)
    if not todo:
        return keys
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="tdsl-build") as pool:
        futures = {key: pool.submit(_compile, fn, target, *rest, bounds) for key, (fn, *rest) in todo.items()}
        try:
            for key, fut in futures.items():
                KERNELS[key] = fut.result()
                stats["compiled"] += 1
        except BaseException:
            for fut in futures.values():
                fut.cancel()
            raise
    stats["compile_s"] += time.perf_counter() - t0
    return keys
