"""Graph passes, Module -> Module, one module per pass (fold, simplify, eliminate, fuse), run
in order by `optimize` (pipeline.py); and the memory plan of a fused module (memory.py)."""
from .eliminate import eliminate_common_subexpr, eliminate_dead_code
from .float16 import float16_in_float32
from .fold import fold_batch_norm, fold_constants
from .fuse import fuse_ops
from .memory import plan_memory
from .pipeline import optimize, specialize
from .qdq import quantized_operators
from .simplify import simplify, sink_reshapes

__all__ = ["optimize", "specialize", "float16_in_float32", "fold_constants", "fold_batch_norm", "simplify",
           "sink_reshapes", "eliminate_common_subexpr", "eliminate_dead_code", "fuse_ops",
           "plan_memory", "quantized_operators"]
