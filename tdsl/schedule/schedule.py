"""The Schedule: stages in dataflow order, and the primitives that rewrite the dataflow
(cache_read, cache_write, rfactor). Everything else is recorded on the stages."""
from __future__ import annotations

from typing import Dict, List

from ..errors import ScheduleError
from ..ir import expr as E
from ..ir.expr import Range, Var
from ..ir.visitor import Mutator, substitute
from ..te import intrin_cuda
from ..te.tensor import ComputeOp, IterVar, Operation, PlaceholderOp, Tensor
from ..te.update import UpdateOp
from .stage import Stage
from .updates import update_chains


def _as_op(x, what):
    if isinstance(x, Tensor):
        return x.op
    if isinstance(x, Operation):
        return x
    if isinstance(x, Stage):
        return x.op
    raise ScheduleError(f"{what}: expected a tensor, an operation or a stage, got {x!r}")


class Schedule:
    def __init__(self, outputs):
        if not isinstance(outputs, (list, tuple)):
            outputs = [outputs]
        if not outputs:
            raise ScheduleError("create_schedule: needs at least one output tensor")
        self.outputs = []
        for o in outputs:           # the outputs of a multi-output op are one stage
            op = _as_op(o, "create_schedule")
            if op not in self.outputs:
                self.outputs.append(op)
        self.stages: List[Stage] = []
        self.stage_map: Dict[Operation, Stage] = {}
        self.trace: List[str] = []
        seen = set()

        def visit(op):
            if op in seen:
                return
            seen.add(op)
            for t in op.input_tensors():
                visit(t.op)
            st = Stage(op, self)
            self.stages.append(st)
            self.stage_map[op] = st
        for op in self.outputs:
            visit(op)
        for op in self.outputs:
            self.stage_map[op].is_output = True
            if isinstance(op, UpdateOp):      # the chain's buffer is the output
                self.stage_map[op.base].is_output = True

    # ------------------------------------------------------------------ access
    def __getitem__(self, t) -> Stage:
        if isinstance(t, Stage):
            return t
        op = _as_op(t, "schedule[...]")
        if isinstance(op, UpdateOp) and not isinstance(t, Stage):
            op = op.base      # as in Halide, a tensor with updates names its pure stage
        st = self.stage_map.get(op)
        if st is None:
            raise ScheduleError(f"tensor '{op.name}' is not part of this schedule (create_schedule "
                                "was given outputs that do not depend on it)")
        return st

    def producers(self, stage) -> List[Stage]:
        out = []
        for t in stage.op.input_tensors():
            p = self.stage_map[t.op]
            if p not in out:
                out.append(p)
        return out

    def updates_of(self, stage) -> List[Stage]:
        """The stages of the update definitions of pure stage `stage`, in order."""
        return update_chains(self).get(stage, [])

    def consumers(self, stage) -> List[Stage]:
        return [s for s in self.stages if stage in self.producers(s)]

    def depends_on(self, a: Stage, b: Stage) -> bool:
        """Whether stage a reads stage b, directly or through other stages."""
        todo, seen = [a], set()
        while todo:
            s = todo.pop()
            for p in self.producers(s):
                if p is b:
                    return True
                if p not in seen:
                    seen.add(p)
                    todo.append(p)
        return False


    def normalize(self):
        """TVM's rebase of loops to start at 0: tdsl's loops already do; returns self."""
        return self

    def __str__(self):
        lines = ["Schedule("]
        for name, loops, where, scope in self._rows():
            text = ", ".join(n + (f"({k})" if k else "") for n, k, _ in loops)
            where = where if where in ("root", "inline") else f"at {where}"
            scope = f" scope={scope}" if scope != "global" else ""
            lines.append(f"  {name}: [{text}] {where}{scope}")
        lines.append(")")
        if self.trace:
            lines.append("trace:")
            lines += [f"  {t}" for t in self.trace]
        return "\n".join(lines)

    __repr__ = __str__

    def _rows(self):
        for st in self.stages:
            if isinstance(st.op, PlaceholderOp):
                continue
            where = {"root": "root", "inline": "inline"}.get(st.attach_type)
            if where is None:
                where = f"{st.attach_stage.op.name}.{st.attach_ivar.var.name}"
            loops = []
            for iv in st.leaf_iter_vars:
                a = st.iter_var_attrs.get(iv)
                kind = ""
                if a is not None and a.kind.value != "serial":
                    kind = a.thread.thread_tag if a.thread is not None else a.kind.value
                loops.append((iv.var.name, kind, iv.kind == "reduce"))
            yield st.op.name, loops, where, st.scope

    def _repr_html_(self):
        import html
        from ..ir.html import wrap
        rows = []
        for name, loops, where, scope in self._rows():
            cells = ", ".join(
                (f"<i>{html.escape(n)}</i>" if red else html.escape(n)) +
                (f' <span class="kind">{k}</span>' if k else "") for n, k, red in loops)
            rows.append(f"<tr><td><b>{html.escape(name)}</b></td><td>{cells}</td>"
                        f"<td>{html.escape(where)}</td><td>{scope}</td></tr>")
        trace = "".join(f"<li><code>{html.escape(t)}</code></li>" for t in self.trace)
        return wrap("<b>Schedule</b><table><tr><th>stage</th><th>loops (outer to inner; "
                    "<i>reduction</i>)</th><th>computed at</th><th>scope</th></tr>" + "".join(rows) +
                    "</table>" + (f"<details open><summary>trace</summary><ol>{trace}</ol></details>"
                                  if trace else ""))

    def _repr_markdown_(self):
        lines = ["| stage | loops | computed at | scope |", "| --- | --- | --- | --- |"]
        for name, loops, where, scope in self._rows():
            text = ", ".join(n + (f" ({k})" if k else "") for n, k, _ in loops)
            lines.append(f"| {name} | {text} | {where} | {scope} |")
        return "\n".join(lines)

    # ------------------------------------------------------------------ dataflow rewrites
    def insert_stage(self, op, before: Stage) -> Stage:
        """A new stage computing `op`, placed just before `before` (its reader): the
        primitives that add a tensor (cache_read, rfactor, transform_layout) call it."""
        st = Stage(op, self)
        self.stages.insert(self.stages.index(before), st)
        self.stage_map[op] = st
        return st

    def replace_op(self, stage: Stage, new_op: Operation):
        """`stage` computes `new_op` from now on (a rewritten body reading a new tensor);
        its loops and attachment stay."""
        stage.op = new_op
        self.stage_map[new_op] = stage

    def cache_read(self, tensor, scope, readers):
        """A copy of `tensor` in `scope` that `readers` read instead of the original."""
        if not isinstance(tensor, Tensor):
            raise ScheduleError(f"cache_read: expected a tensor, got {tensor!r}")
        _check_scope("cache_read", scope)
        src = self[tensor]
        if not isinstance(readers, (list, tuple)):
            readers = [readers]
        if not readers:
            raise ScheduleError(f"cache_read: tensor '{tensor.name}': give at least one reader")
        reader_stages = []
        for r in readers:
            st = self[r]
            if src not in self.producers(st):
                raise ScheduleError(f"cache_read: stage '{st.op.name}' does not read tensor '{tensor.name}'")
            reader_stages.append(st)
        names = [f"ax{d}" for d in range(len(tensor.shape))]
        axis = [IterVar(Range(E.const(0), n), Var(name), "data_par") for name, n in zip(names, tensor.shape)]
        cache = ComputeOp(f"{tensor.name}.{scope}", "", None, axis,
                          E.ProducerLoad(tensor, tuple(iv.var for iv in axis)),
                          tensor.shape).output(0)
        first = min(reader_stages, key=self.stages.index)
        cst = self.insert_stage(cache.op, first)
        cst.scope = scope
        for st in reader_stages:
            repl = _ReplaceTensor({(src, tensor.value_index): cache}, self)
            bodies = tuple(repl.visit(b) for b in st.op.bodies)
            self.replace_op(st, _recompute(st.op, bodies))
        self.trace.append(f"cache_read({tensor.name}, {scope!r}, [{', '.join(s.op.name for s in reader_stages)}])")
        return cache

    def cache_write(self, tensor, scope):
        """Computes `tensor` into a `scope` buffer that is then copied to the tensor. A
        compute with several outputs caches them all: pass the list, get a list back."""
        tensors = list(tensor) if isinstance(tensor, (list, tuple)) else [tensor]
        for t in tensors:
            if not isinstance(t, Tensor):
                raise ScheduleError(f"cache_write: expected a tensor (or a list of the outputs "
                                    f"of one compute), got {t!r}")
        _check_scope("cache_write", scope)
        st = self[tensors[0]]
        op = st.op
        if not isinstance(op, ComputeOp):
            raise ScheduleError(f"cache_write: tensor '{tensors[0].name}' is not a compute")
        if any(self[t] is not st for t in tensors):
            raise ScheduleError("cache_write: the tensors of one call must be outputs of one "
                                f"compute; '{tensors[0].name}' and others differ")
        given = sorted(t.value_index for t in tensors)
        if given != list(range(op.num_outputs)):
            names = ", ".join(t.name for t in op.outputs)
            raise ScheduleError(f"cache_write: stage '{op.name}' has {op.num_outputs} outputs "
                                f"({names}); pass all of them, in a list")
        if st.relations or st.attach_type == "inline":
            raise ScheduleError(f"cache_write: stage '{op.name}' was already scheduled "
                                "(split/fuse/inline); call cache_write before other primitives")
        new_axis = [IterVar(iv.dom, Var(iv.var.name + ".c", iv.var.dtype), "data_par") for iv in op.axis]
        vmap = {o.var: n.var for o, n in zip(op.axis, new_axis)}
        cache_op = ComputeOp(f"{op.name}.{scope}", op.tag, op.attrs, new_axis,
                             tuple(substitute(b, vmap) for b in op.bodies), op.shape)
        cst = self.insert_stage(cache_op, st)
        cst.scope = scope
        idx = tuple(iv.var for iv in op.axis)
        copy = ComputeOp(op.name, op.tag, op.attrs, op.axis,
                         tuple(E.ProducerLoad(t, idx) for t in cache_op.outputs), op.shape)
        self.replace_op(st, copy)
        st.all_iter_vars = list(op.axis)
        st.leaf_iter_vars = list(op.axis)
        st.iter_var_attrs = {}
        self.trace.append(f"cache_write({', '.join(t.name for t in tensors)}, {scope!r})")
        out = [cache_op.output(t.value_index) for t in tensors]
        return out if isinstance(tensor, (list, tuple)) else out[0]

    def transform_layout(self, tensor, readers, layout, scope="global"):
        """A copy of `tensor` in a blocked layout (`layout`: (dim, size or None) pieces,
        outermost first; see `tdsl.schedule.relayout`) that `readers` read instead."""
        from .relayout import transform_layout
        return transform_layout(self, tensor, readers, layout, scope)

    def rfactor(self, tensor, axis, factor_axis=0):
        """Factors the reduction of `tensor` over leaf `axis` into a new stage that keeps
        `axis` as a spatial (parallelisable) dimension; the original stage then reduces it."""
        if isinstance(tensor, Tensor) and self.updates_of(self[tensor]):
            # Halide's rfactor of an update: the update whose loop `axis` is
            from .update_rfactor import rfactor_update
            owner = next((u for u in self.updates_of(self[tensor])
                          if axis in u.leaf_iter_vars), None)
            if owner is None:
                raise ScheduleError(f"rfactor: '{getattr(axis, 'name', axis)}' is not a loop "
                                    f"of an update of '{tensor.name}'")
            return rfactor_update(self, owner, axis, factor_axis)
        from .rfactor import rfactor
        return rfactor(self, tensor, axis, factor_axis)


