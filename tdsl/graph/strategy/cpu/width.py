"""Image strategies whose row width is a size variable (a 1-D signal's length exported
symbolic, conv1d arriving as a conv2d of one row): the CPU's conv definitions take the
last spatial axis, like the batch (batch.py), as an index expression, every other size
a number. The static schedules run unchanged over it: the width's register tiles become
a run-time count of tiles, and the split's guard (`likely`) lets loop partitioning peel
the ragged last tile off a guard-free main loop; the blocked conv shifts its last tile
inwards instead (`row_split`, with a variant for rows narrower than a tile; a static row
that no good tile divides, a prime width, too: `shifted_row_tile`), and its threads share
the tiles of all channel blocks; a row padded to whole tiles or vectors is
padded to the run-time width rounded up. A tile that must divide a static row is chosen
for a symbolic one as for a long row (`row_tile`): its one ragged tile per row costs the
tile's work once, not a guard per tile."""
from __future__ import annotations

import sympy

import tdsl

from .... import tiling
from ....arith import simplify
from ....target import as_target

# the width a symbolic row's heuristics read where a number must stand for it: tiles for
# long rows (a signal of thousands of samples), whose tail is peeled
LONG_ROW = 1024
# how much better than the tiles that divide a static row the shifted tile must score
# (shifted_row_tile): prime rows score it 3-4x; a close call (AVX2's 5 pixels against 6 on
# a 4000-sample row) keeps the code of rows that divide well as it was
SHIFT_GAIN = 1.25


def is_number(d) -> bool:
    """Whether size `d` (a graph dimension, an int or an index expression) is a number."""
    return isinstance(d, int) or getattr(d, "value", None) is not None


def batch_and_width(g, n) -> bool:
    """Whether every size of node `n`'s operands and result but the leading (batch) and
    the row width is a number; always so in a group without symbolic sizes. The row is
    the last axis of a plain image, the one before the channel block of a blocked one
    (passes/layout.py: a blocked conv's result, and its input where `in_blocked`)."""
    if not g.symbolic:
        return True
    blocked = n.op.endswith("_blocked")
    types = [(n.args[0].type, blocked and n.attrs.get("in_blocked", False)), (n.type, blocked)]
    types += [(a.type, False) for a in n.args[1:]]
    return all(isinstance(d, int) for t, b in types for d in _fixed_sizes(tuple(t.shape), b))


def _fixed_sizes(shape, blocked):
    """The sizes of an image that must be numbers: all but the batch and the row width."""
    return shape[1:-2] + shape[-1:] if blocked else shape[1:-1]


def symbolic_width(n) -> bool:
    """Whether node `n`'s result has a row width that is not a number."""
    return isinstance(n.type.shape[-1], sympy.Expr)


def number(d) -> int:
    """Size `d` as a number for a heuristic: itself, or LONG_ROW where it is symbolic."""
    if isinstance(d, int):
        return d
    v = getattr(d, "value", None)
    return int(v) if v is not None else LONG_ROW


def row_tile(target, width, cols, max_rows=16, **kwargs):
    """(pixels, vectors) of a register tile along a row of `width` pixels by `cols`
    channels (tiling.register_tile): pixels dividing a static row (whole_rows), or, on a
    symbolic one, the best tile for a long row, ragged at its end. Of the tiles the model
    scores alike, register_tile takes the one with the fewest registers; a static row's
    divisors seldom leave it the smallest (250 pixels: 5, not 3), and on a long row the
    larger tile keeps the weights' loads per pixel and the loop overhead down, so a
    symbolic row takes the most pixels that score as well."""
    if is_number(width):
        return tiling.register_tile(target, number(width), cols, whole_rows=True, max_rows=max_rows, **kwargs)
    return _long_row_tile(target, cols, max_rows, **kwargs)


def _long_row_tile(target, cols, max_rows=16, **kwargs):
    """row_tile's (pixels, vectors) for a long row, ragged at its end."""
    rows, vecs = tiling.register_tile(target, LONG_ROW, cols, ragged_rows=1.0, max_rows=max_rows, **kwargs)
    t = as_target(target)
    regs = max(t.vector_registers, 4)

    def score(r):
        return round(tiling.tile_score(t, r, vecs, LONG_ROW, cols, ragged_rows=1.0), 6)
    best = score(rows)
    while rows < max_rows and (rows + 1) * vecs + vecs + 1 <= regs and (rows + 1) * vecs <= 3 * regs // 4 \
            and score(rows + 1) >= best:
        rows += 1
    return rows, vecs


