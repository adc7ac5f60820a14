"""A Stage: how one operation is computed. Primitives check, record and log; they never
rewrite loops (lowering builds the loop IR from this record every time)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from .. import arith
from .. import dtype as dt
from ..errors import ScheduleError
from ..ir import expr as E
from ..ir.expr import Var, is_const_int
from ..ir.stmt import ForKind
from ..te.tensor import IterVar, Operation, PlaceholderOp, Tensor
from ..te.tensor_intrin import TensorIntrin
from ..te.update import UpdateOp
from . import updates
from .relations import Fuse, Split


@dataclass
class IterAttr:
    kind: ForKind = ForKind.SERIAL
    thread: Optional[IterVar] = None
    pragmas: List[Tuple[str, Any]] = field(default_factory=list)
    tensor_intrin: Any = None       # te.tensor_intrin.TensorIntrin replacing the loops from here
    prefetches: List[Tuple[Tensor, int]] = field(default_factory=list)   # (tensor, offset)


def _fmt_axis(iv):
    return iv.var.name if isinstance(iv, IterVar) else repr(iv)


class Stage:
    def __init__(self, op: Operation, schedule):
        self.op = op
        self.origin_op = op
        self.schedule = schedule
        self.all_iter_vars: List[IterVar] = list(getattr(op, "axis", [])) + list(getattr(op, "reduce_axis", []))
        self.leaf_iter_vars: List[IterVar] = list(self.all_iter_vars)
        self.relations: List[Any] = []
        self.iter_var_attrs: Dict[IterVar, IterAttr] = {}
        self.attach_type = "root"          # root | inline | scope
        self.attach_stage: Optional["Stage"] = None
        self.attach_ivar: Optional[IterVar] = None
        self.scope = "global"
        self.storage_aligns: List[Tuple[int, int, int]] = []
        self.storage_swizzle_bytes = 0     # storage_swizzle(width)
        self.stored_with: Optional["Stage"] = None   # store_with(tensor): that stage's buffer
        self.is_output = False
        self.store_predicate = None        # set_store_predicate: guards the final stores
        self.double_buffered = 0           # buffers in turn: double_buffer(), multi_buffer(n)
        self.atomics = False               # atomic(): an update's writes are atomic

    # ------------------------------------------------------------------ helpers
    @property
    def name(self):
        return self.op.name

    def __repr__(self):
        return f"Stage({self.op.name})"

    def _error(self, prim, msg):
        return ScheduleError(f"{prim}: stage '{self.op.name}': {msg}")

    def _check_compute(self, prim):
        if isinstance(self.op, PlaceholderOp):
            raise self._error(prim, "is a placeholder (an input); it has no loops to schedule")

    def check_leaf(self, prim, iv):
        """Raises the ScheduleError of primitive `prim` unless `iv` is a loop (a leaf axis)
        of this stage."""
        self._check_compute(prim)
        if not isinstance(iv, IterVar):
            raise self._error(prim, f"expected an axis (IterVar), got {iv!r}")
        if iv in self.leaf_iter_vars:
            return
        if iv in self.all_iter_vars:
            raise self._error(prim, f"axis '{iv.var.name}' was already split or fused; use the "
                              "axes that split/fuse returned")
        leaves = ", ".join(_fmt_axis(v) for v in self.leaf_iter_vars)
        raise self._error(prim, f"axis '{iv.var.name}' is not a loop of this stage (its loops are: "
                          f"{leaves}); did you pass an axis of another stage?")

    def _log(self, text):
        self.schedule.trace.append(f"s[{self.op.name}].{text}")

    def _attr(self, iv) -> IterAttr:
        a = self.iter_var_attrs.get(iv)
        if a is None:
            a = self.iter_var_attrs[iv] = IterAttr()
        return a

    def _new_iv(self, parent, suffix, kind=None):
        return IterVar(None, Var(f"{parent.var.name}.{suffix}", parent.var.dtype), kind or parent.kind)

    # ------------------------------------------------------------------ loop structure
    def split(self, parent, factor=None, nparts=None, tail="guard"):
        """Splits `parent` into (outer, inner); the inner loop has `factor` iterations
        (or the outer loop has `nparts`). A non-divisible extent is guarded
        (`tail="guard"`), or, with `tail="shift"` (Halide's ShiftInwards), its last tile
        is moved back to end at the extent, overlapping the tile before it, so the tile
        needs no guard and no second copy: the extent must be at least `factor` at run
        time (a smaller one is the caller's to route elsewhere), and the stage must be
        pure (see `_check_shift`); where the loop covers only part of the axis (an
        attached stage) the split is guarded (bound.shifts)."""
        self.check_leaf("split", parent)
        if (factor is None) == (nparts is None):
            raise self._error("split", f"axis '{parent.var.name}': give exactly one of factor= or nparts=")
        if tail not in ("guard", "shift"):
            raise self._error("split", f"axis '{parent.var.name}': tail must be 'guard' or 'shift', got {tail!r}")
        if tail == "shift":
            self._check_shift(parent, factor)
        val = factor if factor is not None else nparts
        what = "factor" if factor is not None else "nparts"
        if isinstance(val, bool) or not isinstance(val, int):
            if hasattr(val, "value") and isinstance(getattr(val, "value"), int):
                val = val.value
            else:
                raise self._error("split", f"axis '{parent.var.name}': {what} must be a positive integer, got {val!r}")
        if val <= 0:
            raise self._error("split", f"axis '{parent.var.name}': {what} must be a positive integer, got {val}")
        outer = self._new_iv(parent, "outer")
        inner = self._new_iv(parent, "inner")
        self.relations.append(Split(parent, outer, inner, val if factor is not None else None,
                                    val if nparts is not None else None, tail == "shift"))
        k = self.leaf_iter_vars.index(parent)
        self.leaf_iter_vars[k:k + 1] = [outer, inner]
        self.all_iter_vars += [outer, inner]
        self._log(f"split({parent.var.name}, {what}={val}" + (", tail=shift)" if tail == "shift" else ")"))
        return outer, inner

    def _check_shift(self, parent, factor):
        """A shifted tile computes some outputs twice, so each output must come out the
        same the second time: a data-parallel axis of a stage whose every element is
        written once from what the stage does not write. Not so for a reduction axis
        (counted twice), a stage that accumulates in its own output (its reduction:
        the overlap's second pass would start again from a partial sum another task may
        still be adding to), a stage that updates or is updated, or one stored in
        another tensor's buffer."""
        why = None
        if factor is None:
            why = "needs factor=, not nparts="
        elif parent.kind == "reduce":
            why = "is a reduction axis: the overlap would be counted twice"
        elif isinstance(self.op, UpdateOp):
            why = "the stage is an update, which reads what it writes"
        elif getattr(self.op, "reduce_axis", None):
            why = "the stage reduces into its output; cache_write its reduction first"
        elif self.stored_with is not None:
            why = f"the stage is stored with '{self.stored_with.op.name}'"
        elif any(isinstance(st.op, UpdateOp) and st.op.base is self.op for st in self.schedule.stages):
            why = "the stage has updates, which read what it writes"
        if why is not None:
            raise self._error("split", f"axis '{parent.var.name}': tail='shift' {why}")

    def fuse(self, *axes):
        """Fuses adjacent loops (outermost first) into one."""
        if len(axes) == 1 and isinstance(axes[0], (list, tuple)):
            axes = tuple(axes[0])
        if not axes:
            raise self._error("fuse", "needs at least one axis")
        for iv in axes:
            self.check_leaf("fuse", iv)
        if len(axes) == 1:
            return axes[0]
        pos = [self.leaf_iter_vars.index(iv) for iv in axes]
        if pos != list(range(pos[0], pos[0] + len(pos))):
            names = ", ".join(iv.var.name for iv in axes)
            raise self._error("fuse", f"axes {names} must be adjacent loops, outermost first "
                              "(reorder them first)")
        kinds = {iv.kind for iv in axes}
        if len(kinds) > 1:
            raise self._error("fuse", "cannot fuse a reduction axis with a spatial axis")
        fused = axes[0]
        for iv in axes[1:]:
            new = IterVar(None, Var(f"{fused.var.name}.{iv.var.name}.fused", iv.var.dtype), iv.kind)
            self.relations.append(Fuse(fused, iv, new))
            self.all_iter_vars.append(new)
            fused = new
        self.leaf_iter_vars[pos[0]:pos[-1] + 1] = [fused]
        self._log(f"fuse({', '.join(iv.var.name for iv in axes)})")
        return fused

    def reorder(self, *axes):
        """Puts the given loops in this order, in the positions they occupied."""
        if len(axes) == 1 and isinstance(axes[0], (list, tuple)):
            axes = tuple(axes[0])
        for iv in axes:
            self.check_leaf("reorder", iv)
        if len(set(map(id, axes))) != len(axes):
            raise self._error("reorder", "an axis appears twice")
        pos = sorted(self.leaf_iter_vars.index(iv) for iv in axes)
        leaves = list(self.leaf_iter_vars)
        for p, iv in zip(pos, axes):
            leaves[p] = iv
        if isinstance(self.op, UpdateOp):
            updates.check_order(self, "reorder", leaves)
        self.leaf_iter_vars[:] = leaves
        self._log(f"reorder({', '.join(iv.var.name for iv in axes)})")

    def tile(self, x_parent, y_parent, x_factor, y_factor, tail="guard"):
        """Splits two axes and orders the loops (x.outer, y.outer, x.inner, y.inner);
        `tail`: as split's, for both axes."""
        xo, xi = self.split(x_parent, factor=x_factor, tail=tail)
        yo, yi = self.split(y_parent, factor=y_factor, tail=tail)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    # ------------------------------------------------------------------ annotations
    def _annotate(self, prim, iv, kind):
        self.check_leaf(prim, iv)
        if kind in (ForKind.VECTORIZED, ForKind.PARALLEL) and iv.kind == "reduce" \
                and isinstance(self.op, UpdateOp):
            updates.check_concurrent(self, prim, iv)
        elif kind in (ForKind.VECTORIZED, ForKind.PARALLEL) and iv.kind == "reduce":
            what = "vectorize" if kind is ForKind.VECTORIZED else "parallelize"
            raise self._error(prim, f"cannot {what} the reduction axis '{iv.var.name}': its iterations "
                              "update the same output element; use a spatial axis, or rfactor the "
                              "reduction first")
        attr = self._attr(iv)
        if attr.thread is not None:
            raise self._error(prim, f"axis '{iv.var.name}' is bound to {attr.thread.thread_tag}")
        if attr.kind is not ForKind.SERIAL and attr.kind is not kind:
            raise self._error(prim, f"axis '{iv.var.name}' is already marked {attr.kind.value}")
        attr.kind = kind
        self._log(f"{prim}({iv.var.name})")

    def vectorize(self, iv):
        """Emits the loop as one vector operation per statement (innermost loops)."""
        self._annotate("vectorize", iv, ForKind.VECTORIZED)

    def unroll(self, iv):
        """Unrolls the loop completely (its extent must be a constant)."""
        self._annotate("unroll", iv, ForKind.UNROLLED)

    def parallel(self, iv):
        """Runs the iterations on native threads."""
        self._annotate("parallel", iv, ForKind.PARALLEL)

    def bind(self, iv, thread_iv):
        """Maps the loop onto a GPU grid dimension (blockIdx.* / threadIdx.*)."""
        self.check_leaf("bind", iv)
        if not isinstance(thread_iv, IterVar) or thread_iv.kind != "thread":
            raise self._error("bind", f"expected tdsl.thread_axis(...), got {thread_iv!r}")
        attr = self._attr(iv)
        if attr.kind is not ForKind.SERIAL:
            raise self._error("bind", f"axis '{iv.var.name}' is already marked {attr.kind.value}")
        vthread = thread_iv.thread_tag == "vthread"
        if vthread and iv.kind == "reduce":
            raise self._error("bind", f"the reduction axis '{iv.var.name}' cannot be bound to a "
                              "vthread: virtual threads cannot combine partial results (bind it "
                              "to threadIdx.x, or rfactor it first)")
        if iv.kind == "reduce" and isinstance(self.op, UpdateOp):
            updates.check_concurrent(self, "bind", iv)
        for other, a in self.iter_var_attrs.items():
            # several vthread axes may nest (one thread_axis each); a grid tag binds one loop
            same = a.thread is thread_iv if vthread else (
                a.thread is not None and a.thread.thread_tag == thread_iv.thread_tag)
            if same and other is not iv:
                raise self._error("bind", f"{thread_iv.thread_tag} is already bound to axis "
                                  f"'{other.var.name}'")
        attr.kind = ForKind.THREAD_BINDING
        attr.thread = thread_iv
        self._log(f"bind({iv.var.name}, {thread_iv.thread_tag})")

    def pragma(self, iv, key, value=True):
        """Attaches a hint to a loop; it is printed with the loop in the IR. ("unroll", n):
        the C-family printers ask the compiler to unroll the serial loop at most n times.
        ("parallel_when", cond): a parallel loop forks only where the boolean expression
        `cond` of the sizes holds at run time, else runs on the calling thread (LLVM)."""
        self.check_leaf("pragma", iv)
        if not isinstance(key, str) or not key:
            raise self._error("pragma", f"the key must be a non-empty string, got {key!r}")
        if key == "unroll" and (isinstance(value, bool) or not isinstance(value, int)
                                or value < 1):
            raise self._error("pragma", f"'unroll' takes the most copies of the body the "
                              f"compiler may make, an int >= 1 (1: keep the loop rolled), got "
                              f"{value!r}")
        if key == "parallel_when":
            value = E.convert(value)
            if value.dtype != "bool":
                raise self._error("pragma", f"'parallel_when' takes a boolean expression of the "
                                  f"sizes, got {value!r} ({value.dtype})")
        self._attr(iv).pragmas.append((key, value))
        self._log(f"pragma({iv.var.name}, {key!r}, {value!r})")

    def prefetch(self, tensor, iv, offset=1):
        """At the top of each iteration of loop `iv`, fetches into the cache the part of
        `tensor` that iteration `iv + offset` reads and iteration `iv + offset - 1` did not
        (TVM's `prefetch`, Halide's `Func::prefetch`): where the region slides along one
        dimension (the rows of a stencil's input), only the rows coming into it. The
        region is clipped to the tensor; it changes no value, only when memory is read."""
        self.check_leaf("prefetch", iv)
        if not isinstance(tensor, Tensor):
            raise self._error("prefetch", f"expected a tensor this stage reads, got {tensor!r}")
        if tensor.op not in self.schedule.stage_map:
            raise self._error("prefetch", f"'{tensor.name}' is not part of this schedule")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 1:
            raise self._error("prefetch", f"offset must be a number of iterations >= 1, got "
                              f"{offset!r}")
        attr = self._attr(iv)
        if attr.kind is ForKind.VECTORIZED or attr.thread is not None:
            raise self._error("prefetch", f"axis '{iv.var.name}' is {attr.kind.value}; "
                              "prefetch at a serial or parallel loop around it")
        attr.prefetches.append((tensor, offset))
        self._log(f"prefetch({tensor.name}, {iv.var.name}, {offset})")

    def tensorize(self, iv, intrin):
        """Replaces the loops from `iv` inward by one call of tensor intrinsic `intrin`
        (`tdsl.decl_tensor_intrin`); lowering checks that they compute what it computes."""
        self.check_leaf("tensorize", iv)
        if not isinstance(intrin, TensorIntrin):
            raise self._error("tensorize", f"expected a tensor intrinsic from "
                              f"tdsl.decl_tensor_intrin, got {intrin!r}")
        attr = self._attr(iv)
        if attr.kind is not ForKind.SERIAL or any(
                a.tensor_intrin is not None for a in self.iter_var_attrs.values()):
            raise self._error("tensorize", f"axis '{iv.var.name}' is already marked "
                              f"{attr.kind.value}, or another axis is tensorized")
        attr.tensor_intrin = intrin
        self._log(f"tensorize({iv.var.name}, {intrin.name})")

    def storage_align(self, iv, factor, offset):
        """Pads the row stride of this stage's buffer at dimension `iv` so that
        stride % factor == offset (to avoid cache or bank conflicts)."""
        self._check_compute("storage_align")
        axis = list(getattr(self.op, "axis", []))
        if iv not in axis:
            raise self._error("storage_align", f"'{_fmt_axis(iv)}' is not a root spatial axis of this stage")
        if not isinstance(factor, int) or factor <= 0 or not isinstance(offset, int) or not 0 <= offset < factor:
            raise self._error("storage_align", f"need factor > 0 and 0 <= offset < factor, got {factor}, {offset}")
        self.storage_aligns.append((axis.index(iv), factor, offset))
        self._log(f"storage_align({iv.var.name}, {factor}, {offset})")

    def storage_swizzle(self, width=128):
        """Lays this stage's buffer out with the XOR pattern of NVIDIA's `width`-byte
        swizzle (32, 64 or 128; CUTLASS's Swizzle<log2(width / 16), 4, 3>): in each
        128-byte row of the flat buffer, 16-byte chunk c of row r is stored at chunk
        c ^ (r % (width / 16)). Eight consecutive rows read at one column then fall in
        different banks, and it is the layout Hopper's `wgmma` reads operands in. The
        buffer starts 1024-byte aligned; every access goes through the mapping."""
        self._check_compute("storage_swizzle")
        if width not in (32, 64, 128):
            raise self._error("storage_swizzle", f"width must be 32, 64 or 128 bytes, got "
                              f"{width!r}")
        esize = dt.bits(self.op.output(0).dtype) // 8
        if esize < 1 or 16 % esize:
            raise self._error("storage_swizzle", f"its elements ({self.op.output(0).dtype}) "
                              "do not divide 16-byte chunks")
        self.storage_swizzle_bytes = width
        self._log(f"storage_swizzle({width})")

    def store_with(self, tensor):
        """Stores this stage's values in `tensor`'s buffer, at the same indices, instead of
        in a buffer of its own: an intermediate that `tensor` turns into its own values
        element by element (softmax's exponentials, divided by their row sum) is written
        where the output goes. The output's cache lines are then fetched while the costly
        values are computed, and the last pass rewrites them in cache instead of writing
        a second buffer back to memory.

        `tensor` has this stage's shape and dtype and is an argument of the build; this
        stage is computed at a loop of it (`compute_at`), which reads it only at its own
        indices, and every other reader is computed at that same loop, so all of them run
        before the output overwrites a value. Lowering checks that, and that the region
        computed per iteration is the one the output writes there (a split of the output
        that does not divide its axis would make it larger)."""
        self._check_compute("store_with")
        if not isinstance(tensor, Tensor):
            raise self._error("store_with", f"expected a tensor, got {tensor!r}")
        other = self.schedule.stage_map.get(tensor.op)
        if other is None:
            raise self._error("store_with", f"tensor '{tensor.name}' is not part of this schedule")
        if other is self:
            raise self._error("store_with", "a stage cannot be stored with itself")
        if self.op.num_outputs != 1 or tensor.op.num_outputs != 1:
            raise self._error("store_with", "needs single-output stages")
        mine = self.op.output(0)
        if mine.dtype != tensor.dtype:
            raise self._error("store_with", f"its dtype {mine.dtype} differs from '{tensor.name}''s "
                              f"{tensor.dtype}")
        if len(mine.shape) != len(tensor.shape) or not all(
                is_const_int(arith.simplify(E.convert(a) - E.convert(b)), 0)
                for a, b in zip(mine.shape, tensor.shape)):
            raise self._error("store_with", f"its shape {list(mine.shape)} differs from "
                              f"'{tensor.name}''s {list(tensor.shape)}")
        self.stored_with = other
        self._log(f"store_with({tensor.name})")

    def set_store_predicate(self, predicate):
        """Guards the stores of this stage's final results by `predicate` (e.g.
        `tx.var.equal(0)`: after a cross-thread reduction, one thread of the block
        writes). Thread axes in it stand for the loops bound to their tags."""
        self._check_compute("set_store_predicate")
        from ..ir import expr as E
        try:
            pred = E.convert(predicate)
        except Exception as e:
            raise self._error("set_store_predicate", f"the predicate must be a condition: {e}") from None
        if pred.dtype != "bool":
            raise self._error("set_store_predicate", f"the predicate must be a condition, got "
                              f"{pred} of type {pred.dtype}")
        self.store_predicate = pred
        self._log(f"set_store_predicate({pred})")

    def double_buffer(self):
        """Computes this stage into two buffers used in turn across the iterations of the
        loop it is attached to: the next iteration's data is fetched while the current one
        is used (shared-memory caches on GPUs: one barrier per iteration instead of two)."""
        self._buffers_in_turn("double_buffer", 2)
        self._log("double_buffer()")

    def multi_buffer(self, stages):
        """Like `double_buffer`, with `stages` buffers: the data of the next `stages - 1`
        iterations is in flight while the current one is used (a software pipeline: on
        CUDA sm_80+ the copies into shared memory are cp.async groups, `stages - 2` of them
        still pending at each iteration's barrier)."""
        if isinstance(stages, bool) or not isinstance(stages, int) or stages < 2:
            raise self._error("multi_buffer", f"stages must be an integer >= 2, got {stages!r}")
        self._buffers_in_turn("multi_buffer", stages)
        self._log(f"multi_buffer({stages})")

    def _buffers_in_turn(self, what, n):
        self._check_compute(what)
        if self.is_output:
            raise self._error(what, "is an output of the schedule; double buffering "
                              "applies to an intermediate stage (e.g. a shared cache_read)")
        self.double_buffered = n

    # ------------------------------------------------------------------ placement
    def _check_placement(self, prim):
        self._check_compute(prim)
        if isinstance(self.op, UpdateOp):
            raise self._error(prim, f"an update is computed where its stage is: place the "
                              f"whole stage with s[{self.op.base.name}].{prim}(...)")

    def compute_at(self, parent, iv):
        """Computes this stage inside loop `iv` of stage `parent`, only the region it needs."""
        self._check_placement("compute_at")
        if isinstance(parent, Tensor):
            parent = self.schedule[parent]
        if not isinstance(parent, Stage):
            raise self._error("compute_at", f"expected a stage (s[T]) to attach to, got {parent!r}")
        if parent is self:
            raise self._error("compute_at", "cannot attach a stage to itself")
        if iv not in parent.leaf_iter_vars:
            name = _fmt_axis(iv)
            where = "an axis of this stage, not of" if iv in self.all_iter_vars else "not a loop of"
            leaves = ", ".join(_fmt_axis(v) for v in parent.leaf_iter_vars)
            raise self._error("compute_at", f"'{name}' is {where} stage '{parent.op.name}' "
                              f"(its loops are: {leaves})")
        if self.schedule.depends_on(self, parent):
            raise self._error("compute_at", f"stage '{parent.op.name}' is a producer of this stage; "
                              "a stage can only be computed inside one of its consumers")
        if not self.schedule.depends_on(parent, self):
            raise self._error("compute_at", f"stage '{parent.op.name}' does not read this stage; "
                              "attach it to a consumer")
        self.attach_type, self.attach_stage, self.attach_ivar = "scope", parent, iv
        self._log(f"compute_at(s[{parent.op.name}], {iv.var.name})")

    def compute_inline(self):
        """Substitutes this stage's expression into its consumers."""
        self._check_placement("compute_inline")
        if self.schedule.updates_of(self):
            raise self._error("compute_inline", "it has update definitions, which write its "
                              "buffer: it cannot be inlined; compute_at it instead")
        if self.op.reduce_axis:
            raise self._error("compute_inline", "a reduction cannot be inlined; compute_at it instead")
        if self.is_output:
            raise self._error("compute_inline", "an output of the schedule cannot be inlined")
        self.attach_type, self.attach_stage, self.attach_ivar = "inline", None, None
        self._log("compute_inline()")

    def compute_root(self):
        """Computes this stage at the top level, over its whole domain."""
        self._check_placement("compute_root")
        self.attach_type, self.attach_stage, self.attach_ivar = "root", None, None
        self._log("compute_root()")

    # ------------------------------------------------------------------ update definitions
    def update(self, k=0) -> "Stage":
        """The stage of update definition `k` of this stage (`tdsl.update`), scheduled on its
        own loops: its pure variables freely, its reduction variables where that keeps
        their order (see `atomic`)."""
        ups = self.schedule.updates_of(self)
        if not ups:
            raise self._error("update", "has no update definitions (tdsl.update)")
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < len(ups):
            raise self._error("update", f"has {len(ups)} update definition(s); update({k!r}) "
                              "does not exist")
        return ups[k]

    def atomic(self):
        """Makes this update's read-modify-write of each element atomic (Halide's
        `atomic()`), so loops of its reduction variables may run in parallel, as vector
        lanes or on GPU threads and be reordered: for an associative update (`old + e`,
        `old * e`, `min`, `max`) only. Atomic add, min and max are the hardware's (LLVM's
        atomicrmw, CUDA's atomicAdd, OpenCL's atomic_add on integers); the others a
        compare-and-swap loop."""
        updates.check_atomic(self)
        self.atomics = True
        self._log("atomic()")
        return self
