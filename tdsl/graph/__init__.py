"""The graph layer: import ONNX networks, optimize them, compile them with tdsl kernels.

    mod = tdsl.graph.from_onnx("model.onnx")
    mod = tdsl.graph.optimize(mod)
    exe = tdsl.graph.build(mod, target="llvm")
    (out,) = exe.run(input=x)
"""
from ..errors import GraphError
from .ir import Call, Const, Function, Module, TensorType, Var
from .ir.text import parse
from .frontend import from_onnx, supported_operators
from .passes import optimize, fold_constants, simplify, eliminate_dead_code, eliminate_common_subexpr, fold_batch_norm, fuse_ops
from .passes import sink_reshapes
from .passes import plan_memory
from .executor import build, Executor
from .autodiff import gradient, register_gradient

__all__ = ["GraphError", "Call", "Const", "Function", "Module", "TensorType", "Var", "parse",
           "from_onnx", "supported_operators", "optimize", "fold_constants", "simplify",
           "eliminate_dead_code", "eliminate_common_subexpr", "fold_batch_norm", "fuse_ops",
           "sink_reshapes", "plan_memory", "build", "Executor", "gradient", "register_gradient"]
