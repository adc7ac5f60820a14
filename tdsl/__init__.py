"""tdsl: a Python-embedded tensor compiler.

Define computations with `compute`/`placeholder`, schedule them with `create_schedule`,
inspect them with `lower`, and compile them with `build`.
"""
from .errors import (TdslError, ScheduleError, LoweringError, BuildError, ArgumentError, LibraryError,
                     GraphError, InternalError, BoundsError)
from .te import (var, size_var, placeholder, compute, reduce_axis, thread_axis, comm_reducer,
                 sum, prod, max, min, all, any, exp, log, sqrt, rsqrt, tanh, sigmoid, erf, floor,
                 ceil, round, sin, cos, exp2, log2, trunc, abs, power, if_then_else, select, const,
                 cast, Tensor, IterVar, scan)
from .te import (exp10, log10, log1p, expm1, tan, asin, acos, atan, sinh, cosh, asinh, acosh,
                 atanh, nearbyint, atan2, hypot, copysign, fmod, ldexp, isnan, isinf, isfinite,
                 popcount, clz, bitwise_and, bitwise_or, bitwise_xor, bitwise_not, shift_left,
                 shift_right, min_value, max_value)
from .te import extern, call_packed, gradient, update
from .ir.expr import call_pure_extern
from .ir.division import floordiv, floormod, truncdiv, truncmod, indexdiv, indexmod
from .runtime.extern import register_func
from .passes.intrin_rules import register_intrin_lowering, remove_intrin_lowering
from .te.tensor_intrin import decl_tensor_intrin, TensorIntrin, Region  # noqa: E402
from .te import intrin_x86  # noqa: E402,F401  (registers the shipped CPU tensor intrinsics: VNNI, BF16)
from .te import intrin_cuda  # noqa: E402,F401  (registers the shipped CUDA ones: mma.sync, wgmma)
from .schedule.schedule import Schedule, create_schedule
from .schedule.stage import Stage
from .lower import lower
from .build import build, register_target_kind, unregister_target_kind
from . import utils  # noqa: E402  (get_const_tuple)
from . import contrib  # noqa: E402  (contrib.cc.create_shared: link saved object files)
from . import target  # noqa: E402  (tdsl.target.Target: the machine facts schedules read)
from . import tir  # noqa: E402  (TVM's tvm.tir names: ir_builder, call_intrin, truncdiv, ...)
from .autosched import auto_schedule  # noqa: E402  (schedules derived from the target: tdsl.autosched)
from .runtime import ndarray as nd
from .runtime.ndarray import cpu, cuda, opencl, Device

__all__ = [
    "TdslError", "ScheduleError", "LoweringError", "BuildError", "ArgumentError",
    "LibraryError", "GraphError", "InternalError", "BoundsError", "var", "size_var",
    "placeholder", "compute", "reduce_axis", "thread_axis", "comm_reducer", "sum", "prod",
    "max", "min", "all", "any", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf",
    "floor", "ceil", "round", "sin", "cos", "exp2", "log2", "trunc", "abs", "power",
    "if_then_else", "select", "const", "cast", "Tensor", "IterVar", "scan", "exp10", "log10",
    "log1p", "expm1", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
    "nearbyint", "atan2", "hypot", "copysign", "fmod", "ldexp", "isnan", "isinf", "isfinite",
    "popcount", "clz", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "shift_left",
    "shift_right", "min_value", "max_value", "extern", "call_packed", "gradient", "update",
    "call_pure_extern",
    "floordiv", "floormod", "truncdiv", "truncmod", "indexdiv", "indexmod", "tir",
    "register_func", "register_intrin_lowering", "remove_intrin_lowering", "decl_tensor_intrin",
    "TensorIntrin", "Region", "Schedule", "create_schedule", "Stage", "lower", "build",
    "register_target_kind", "unregister_target_kind", "utils", "contrib", "target",
    "auto_schedule", "nd", "cpu", "cuda", "opencl", "Device", "load_module", "__version__",
]


def load_module(path):
    """Loads a shared object written by Module.export_library; its size and checksum are
    verified first (a missing, truncated or altered file raises LibraryError)."""
    from .runtime.aot import load_module as _load
    return _load(path)


def __getattr__(name):
    # The layers above this facade load on first use: they are written against it (the
    # graph layer builds its kernels with tdsl.compute and tdsl.build), so importing them
    # here would make a circle. `import tdsl.graph` works as usual.
    if name in ("graph", "autotune"):
        import importlib
        return importlib.import_module("." + name, __name__)
    raise AttributeError(f"module 'tdsl' has no attribute {name!r}")


from .version import __version__  # noqa: E402
