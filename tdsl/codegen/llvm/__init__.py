"""The LLVM backend: loop IR (`PrimFunc`) -> LLVM IR (llvmlite) -> a callable `Module`.

Entry point: `build(func, target="llvm") -> tdsl.runtime.module.Module`.
`codegen(func, target)` gives the unoptimised LLVM IR text, the call signature and the
notes without compiling; `jit` compiles (O2, new pass manager) and caches by that text,
and `tdsl.runtime.cpu` loads the object file. `cross.build` makes compile-only modules for
targets this machine cannot run.

The ABI of the generated function `tdsl_<name>` (C calling convention):

    int32_t tdsl_<name>(T0 *p0, T1 *p1, ..., int64_t n, double alpha, ...)

one argument per `func.params` entry in order: a buffer is a pointer to its first element
(row-major, contiguous; `bool` is one byte), an integer or bool scalar an `int64_t`, a float
scalar a `double`. The return value is 0, or 1 when a heap allocation failed. Every module
also defines `int32_t __tdsl_num_threads` (threads used by parallel loops; the runtime sets
it) and `const char *__tdsl_signature(void)` (the JSON signature, `codegen.signature`).

The package, one seam per module:
- `types`: LLVM types of dtypes and value helpers;
- `irscan`, `lanes`: IR scans, and the lane analysis that decides whether a vectorized
  loop becomes vector IR (`vector_legality`);
- `module`: the llvmlite module, target attributes, declarations, module globals;
- `exprs`, `intdiv`, `intrinsics`, `memory`: expressions (scalar or vector), integer
  division, math intrinsics, loads/stores/allocations;
- `emitter`: statements and loops; `parallel`: outlined parallel loops and the fork-join;
- `machine`: the llvmlite target machines of a `tdsl.target.Target`;
- `jit`: IR -> optimised object file, the object and build caches, the JIT module backend;
  `cross`: compile-only modules.
"""
from __future__ import annotations

import json
from typing import List

from llvmlite import ir

from ... import dtype as dt
from ...errors import BuildError, InternalError
from ...ir import stmt as S
from ..signature import make_signature
from .emitter import FunctionEmitter
from .lanes import vector_legality
from .machine import parse_target
from .memory import ALLOCA_MAX_BYTES
from .module import ModuleBuilder
from .types import I32, I64, PTR, abi_type, sanitize, scalar_type

__all__ = ["build", "codegen", "last_notes", "make_signature", "parse_target",
           "vector_legality", "ALLOCA_MAX_BYTES"]

_last_notes: List[str] = []


def last_notes() -> List[str]:
    """Notes from the most recent codegen (loops that fell back to serial, ...)."""
    return list(_last_notes)


def _bind_params(em, func, fn):
    """Binds the function's parameters: buffers (noalias pointers) and scalars (narrowed
    from their ABI type)."""
    for p, a in zip(func.params, fn.args):
        a.name = sanitize(p.name)
        if isinstance(p, S.Buffer):
            a.add_attribute("noalias")
            em.bufs[p] = a
            continue
        v = a
        if p.dtype == "bfloat16":
            v = em.cast(a, "float64", "bfloat16")
        elif dt.is_float(p.dtype):
            if p.dtype != "float64":
                v = em.builder.fptrunc(a, scalar_type(p.dtype))
        elif p.dtype == "bool":
            v = em.builder.icmp_unsigned("!=", a, ir.Constant(I64, 0))
        elif dt.bits(p.dtype) < 64:
            v = em.builder.trunc(a, scalar_type(p.dtype))
        em.env[p] = v


def codegen(func: S.PrimFunc, target="llvm"):
    """Returns (unoptimised LLVM IR text, signature dict, notes) for `func`."""
    if not isinstance(func, S.PrimFunc):
        raise BuildError(f"build() needs a PrimFunc, got {type(func).__name__}")
    tgt = parse_target(target)
    mb = ModuleBuilder(func, tgt)
    sig = make_signature(func, mb.symbol)
    arg_types = [PTR if isinstance(p, S.Buffer) else abi_type(p.dtype) for p in func.params]
    fn = ir.Function(mb.module, ir.FunctionType(I32, arg_types), mb.symbol)
    mb.add_fn_attrs(fn)
    em = FunctionEmitter(mb, fn)
    _bind_params(em, func, fn)
    try:
        em.stmt(func.body)
    except (TypeError, ValueError, AssertionError, AttributeError, KeyError) as e:
        if isinstance(e, BuildError):
            raise
        raise InternalError(f"the LLVM backend failed on function {func.name!r}: "
                            f"{type(e).__name__}: {e}. This is a tdsl bug; please report it "
                            "with the code that built this function.") from e
    em.finish()
    mb.num_threads_global  # always present: the runtime sets it
    if mb.externs:
        sig["externs"] = sorted(mb.externs)
    mb.add_signature(json.dumps(sig, separators=(",", ":")))
    global _last_notes
    _last_notes = list(mb.notes)
    return str(mb.module), sig, mb.notes


def build(func: S.PrimFunc, target="llvm"):
    """Compiles `func` for the CPU and returns a callable `tdsl.runtime.module.Module`."""
    from . import jit
    from ...runtime.module import Module
    tgt = parse_target(target)
    ir_text, sig, notes = codegen(func, tgt)
    art = jit.compile_ir(ir_text, tgt, sig["symbol"])
    mod = Module(sig, jit.JITBackend(art, sig))
    mod.notes = list(notes)
    return keep_externs(mod)


def keep_externs(mod):
    """Ties the registrations a module calls to it (the registry never drops them either:
    this is what a reader of the module sees), and checks they are still registered."""
    from ...runtime import extern
    mod.externs = {name: extern.lookup(name) for name in mod.signature.raw.get("externs", ())}
    return mod
