"""The tensor-expression layer (L0): what users define computations with."""
from .tensor import IterVar, Operation, PlaceholderOp, ComputeOp, Tensor
from .compute import *  # noqa: F401,F403
from .compute import (var, size_var, placeholder, compute, reduce_axis, thread_axis, comm_reducer,
                      sum, prod, max, min, all, any, exp, log, sqrt, rsqrt, tanh, sigmoid, erf,
                      floor, ceil, round, sin, cos, exp2, log2, trunc, abs, power, if_then_else,
                      select, const, cast, THREAD_TAGS)
from .compute import (exp10, log10, log1p, expm1, tan, asin, acos, atan, sinh, cosh, asinh, acosh,
                      atanh, nearbyint, atan2, hypot, copysign, fmod, ldexp, isnan, isinf,
                      isfinite, popcount, clz, bitwise_and, bitwise_or, bitwise_xor, bitwise_not,
                      shift_left, shift_right, min_value, max_value)
from .tensor import TensorSlice
from .scan import ScanOp, scan
from .update import UpdateOp, update
from .extern import ExternOp, PackedCall, extern, call_packed
from .autodiff import gradient

__all__ = [
    "IterVar", "Operation", "PlaceholderOp", "ComputeOp", "Tensor", "var", "size_var",
    "placeholder", "compute", "reduce_axis", "thread_axis", "comm_reducer", "sum", "prod",
    "max", "min", "all", "any", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf",
    "floor", "ceil", "round", "sin", "cos", "exp2", "log2", "trunc", "abs", "power",
    "if_then_else", "select", "const", "cast", "THREAD_TAGS", "exp10", "log10", "log1p",
    "expm1", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
    "nearbyint", "atan2", "hypot", "copysign", "fmod", "ldexp", "isnan", "isinf", "isfinite",
    "popcount", "clz", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "shift_left",
    "shift_right", "min_value", "max_value", "TensorSlice", "ScanOp", "scan", "UpdateOp", "update", "ExternOp",
    "PackedCall", "extern", "call_packed", "gradient",
]
