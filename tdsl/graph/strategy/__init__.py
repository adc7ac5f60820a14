"""Operator strategies: turn a fused group (a primitive `Function`) into one tdsl kernel.

Every operator has implementations in a registry (registry.py, TVM's OpStrategy; the
shipped ones in implementations.py): each says which operators it defines and when, its
tensor expression, its schedule per target family and its priority. A group's nodes are
defined by the implementation of the highest priority that takes them (groupdef.py), and
the group is scheduled by the first implementation that takes it: the schedule of its
anchor (the node whose definition has a schedule), one that finds the stages it needs by
their tags (tag.py), or the fallback (topi's definitions, the auto-scheduler's rules).

* llvm: the output stage is parallel over its outer axes and vectorized along the last
  one; elementwise producers are inlined into it; conv2d (NCHW[x]c inner kernel with x the
  target's vector lanes, weights packed (CO/x, CI, KH, KW, x)) and dense (register-blocked,
  packed weights, `cpu/dense.py`) get the schedules of `tdsl.examples`, with the group's
  epilogue (bias, activation, residual add) computed in the same loop nest. Every size
  (vector width, register tile, channel block) comes from the target description through
  `tdsl.tiling`. The blocked conv (`conv_blocked`) takes any spatial rank (conv3d; conv1d
  arrives as a conv2d one row high, passes/conv_forms.py) and transposed convs (groups 1:
  a blocked conv of the input spread on the stride grid). Other conv shapes have their own
  modules in cpu/, chosen by `conv_choice.conv_path`: 1x1 convs vectorized along the
  flattened image (`conv1x1`), stems and convs whose blocked tile would be too small
  vectorized along the output row (`conv_spatial`), 1x1-image convs as mat-vec products
  and global average pool (`squeeze`), grouped and depthwise convs as register tiles of
  group channels x rows x row vectors over a column-phase-split padded input
  (`conv_grouped`; `conv_direct.depthwise_strided` only when the weights are not
  constants, other direct convs a row at a time). 2-D max and average pools are two
  separable passes without gathers per tap (`pool`).
* cuda / opencl (gpu/, sized by the target's threads and shared memory per block): a
  conv with groups 1 and a kernel larger than 1x1 (or a 1x1 conv of a small image) is one
  GEMM over a column buffer (`conv_gemm`: the batch and the image one axis of the GEMM,
  the epilogue a kernel reading it at the output's indices); another conv (not
  depthwise), dense or matmul is a tiled GEMM (`contraction`: a block per output tile, a
  register tile per thread, operand slices staged in shared memory per reduction step)
  with the group's epilogue applied by the thread holding the accumulator, one kernel;
  softmax and layer norm reduce each row across a block's
  threads (`rows`); pools, depthwise convs and elementwise chains are one output per
  thread with the reductions that make it computed in a register (`flat`).
* anything else `tdsl.build` knows ("c"): the llvm definitions with the fallback's
  schedule, without vectorize/parallel.

`register(Implementation(...))` adds an implementation (`registered(...)` for the length
of a `with` block); `register_schedule(target_kind, fn, family)` plugs a schedule for a
new target; family "gpu" gives its groups the definitions the GPU schedules take
(`register_schedule("c", schedule_gpu, "gpu")` runs the GPU strategies on the emulated
GPU of "c").

Imports point down: dispatch -> groupdef -> implementations -> the cpu/ and gpu/ modules
and fallback -> cpu/loops, stages, tag, topi, registry; cpu/generic (kernels generic in the
channel count) builds a GroupDef, and groupdef reads only the erasure types (erasure.py).
"""
from . import tag
from .dispatch import AUTO_FALLBACKS, SCHEDULES, Kernel, compile_group, register_schedule, tune_group
from .registry import Anchor, Implementation, implementations, register, registered, unregister

__all__ = ["AUTO_FALLBACKS", "SCHEDULES", "Anchor", "Implementation", "Kernel", "compile_group", "implementations",
           "register", "register_schedule", "registered", "tag", "tune_group", "unregister"]
