"""build(): lower a schedule and hand it to the build step of the target's kind.

Targets: "llvm" (a CPU through llvmlite; the host by default, `"llvm -mcpu=NAME"` for
another), "c" (C source compiled by the system C compiler), "cuda" (CUDA C, PTX through
NVRTC, run through pycuda or cuda-bindings) and "opencl" (OpenCL C through pyopencl). A
target is a string or a `tdsl.target.Target`. GPU builds return a `DeviceModule`; an llvm
target this machine cannot run (another architecture, a wider vector ISA) builds a
compile-only module (`get_source("asm")`, `export_library(".o")`).

Each kind's build step is a `KindBuilder` in `BUILDERS`: its code generator (lowered
function -> module) and, for llvm, a build straight from the schedule that the compile cache
can answer. `register_target_kind(kind, generate)` adds a kind: its facts to
`tdsl.target_kind`'s registry and its build step here.

Runnable LLVM builds go through the persistent compile cache twice: `jit.compile_ir` keeps
the object file of each generated IR text, and here a build of a schedule whose
fingerprint (`tdsl.fingerprint`) was built before, in any process, skips lowering and IR
generation as well. `TDSL_DEBUG` (the IR after every pass) always lowers.

Every build checks the accesses whose index is read from memory (a gather's `x[idx[i]]`);
`bounds_check=True` (or `TDSL_BOUNDS_CHECK=1` in the environment, for every build that
does not say) checks every buffer access of the generated code
(`tdsl.passes.bounds_check`). A call that meets an index outside its buffer skips that
access and raises `tdsl.BoundsError` after the kernel returns."""
from __future__ import annotations

import os
from typing import Callable, Dict, NamedTuple, Optional

from .errors import BuildError
from .ir.stmt import PrimFunc
from .lower import build_passes, lower, lower_for_target
from .target import as_target
from .target_kind import TargetKind, register_kind, unregister_kind


class KindBuilder(NamedTuple):
    """How `build` makes a module for a target kind. `generate(func, target)`: the module of
    a function lowered for the kind (`target` a `tdsl.target.Target`).
    `build_schedule(s, args, target, name, checked, schedule_key)`: the whole build of a
    schedule, or None to lower it and `generate` (the llvm kind's path through the compile
    cache; `schedule_key` as `build` was given it).
    `calls_externs`: its code can call `tdsl.extern` stages."""
    generate: Callable
    build_schedule: Optional[Callable] = None
    calls_externs: bool = False


def register_target_kind(kind: TargetKind, generate: Callable, build_schedule=None,
                         calls_externs=False, override=False) -> TargetKind:
    """Adds a target kind: its facts (a `tdsl.target_kind.TargetKind`) and its build step,
    `generate(func, target)`, the module of a function lowered for it (see `KindBuilder`).
    `override=True` replaces a kind of the same name."""
    if not callable(generate):
        raise BuildError(f"register_target_kind({getattr(kind, 'name', kind)!r}): generate must "
                         f"be a function (func, target) -> module, got {generate!r}")
    register_kind(kind, override)
    BUILDERS[kind.name] = KindBuilder(generate, build_schedule, calls_externs)
    return kind


def unregister_target_kind(name: str) -> None:
    """Drops the kind `name` and its build step, if they are registered."""
    unregister_kind(name)
    BUILDERS.pop(name, None)


def builder_of(kind: str) -> KindBuilder:
    b = BUILDERS.get(kind)
    if b is None:
        raise BuildError(f"build: no build step is registered for target kind {kind!r} "
                         "(tdsl.register_target_kind registers one)")
    return b


