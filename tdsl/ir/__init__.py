"""The loop IR (L2) and the expression grammar shared with tensor expressions."""
from .expr import *  # noqa: F401,F403
from .expr import Range, Expr, Var, IntImm, FloatImm
from .stmt import (Buffer, Stmt, For, ForKind, LetStmt, IfThenElse, BufferStore, Allocate,
                   SeqStmt, Evaluate, Barrier, AsyncCommit, Prefetch, ExternCall, PrimFunc, seq)
from .visitor import Mutator, walk, substitute, free_vars
from .op import (CallEffectKind, register_op_attr, get_op_attr, register_intrin_lowering,
                 remove_intrin_lowering, call_intrin)

__all__ = [
    "Range", "Expr", "Var", "IntImm", "FloatImm", "Buffer", "Stmt", "For", "ForKind", "LetStmt",
    "IfThenElse", "BufferStore", "Allocate", "SeqStmt", "Evaluate", "Barrier", "AsyncCommit",
    "Prefetch", "ExternCall", "PrimFunc", "seq", "Mutator", "walk", "substitute", "free_vars",
    "CallEffectKind", "register_op_attr", "get_op_attr", "register_intrin_lowering",
    "remove_intrin_lowering", "call_intrin",
]

from . import printer as _printer

# The printer reads the node classes, so the node modules cannot import it for their text:
# it is attached here, before any node can be printed (importing a node module runs this).
Expr.__str__ = Expr.__repr__ = _printer.expr_str
Stmt.__str__ = Stmt.__repr__ = _printer.stmt_str
PrimFunc.script = _printer.func_str
