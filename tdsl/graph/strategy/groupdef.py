"""The definition of a fused group: its operators as tdsl tensors (`GroupDef.build`), each
node by the registry's implementation of the highest priority that takes it (registry.py,
implementations.py): the CPU's own definitions with packed weights, the GPU's column-GEMM
conv, topi's otherwise."""
from __future__ import annotations

from typing import Callable, Dict

import numpy as np

import tdsl

from ...target import as_target
from ..ir import Function, Var
from . import erasure, implementations, registry, tag, topi  # noqa: F401  (implementations fills the registry)
from .symbolic import TeSizes, buffer_atoms, group_size_vars


# ---------------------------------------------------------------------------- definition

DERIVED = 1 << 16      # slots of derived params: DERIVED * tag + the source param's index


def derived_source(slot):
    """The group param a kernel parameter slot reads (itself unless derived)."""
    return slot % DERIVED


class GroupDef:
    """Builds the te graph of a group; definitions may ask for re-laid-out constant params."""

    def __init__(self, fn: Function, consts: Dict[int, np.ndarray], target, family="cpu"):
        self.fn = fn
        self.consts = consts
        self.target = as_target(target)
        self.kind = self.target.kind
        self.family = family       # "cpu": the CPU's own definitions on llvm and C; "gpu"
        self.pidx = {p: i for i, p in enumerate(fn.params)}
        self.placeholders: Dict[int, object] = {}
        self.transforms: Dict[int, Callable] = {}
        self.anchor = None        # registry.Anchor: the node definition that schedules the group
        self.scheduled_by = None  # the name of the implementation whose schedule ran (registry.schedule)
        self.use_auto = True      # groups without a hand strategy: tdsl.autosched's rules
        self.auto_params = None   # their parameters, when tuned (tune_group)
        self.explanation = None
        self.channel_scale = None  # set while a conv of a channel-scaled input is defined
        self.erasure = None        # a kernel generic in the channel count (cpu/generic.py)
        self.size_var = erasure.size_var()
        # a group with symbolic sizes (ir/dims.py): its kernel takes them as size variables
        names = {v.name for v in group_size_vars(fn)}
        buffers = [d for t in [p.type for p in fn.params] + [o.type for o in fn.outputs] for d in t.shape]
        self.sizes = TeSizes(names, buffer_atoms(buffers, names)) if names else None
        # size classes: {name: boolean expression of the kernel's size variables} where
        # the schedule, tuned for representative sizes, is the wrong one; for each, a
        # variant is compiled with `size_class` set to its name (the class "small" for
        # the smallest sizes the bounds allow) and runs where its expression holds
        # (dispatch.compile_group). Set by a schedule whose loops depend on a symbolic
        # size and whose parameter transforms (packed weights) do not.
        self.size_classes = {}
        self.size_class = None
        # whether the variants of `size_classes` will run in front of this kernel (not
        # for one generic in its channel count): a schedule that relies on them (a tile
        # shifted inwards, which needs a tile's worth) must know
        self.classes_run = True
        # {class: {size variable: value}}: a class whose variant is compiled with those
        # sizes as constants (the static schedule of a single token, say)
        self.size_pins = {}

    @property
    def symbolic(self) -> bool:
        return self.sizes is not None

    def param_tensor(self, i):
        if i not in self.placeholders:
            p = self.fn.params[i]
            shape = p.type.shape if self.erasure is None else \
                self.erasure.shape(i, p.type.shape, self.size_var)
            if self.sizes is not None:
                shape = self.sizes.shape(shape)
            self.placeholders[i] = tdsl.placeholder(shape, p.type.dtype, name=f"p{i}")
        return self.placeholders[i]

    def node_type(self, n):
        """The type topi builds node `n` with: sizes as index expressions where they are
        symbolic, the channel size variable in a group generic in it."""
        t = erasure.node_type(self.erasure, n, self.size_var)
        if self.sizes is not None and not n.type.static:
            return erasure.SymType(self.sizes.shape(t.shape), n.type.dtype)
        return t

    def attrs_of(self, n):
        """`n.attrs` with symbolic sizes as index expressions."""
        if self.sizes is None:
            return n.attrs
        return {k: self.sizes.value(v) for k, v in n.attrs.items()}

    def operand(self, e, tensors):
        """The tensor of expression `e` inside the group: a node defined before (`tensors`),
        else the placeholder of the group parameter it is."""
        return tensors[e] if e in tensors else self.param_tensor(self.pidx[e])

    def const_param(self, e):
        """Index of the group parameter `e` if it is bound to a constant."""
        if isinstance(e, Var) and e in self.pidx and self.pidx[e] in self.consts:
            return self.pidx[e]
        return None

    def packed_param(self, i, shape, transform):
        """The placeholder of constant param i re-laid out by `transform` (input channels on
        axis 1), times the channel scale of the conv being defined if it has one: with a
        symbolic batch, a scale per image, so weights per image (a leading batch axis, read
        through cpu/batch.image_weights)."""
        self.transforms[i] = transform
        t = tdsl.placeholder(shape, self.fn.params[i].type.dtype, name=f"p{i}_packed")
        self.placeholders[i] = t
        sc = self.channel_scale
        if sc is None:
            return t
        if getattr(sc.shape[0], "value", sc.shape[0]) != 1:
            if len(sc.shape) == 5:
                ws = tdsl.compute((sc.shape[0],) + tuple(shape), lambda b, *k: t[k] * sc[b, k[1], 0, 0, k[-2]],
                                  name=topi.uname("scaled_weights"))
            else:
                ws = tdsl.compute((sc.shape[0],) + tuple(shape), lambda b, *k: t[k] * sc[b, k[1], 0, 0],
                                  name=topi.uname("scaled_weights"))
        elif len(sc.shape) == 5:      # a blocked image's scale: input channel (k[1], k[-2])
            ws = tdsl.compute(shape, lambda *k: t[k] * sc[0, k[1], 0, 0, k[-2]], name=topi.uname("scaled_weights"))
        else:
            ws = tdsl.compute(shape, lambda *k: t[k] * sc[0, k[1], 0, 0], name=topi.uname("scaled_weights"))
        return tag.mark(ws, tag.ROOT)      # computed once per call, never inlined into the conv

    def derived_param(self, i, tag, shape, dtype, transform):
        """A placeholder bound to `transform(constant param i)`, computed once at build
        time like a packed param (e.g. a per-channel sum of weights), beside param i's own;
        `tag` (1, 2, ...) tells several apart. Its slot in the kernel's parameter order is
        DERIVED * tag + i (the executor reads `derived_source`)."""
        slot = DERIVED * tag + i
        self.transforms[slot] = transform
        t = tdsl.placeholder(shape, dtype, name=f"p{i}_derived{tag}")
        self.placeholders[slot] = t
        return t

    def build(self):
        topi.reset_names()
        tensors = {}
        fast = self.family == "cpu" and self.target.family == "cpu"
        # the definitions of the target's family: the CPU's own on llvm and C only
        family = "cpu" if fast else "gpu" if self.family == "gpu" else None
        for n in self.fn.nodes():
            impl = registry.define(self, n, family)
            tensors[n] = impl.compute(self, n, tensors)
            if family in impl.schedules:
                self.anchor = registry.Anchor(impl, tensors[n])
        return tensors[self.fn.outputs[0]]