def build(s, args=None, target=None, name=None, bounds_check=None, schedule_key=None):
    """Compiles schedule `s` into a callable Module for `target`; `s` may also be the
    PrimFunc of `tdsl.lower(s, args)` (its arguments are fixed then). With no target, the
    one of the enclosing `with tdsl.target.Target(...)` block, else "llvm". `bounds_check`:
    True, False, or None for the environment's `TDSL_BOUNDS_CHECK`. `schedule_key`:
    `tdsl.fingerprint.fingerprint(s, args)` where the caller took it already (the graph
    layer does, to find size classes that schedule alike), so that the compile cache does
    not walk the schedule a second time."""
    checked = _bounds_check_flag(bounds_check)
    if isinstance(target, str) and not target.strip():
        raise BuildError(f"build: target must be a string such as 'llvm', got {target!r}")
    t = as_target(target)
    builder = builder_of(t.kind)
    if isinstance(s, PrimFunc):
        if args is not None and list(args) != list(s.attrs.get("args", args)):
            raise BuildError(f"build: function '{s.name}' was lowered with its arguments; "
                             "build(func) takes no other args")
        return builder.generate(build_passes(lower_for_target(s, t.kind, name), checked), t)
    if builder.build_schedule is not None:
        mod = builder.build_schedule(s, args, t, name or "main", checked, schedule_key)
        if mod is not None:
            return mod
    if not builder.calls_externs:
        _check_externs(s, t.kind)
    return builder.generate(build_passes(lower(s, args, name or "main", target=t.kind), checked), t)


def _bounds_check_flag(value):
    if value is None:
        env = os.environ.get("TDSL_BOUNDS_CHECK", "").strip().lower()
        if env in ("", "0", "false", "no", "off"):
            return False
        if env in ("1", "true", "yes", "on"):
            return True
        raise BuildError(f"build: the environment variable TDSL_BOUNDS_CHECK must be 0 or 1, "
                         f"got {env!r}")
    if not isinstance(value, bool):
        raise BuildError(f"build: bounds_check must be True, False or None, got {value!r}")
    return value


def _extern_names(s):
    from .te.extern import ExternOp
    return sorted({st.op.call.name for st in s.stages
                   if isinstance(st.op, ExternOp) and st.op.call is not None})


def _check_externs(s, kind):
    names = _extern_names(s)
    if names:
        callers = [k for k, b in BUILDERS.items() if b.calls_externs]
        raise BuildError(f"build: target '{kind}' cannot call extern functions "
                         f"({', '.join(names)}); tdsl.extern stages build for "
                         f"{' or '.join(repr(k) for k in callers)} only")


def _build_key_extras(s):
    """What a build reads besides the schedule: the registrations its extern stages call
    (each has its own linker symbol) and the intrinsic lowering rules."""
    from .passes import intrin_rules
    from .runtime import extern
    return ([extern.lookup(n).symbol for n in _extern_names(s)], intrin_rules.digest())


def _build_llvm(s, args, t, name, checked, key=None):
    """A runnable llvm build through the compile cache (None for a compile-only target);
    `key`: the fingerprint of (s, args) if the caller has it."""
    if not t.runs_here:
        return None
    from .codegen import llvm
    from .codegen.llvm import jit
    from .runtime import diskcache, threadpool
    tgt = llvm.parse_target(t)
    fp = None
    if diskcache.enabled() and not int(os.environ.get("TDSL_DEBUG", "0") or 0):
        from .fingerprint import fingerprint
        if key is None:
            key = fingerprint(s, args)
        # the worker pool's availability changes the generated IR; checked builds never
        # share an entry with unchecked ones
        if key is not None:
            fp = fingerprint(key, name, threadpool.load_into_jit(), _build_key_extras(s),
                             *(("bounds_check",) if checked else ()))
        if fp is not None:
            mod = jit.load_build(fp, tgt)
            if mod is not None:
                return llvm.keep_externs(mod)
    mod = llvm.build(build_passes(lower(s, args, name, target="llvm"), checked), tgt)
    if fp is not None:
        jit.remember_build(fp, tgt, mod)
    return mod


# ------------------------------------------------------------------- the shipped kinds' steps
# (the code generators are imported when first used: `import tdsl` stays light)

def _generate_llvm(func, t):
    if t.runs_here:
        from .codegen import llvm
        return llvm.build(func, t)
    from .codegen.llvm import cross
    return cross.build(func, t)


def _generate_c(func, t):
    from .codegen import source_build
    return source_build.build_c(func)


def _generate_cuda(func, t):
    from .codegen import source_build
    return source_build.build_cuda(func)


def _generate_opencl(func, t):
    from .codegen import source_build
    return source_build.build_opencl(func)


BUILDERS: Dict[str, KindBuilder] = {
    "llvm": KindBuilder(_generate_llvm, _build_llvm, calls_externs=True),
    "c": KindBuilder(_generate_c),
    "cuda": KindBuilder(_generate_cuda),
    "opencl": KindBuilder(_generate_opencl),
}
