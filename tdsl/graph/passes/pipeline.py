"""Graph passes. Each is a function Module -> Module (new expressions; the input is left as
it is). `optimize` runs them in order:

quantized_operators -> simplify -> fold_constants -> fold_batch_norm -> float16_in_float32
-> conv1d_as_conv2d -> simplify -> fold_constants -> drop_padding_taps -> split_padding_bands
-> transposed_conv_as_phases -> sink_reshapes -> row_pools_as_2d -> simplify -> eliminate_common_subexpr
-> eliminate_dead_code -> blocked_layout, fuse_attention (with a CPU target) -> fuse_ops
"""
from __future__ import annotations

from ...errors import GraphError
from ...target import as_target
from ..ir import Module
from .attention import fuse_attention
from .layout import blocked_layout
from .conv_forms import (conv1d_as_conv2d, drop_padding_taps, row_pools_as_2d, split_padding_bands,
                         transposed_conv_as_phases)
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
    float multiply-adds first (int8_float.py; with them, only convs of one input channel),
    and each attention over many keys becomes one `nn.attention` (attention.py).
    Without a target the fused module keeps its unfused form, so that `graph.build` can
    still make those choices for the target it builds for (`specialize`)."""
    if not isinstance(mod, Module):
        raise GraphError(f"optimize: expected a tdsl.graph.Module, got {type(mod).__name__}")
    for p in (quantized_operators, simplify, fold_constants, fold_batch_norm, float16_in_float32,
              conv1d_as_conv2d, simplify, fold_constants, drop_padding_taps, split_padding_bands,
              transposed_conv_as_phases, sink_reshapes, row_pools_as_2d, simplify, eliminate_common_subexpr,
              eliminate_dead_code):
        mod = p(mod)
    if target is not None:
        return _stamped(_for_target(mod, as_target(target), fuse))
    if not fuse:
        return _stamped(mod)
    fused = fuse_ops(mod)
    return _stamped(Module(fused.main, {**fused.info, UNSPECIALIZED: mod}))


# Module.info key of every module `optimize` returns: its weights may be folded into new
# constants (batch norms into convs, transposes, packed layouts), so the initializers no
# longer name what the module computes with (graph.gradient refuses such a module)
OPTIMIZED = "optimized"


def _stamped(mod):
    return Module(mod.main, {**mod.info, OPTIMIZED: True})


def specialize(mod: Module, target) -> Module:
    """`mod` as `optimize(..., target=target)` would have made it, when it came from
    `optimize` without a target (and `target` has choices to make); else `mod`."""
    unfused = mod.info.get(UNSPECIALIZED)
    if unfused is None or as_target(target).kind != "llvm":
        return mod
    return _stamped(_for_target(unfused, as_target(target), True))


UNSPECIALIZED = "optimized without a target"     # Module.info key: the module before fusion


def _for_target(mod, t, fuse):
    if t.kind == "llvm":
        mod = integer_products_in_float(mod, one_channel_only=t.has_vnni)
        mod = blocked_layout(mod, t.vector_lanes("float32"), int8=t.has_vnni)
        mod = fuse_attention(mod, target=t)
    return fuse_ops(mod) if fuse else mod
