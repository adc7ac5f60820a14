"""Graph passes. Each is a function Module -> Module (new expressions; the input is left as
it is). `optimize` runs them in order:

quantized_operators -> simplify -> fold_constants -> fold_batch_norm -> float16_in_float32
-> conv1d_as_conv2d -> simplify -> fold_constants -> drop_padding_taps -> split_padding_bands
-> transposed_conv_as_phases -> sink_reshapes -> simplify -> eliminate_common_subexpr
-> eliminate_dead_code -> blocked_layout (with a CPU target) -> fuse_ops
"""
from __future__ import annotations

from ...errors import GraphError
from ...target import as_target
from ..ir import Module
from .layout import blocked_layout
from .conv_forms import conv1d_as_conv2d, drop_padding_taps, split_padding_bands, transposed_conv_as_phases
from .float16 import float16_in_float32
from .eliminate import eliminate_common_subexpr, eliminate_dead_code
from .fold import fold_batch_norm, fold_constants
from .fuse import fuse_ops
from .int8_float import integer_products_in_float
from .qdq import quantized_operators
from .simplify import simplify, sink_reshapes


def optimize(mod: Module, fuse: bool = True, target=None) -> Module:
    """The standard pipeline; `fuse=False` stops before operator fusion. With a CPU
    `target` (a string or tdsl.target.Target), chains of convolutions are kept blocked by
    its vector's channels (layout.py: `blocked_layout`) before fusion; on a CPU without
    integer dot products the integer convs and matmuls of quantized networks compute with
    float multiply-adds first (int8_float.py; with them, only convs of one input channel)."""
    if not isinstance(mod, Module):
        raise GraphError(f"optimize: expected a tdsl.graph.Module, got {type(mod).__name__}")
    for p in (quantized_operators, simplify, fold_constants, fold_batch_norm, float16_in_float32,
              conv1d_as_conv2d, simplify, fold_constants, drop_padding_taps, split_padding_bands,
              transposed_conv_as_phases, sink_reshapes, simplify, eliminate_common_subexpr,
              eliminate_dead_code):
        mod = p(mod)
    if target is not None:
        t = as_target(target)
        if t.kind == "llvm":
            mod = integer_products_in_float(mod, one_channel_only=t.has_vnni)
            mod = blocked_layout(mod, t.vector_lanes("float32"), int8=t.has_vnni)
    if fuse:
        mod = fuse_ops(mod)
    return mod