# a tensor-core accumulator: each lane of a warp holds its elements of the block in
# registers, in the instruction's layout; only the intrinsics of tdsl.te.intrin_cuda touch it
FRAGMENT_SCOPES = (intrin_cuda.ACCUMULATOR,)


def _check_scope(prim, scope):
    if scope in FRAGMENT_SCOPES:
        if prim == "cache_write":
            return
        raise ScheduleError(f"{prim}: scope {scope!r} is a tensor-core accumulator that only "
                            "the mma intrinsics may write; make it with cache_write")
    if scope not in ("global", "shared", "local"):
        raise ScheduleError(f"{prim}: unknown scope {scope!r}; use 'global', 'shared', 'local' "
                            f"or (cache_write) {', '.join(map(repr, FRAGMENT_SCOPES))}")


class _ReplaceTensor(Mutator):
    """Reads of output k of a stage -> reads of another tensor ({(stage, k): tensor}); by
    stage, since the reads name the tensors of whatever op the stage had then."""

    def __init__(self, mapping, sched):
        self.m = mapping
        self.sched = sched

    def visit_ProducerLoad(self, e):
        idx = tuple(self.visit(i) for i in e.indices)
        st = self.sched.stage_map.get(e.tensor.op)
        t = self.m.get((st, e.tensor.value_index), e.tensor)
        return E.ProducerLoad(t, idx)


def _recompute(op: ComputeOp, bodies) -> ComputeOp:
    return ComputeOp(op.name, op.tag, op.attrs, op.axis, bodies, op.shape)


def create_schedule(outputs) -> Schedule:
    """A default schedule (row-major loops, everything at root) for `outputs`."""
    return Schedule(outputs)