def shifted_row_tile(target, width, cols):
    """(pixels, vectors) of the register tile of a static row alone (a 1-D signal's
    conv, a conv2d of one row) whose last tile is shifted back onto the one before
    (row_split), where that scores SHIFT_GAIN times better than every tile that divides
    the row; else None. A prime width (251, 997, 4001 samples: a signal whose length is
    not a multiple of the strides) leaves the dividing tile one pixel by a few vectors,
    too few accumulators for the FMA chains (one thread, Zen 5: 256 channels k=3 on 251
    pixels 1.08 ms against 0.37 with the shifted tile, 64 channels on 997 0.25 against
    0.10), where the shifted tile computes at most a tile's pixels twice per row. A row
    narrower than that tile keeps its own."""
    if not is_number(width):
        return None
    w, t = number(width), as_target(target)
    whole = tiling.register_tile(t, w, cols, whole_rows=True, whole_vecs=True)
    long = _long_row_tile(t, cols, whole_vecs=True)
    if long[0] > w or w % long[0] == 0:
        return None

    def score(tile, pixels):    # per pixel of the row: a shifted tile's overlap is waste
        return tiling.tile_score(t, *tile, w, cols, ragged_rows=1.0) * w / pixels
    return long if score(long, -(-w // long[0]) * long[0]) > SHIFT_GAIN * score(whole, w) else None


def known(cond) -> bool:
    """A condition of sizes that a definition branches on: a bool, or for index
    expressions, whether it simplifies to true (unknown: False)."""
    if isinstance(cond, bool):
        return cond
    v = getattr(simplify(cond), "value", None)
    return bool(v) if v is not None else False


def round_up(d, m: int):
    """Size `d` (an int or an index expression) rounded up to a multiple of `m`."""
    if isinstance(d, int):
        return -(-d // m) * m
    return tdsl.floordiv(d + (m - 1), m) * m


def row_split(g, x, xb, shift=False):
    """(pixels, tail) of the split of output row `x` by a register tile of `xb` pixels. A
    row of run-time width shifts its last tile back onto the one before (stage.split's
    tail="shift": its outputs computed twice, the same both times), so the tile's
    unrolled body is one copy with no guard; a row narrower than a tile runs the variant
    of the size class "narrow" instead, whose tile is one pixel (no tail). A static row's
    tile divides it (`x` may be a fused loop: a static plane's), or, with `shift`, the tile
    of shifted_row_tile, no wider than the row, is shifted as on a symbolic row; a kernel
    that runs with no variant in front keeps the guard."""
    ext = x.dom.extent if x.dom is not None else 0
    if is_number(ext):
        return xb, "shift" if shift else "guard"
    if g.size_class == "narrow":
        return 1, "guard"
    if xb > 1 and g.size_class is None and g.classes_run:
        g.size_classes["narrow"] = ext < xb
        return xb, "shift"
    return xb, "guard"


def row_chunks(s, t, tiles, width, tasks, target):
    """([the loop of chunks], the loop of tiles in a chunk) of stage `t`'s loop `tiles`
    over a row's tiles: on a row of symbolic `width`, as many chunks as make the parallel
    loop's `tasks` (the channel blocks) tiling.parallel_chunks, each a run-time share of
    the row; on a static one, ([], `tiles`) as it was. A constant number of chunks keeps
    the fused parallel loop's divisions by constants, and the chunk's tiles one loop whose
    ragged last tile loop partitioning peels."""
    if is_number(width):
        return [], tiles
    n = -(-tiling.parallel_chunks(target) // max(tasks, 1))
    if n <= 1:
        return [], tiles
    outer, inner = s[t].split(tiles, nparts=n)
    return [outer], inner


def row_extent(t) -> int:
    """The number of elements of tensor `t`'s last axis for a heuristic (a vector's
    width): its size, or LONG_ROW where that is symbolic."""
    return number(t.shape[-1])
