"""`tdsl.tir`: TVM's `tvm.tir` names over tdsl's levels below, for code written against
TVM: the imperative `ir_builder`, intrinsic calls (`call_intrin`, `call_pure_extern`,
`call_extern`), `CallEffectKind`, and the division names (`floordiv`, `truncmod`, ...)."""
from . import ir_builder
from ..ir.division import floordiv, floormod, truncdiv, truncmod, indexdiv, indexmod
from ..ir.expr import call_pure_extern, Var, const, likely
from ..ir.op import CallEffectKind, call_intrin
from ..ir.stmt import Buffer, For, ForKind, IfThenElse, BufferStore, Allocate, SeqStmt, Evaluate, LetStmt
from ..ir.expr import BufferLoad, Call, Cast, Select
from ..te.compute import if_then_else


def call_extern(dtype, func_name, *args):
    """TVM's `tir.call_extern`: a call of the C function `func_name`; tdsl treats it as
    `call_pure_extern` (the function may be called once per vector lane, or not at all
    when its value is unused)."""
    return call_pure_extern(dtype, func_name, *args)


__all__ = [
    "ir_builder", "floordiv", "floormod", "truncdiv", "truncmod", "indexdiv", "indexmod",
    "call_pure_extern", "call_extern", "call_intrin", "CallEffectKind", "Var", "const",
    "likely", "if_then_else", "Buffer", "For", "ForKind", "IfThenElse", "BufferStore",
    "Allocate", "SeqStmt", "Evaluate", "LetStmt", "BufferLoad", "Call", "Cast", "Select",
]
