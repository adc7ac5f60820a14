"""The loop IR (L2) and the expression grammar shared with tensor expressions."""
from .expr import *  # noqa: F401,F403
from .expr import Range, Expr, Var, IntImm, FloatImm
from .stmt import (Buffer, Stmt, For, ForKind, LetStmt, IfThenElse, BufferStore, Allocate,
                   SeqStmt, Evaluate, Barrier, PrimFunc, seq)
from .visitor import Mutator, walk, substitute, free_vars
