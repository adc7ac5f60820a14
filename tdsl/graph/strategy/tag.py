"""The tags of the graph layer's tensor expressions (TOPI's tag.py): what a schedule needs to
know about a stage travels as the `tag` of its compute (`tdsl.compute(..., tag=...)`) and
what the tag names as its `attrs` (`stage.op.attrs`).

Anchors: the stage a definition of cpu/ returns (`GroupDef.anchor`) and that its schedule
reads, with the stages and sizes it chose:

* CONV_BLOCKED: the blocked NCHW[x]c conv (cpu/conv_blocked.py); attrs conv, pad (None: the
  input read as it is), ow, bn, in_blocked, taps and, for a tile along the flattened output
  plane, tile and view.
* DEPTHWISE_BLOCKED: the blocked depthwise conv, float or int8; attrs conv, xb, rb, bn.
* CONV_WGRAD: a conv's weight adjoint as a GEMM per tap (cpu/conv_wgrad.py); attrs conv
  (the (KH, KW, rows, cols) product), packs (the channels-last data and adjoint), swap
  (rows are the data's channels).
* CONV_WGRAD_DEPTHWISE: a depthwise conv's weight adjoint (cpu/conv_wgrad_depthwise.py);
  attrs lanes_sum (the per-tap vectors of partial sums).
* CONV1X1: the 1x1 conv as a GEMM along the flattened image (cpu/conv1x1.py); attrs conv,
  pack (None: the image read in place), cb, pv, lanes.
* CONV_ROWS: the direct conv vectorized along the output row (cpu/conv_spatial.py); attrs
  conv, pad, cb, pv, lanes.
* CONV_GROUPED: grouped and depthwise convs (cpu/conv_grouped.py); attrs conv, pad, cb, rb,
  pv, wv, lanes, blocks, cig, sh, redo.
* MATVEC: a conv of a 1x1 image as a matrix-vector product (cpu/squeeze.py); attrs dense,
  lanes.
* DENSE_PACKED: dense with packed weights (cpu/dense.py); attrs dense, lanes.
* QCONV2D_VNNI, QCONV2D_INT32: the integer conv with or without VNNI (cpu/conv_int8.py);
  attrs conv, pad, ow, blocked (the root stage of a ragged last channel block, or None).
* QMATMUL_VNNI: the integer matmul (cpu/matmul_int8.py); attrs sum, blocked, tile.
* GLOBAL_POOL, GLOBAL_POOL_BLOCKED: global average pools (cpu/squeeze.py); attrs cols and
  sum, or part and sum.
* POOL_SEP: 2-D pools as two separable passes (cpu/pool.py); attrs col, row (or None).
* MAX_POOL_GRAD: a 2-D max pool's adjoint gathered from its covering windows
  (cpu/pool_grad.py); attrs ymax (the window maxima), chosen (each window's first maximum).

Stages that schedules find by their tag, wherever they are in a group:

* CONV_GENERIC: a direct conv (topi_nn.conv_generic, cpu/conv_direct.depthwise_strided);
  attrs pad (the padded input stage, or None), depthwise.
* DENSE_GENERIC, MATMUL: topi's dense and (integer) matmul.
* SOFTMAX, LAYER_NORM: the last stage of a softmax or a layer norm; attrs axis.
* ATTENTION: the output of `nn.attention` (topi_attention.py); attrs dot, scores, max, exp,
  sum, acc (its stages, for cpu/attention.py).
* INTERP: an interpolation along one axis (topi_index); attrs axis.
* CONV_GEMM: the GPU's conv as a GEMM over a column buffer (gpu/conv_gemm.py).
* ROOT: a small stage computed once per call at root, never inlined into its reader (the
  packed weights times a channel scale, groupdef.py).
"""

CONV_BLOCKED = "conv2d_packed"
DEPTHWISE_BLOCKED = "depthwise_blocked"
CONV1X1 = "conv1x1_spatial"
CONV_WGRAD = "conv_wgrad"
CONV_WGRAD_DEPTHWISE = "conv_wgrad_depthwise"
CONV_ROWS = "conv_rows_spatial"
CONV_GROUPED = "conv_grouped"
MATVEC = "matvec"
DENSE_PACKED = "dense_packed"
QCONV2D_VNNI = "qconv2d_vnni"
QCONV2D_INT32 = "qconv2d_int32"
QMATMUL_VNNI = "qmatmul_vnni"
GLOBAL_POOL = "global_pool"
GLOBAL_POOL_BLOCKED = "global_pool_blocked"
POOL_SEP = "pool_sep"
MAX_POOL_GRAD = "max_pool_grad"

CONV_GENERIC = "conv_generic"
DENSE_GENERIC = "dense_generic"
MATMUL = "matmul"
SOFTMAX = "softmax"
LAYER_NORM = "layer_norm"
ATTENTION = "attention"
INTERP = "interp"
CONV_GEMM = "conv_gemm"
ROOT = "root"


def mark(t, kind, **attrs):
    """Tags the compute of tensor `t` as `kind` with `attrs` added (they may name `t`
    itself: a conv that is its own anchor) and returns `t`."""
    t.op.tag = kind
    t.op.attrs.update(attrs)
    return t
