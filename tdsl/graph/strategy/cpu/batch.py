"""Image strategies in a group with a symbolic batch (a CNN exported with a dynamic batch
axis): the CPU's conv and pool definitions take the batch, the outermost axis, as a size
variable of the kernel while every other size stays a number, so their register tiles,
packed weights and padding are those of the static network. The batch then only bounds
a loop of images outside the loop the threads split (`outer_fuse`; a static batch above 1
too): no tail, no guard, no stride that depends on it, and each image's loop nest is
batch 1's. A symbolic channel count, height or width is not taken (`batch_only` refuses
it): such groups take topi's definitions."""
from __future__ import annotations

from .. import topi
from ..stages import ishape


def batch_only(g, n) -> bool:
    """Whether every size of node `n`'s operands and result but the leading (batch) one
    is a number; always so in a group without symbolic sizes."""
    if not g.symbolic:
        return True
    return all(isinstance(d, int) for t in [a.type for a in n.args] + [n.type] for d in t.shape[1:])


def batch(g, e):
    """The batch (leading size) of expression `e`'s type in the kernel: an int, or the index
    expression of its size variables in a group with symbolic sizes."""
    return g.node_type(e).shape[0]


def te_batch_only(t) -> bool:
    """Whether every axis of tensor `t` but the first has a size that is a number (a
    tagged schedule's check, which sees only the tensors)."""
    return all(isinstance(d, int) or getattr(d, "value", None) is not None for d in t.shape[1:])


def symbolic_batch(t) -> bool:
    """Whether tensor `t`'s leading axis has a size that is not a number."""
    d = t.shape[0]
    return not isinstance(d, int) and getattr(d, "value", None) is None


def outer_fuse(s, t, axes):
    """The loop the threads split, fused from stage `t`'s outer `axes` (the batch first).
    A batch other than 1 (a symbolic one too) stays a serial loop outside it: fused in,
    the other axes' indices would be divisions and remainders of the fused loop, through
    which bound inference cannot see that a stage computed inside the loop stays in its
    bounds, so every multiply-add of a register tile would be guarded (or a tile's extent
    would not be a number). The batch is split into images and a unit loop, and the unit
    loop fused in its place: each image's loop nest is then that of batch 1, and each
    image forks the threads once per kernel."""
    if symbolic_batch(t) or topi.dim(t.shape[0]) != 1:
        _, one = s[t].split(axes[0], factor=1)
        axes = [one] + list(axes[1:])
    return s[t].fuse(*axes)


def image_shape(t):
    """`t`'s shape as ints for a heuristic that weighs the work of one image's loop: a
    batch other than 1 is a loop outside it (outer_fuse), so the batch reads as 1."""
    shape = ishape(t)
    return [1] + shape[1:] if symbolic_batch(t) or shape[0] != 1 else shape


def parallel(s, t, fused, work, threshold):
    """Threads over `fused` (one image's loop, outer_fuse) when one image's `work` is at
    least `threshold`; else over the images, where they may be several and worth it (a
    symbolic batch: at batch 1 a loop of one task runs inline, as a serial loop)."""
    if work >= threshold:
        s[t].parallel(fused)
        return
    n = None if symbolic_batch(t) else topi.dim(t.shape[0])
    if n is None or n > 1 and work * n >= threshold:
        s[t].parallel(s[t].leaf_iter_vars[0])


class _ImageWeights:
    """Image `b`'s weights of per-image weights `w` (a leading batch axis)."""

    def __init__(self, w, b):
        self.w, self.b = w, b

    def __getitem__(self, idx):
        return self.w[(self.b,) + (tuple(idx) if isinstance(idx, tuple) else (idx,))]


def image_weights(w, ndim, b):
    """Packed weights `w` of `ndim` axes as image `b` reads them: `w` itself, or, where a
    per-image channel scale went into them (GroupDef.packed_param with a symbolic batch),
    image b's."""
    return w if len(w.shape) == ndim else _ImageWeights(w, b)
