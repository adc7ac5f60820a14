"""Templates, tasks and the dispatch context that picks a config for a template call.

- `@template("name")` wraps a function `(cfg, *args) -> (schedule, tensors)`. Called with
  a `Config` first it runs as written; called without one it asks the dispatch context:
  inside `apply_best(log)` the best logged config for (name, args), otherwise the default
  config (each knob's default; `cfg.is_fallback` is then True).
- `create_task(template, args, target)` runs the template once in define mode, which fills
  `task.space`, counts the FLOPs and records the argument shapes and dtypes.

Templates are registered by name so that a forked measuring process finds them without
pickling (a template defined in a notebook or a test module pickles poorly).
"""
from __future__ import annotations

import functools
import math
import sys
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..ir import expr as E
from ..ir.visitor import walk
from ..te.tensor import ComputeOp, PlaceholderOp, Tensor
from .errors import AutotuneError
from .keys import args_key
from .measure import make_inputs
from .space import Config, ConfigSpace

_TEMPLATES: Dict[str, "Template"] = {}


class Template:
    """A tunable schedule template (see the module docstring)."""

    def __init__(self, name: str, fn):
        self.name = name
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        if args and isinstance(args[0], Config):
            return self.fn(*args, **kwargs)
        cfg = current_config(self.name, args)
        return self.fn(cfg, *args, **kwargs)

    def __repr__(self):
        return f"<autotune template {self.name!r}>"

    def __reduce__(self):
        # by reference to the module attribute holding this template when there is one
        # (the decorated name); else the name and the function (cloudpickle sends it by
        # value). A script's or a notebook's __main__ is not the __main__ of another
        # process, so templates defined there go by value too.
        module = getattr(self, "__module__", None) or ""
        obj = sys.modules.get(module) if module != "__main__" else None
        for part in (getattr(self, "__qualname__", "") or "?").split("."):
            obj = getattr(obj, part, None)
        if obj is self:
            return self.__qualname__
        return (_rebuild_template, (self.name, self.fn))


def _rebuild_template(name, fn):
    t = _TEMPLATES.get(name)
    if t is not None and t.fn is fn:
        return t
    return Template(name, fn)


def template(name: str):
    """Decorator: marks `fn(cfg, *args) -> (schedule, tensors)` as a tunable template."""
    if not isinstance(name, str) or not name:
        raise AutotuneError(f"template: the name must be a non-empty string, got {name!r}")

    def wrap(fn):
        if isinstance(fn, Template):
            fn = fn.fn
        t = Template(name, fn)
        _TEMPLATES[name] = t
        return t
    return wrap


def get_template(name: str) -> "Template":
    try:
        return _TEMPLATES[name]
    except KeyError:
        raise AutotuneError(f"no template named {name!r} (known: {sorted(_TEMPLATES)})") from None


# --------------------------------------------------------------------------------------
# dispatch: which config does a plain template call get?

_DISPATCH: List[Any] = []
_WARNED = set()


def current_config(name: str, args) -> Config:
    key = args_key(args)
    for ctx in reversed(_DISPATCH):
        values = ctx.query(name, key)
        if values is not None:
            return Config(values=values)
    if _DISPATCH and (name, key) not in _WARNED:
        _WARNED.add((name, key))
        warnings.warn(f"autotune: no tuned config for template {name!r} with args {key}; "
                      "using the default config", stacklevel=3)
    return Config(is_fallback=True)


class DispatchContext:
    """A context manager that a plain template call asks for its config (`query(name,
    key)`, None: not known here); the innermost one that knows it answers, as in TVM."""

    def query(self, name, key):
        raise NotImplementedError

    def __enter__(self):
        _DISPATCH.append(self)
        return self

    def __exit__(self, *exc):
        _DISPATCH.remove(self)


class ApplyConfig(DispatchContext):
    """Context manager: every call of template `name` (any args) uses `config`
    (a Config or a dict of knob values)."""

    def __init__(self, config, name: Optional[str] = None):
        self.values = config.to_dict() if isinstance(config, Config) else dict(config)
        self.name = name

    def query(self, name, key):
        return self.values if self.name in (None, name) else None


# --------------------------------------------------------------------------------------
# FLOP counting


def _count_expr(e) -> float:
    n = 0

    def f(x):
        nonlocal n
        if isinstance(x, (E.Add, E.Sub, E.Mul, E.Div, E.Min, E.Max)) and x.dtype.startswith("float"):
            n += 1
        elif isinstance(x, E.Call) and x.dtype.startswith("float") and x.name != "likely":
            n += 1
    walk(e, f)
    return n


def _const_extent(iv):
    if iv.dom is None or not isinstance(iv.dom.extent, E.IntImm):
        return None
    return iv.dom.extent.value


def count_flop(schedule) -> float:
    """Floating point operations of every compute stage (arithmetic on floats in the body,
    plus one per reduced element), times its iteration domain. 0 when a size is symbolic."""
    total = 0.0
    seen = set()
    for st in schedule.stages:
        op = st.op
        if not isinstance(op, ComputeOp) or op in seen:
            continue
        seen.add(op)
        body = op.body
        if isinstance(body, E.Reduce):
            per = _count_expr(body.source) + (1 if body.dtype.startswith("float") else 0)
            axes = list(op.axis) + list(body.axis)
        else:
            per = _count_expr(body)
            axes = list(op.axis)
        exts = [_const_extent(iv) for iv in axes]
        if any(x is None for x in exts):
            return 0.0
        total += per * math.prod(exts)
    return total


# --------------------------------------------------------------------------------------
# tasks


class ArgSpec:
    """Shape and dtype of one kernel argument; `is_input` for placeholders."""

    def __init__(self, name, shape, dtype, is_input):
        self.name, self.shape, self.dtype, self.is_input = name, tuple(shape), dtype, is_input

    def __repr__(self):
        return f"{'in' if self.is_input else 'out'} {self.name}{list(self.shape)} {self.dtype}"


def _arg_specs(tensors, what) -> List[ArgSpec]:
    specs = []
    for t in tensors:
        if not isinstance(t, Tensor):
            raise AutotuneError(f"{what}: the template must return (schedule, [tensors]); got {t!r} "
                                "among the tensors")
        shape = []
        for d in t.shape:
            if not isinstance(d, E.IntImm):
                raise AutotuneError(f"{what}: tensor '{t.name}' has the symbolic size {d}; "
                                    "tunable templates need constant shapes")
            shape.append(d.value)
        specs.append(ArgSpec(t.name, shape, t.dtype, isinstance(t.op, PlaceholderOp)))
    return specs


def _check_result(res, what):
    if not (isinstance(res, (tuple, list)) and len(res) == 2 and isinstance(res[1], (list, tuple))):
        raise AutotuneError(f"{what}: the template must return (schedule, [tensors]), got {res!r}")
    return res[0], list(res[1])


class Task:
    """A template with concrete arguments and a target: what `tune` searches.

    `space` lists the knobs; `flop` counts the work (for GFLOP/s); `arg_specs` gives the
    kernel's arguments. `reference(*inputs)` (optional) returns the expected output(s)
    with numpy; without it the default config's output is the reference. Results are
    compared with `rtol`/`atol` (atol relative to the largest reference magnitude)."""

    def __init__(self, template: Template, args: Sequence[Any], target: str = "llvm",
                 reference=None, rtol: float = 1e-3, atol: float = 1e-4, flop: Optional[float] = None):
        if not isinstance(template, Template):
            if callable(template):
                raise AutotuneError("create_task: decorate the function with "
                                    "@autotune.template(\"name\") first")
            raise AutotuneError(f"create_task: expected a template, got {template!r}")
        self.template = template
        self.name = template.name
        self.args = tuple(args)
        self.target = target
        self.reference = reference
        self.rtol, self.atol = float(rtol), float(atol)
        self.space = ConfigSpace()
        self.space.template_name = self.name
        self.space.args = self.args
        cfg = Config(space=self.space)
        s, tensors = _check_result(template.fn(cfg, *self.args), f"create_task({self.name!r})")
        self.arg_specs = _arg_specs(tensors, f"create_task({self.name!r})")
        self.flop = float(flop) if flop is not None else (cfg.flop or count_flop(s))
        self.args_key = args_key(self.args)

    @property
    def key(self) -> Tuple[str, str, str]:
        return (self.name, self.args_key, self.target)

    def config(self, point_or_values=None) -> Config:
        """A config of this task: the default (None), a point, a flat index or a values dict."""
        if point_or_values is None:
            return self.space.default_config()
        if isinstance(point_or_values, dict):
            point = self.space.point_of(point_or_values)
            idx = self.space.index_of_point(point) if point is not None else None
            return Config(values=point_or_values, index=idx)
        return self.space.get(point_or_values)

    def instantiate(self, config=None):
        """(schedule, tensors) of the template under `config` (default: the default config)."""
        if config is None or isinstance(config, (dict, int, tuple)):
            config = self.config(config)
        return _check_result(self.template.fn(Config(values=config.to_dict(), index=config.index),
                                              *self.args), f"template {self.name!r}")

    def build(self, config=None):
        import tdsl
        s, tensors = self.instantiate(config)
        return tdsl.build(s, tensors, target=self.target, name=self.name.replace(" ", "_"))

    def make_inputs(self, seed: int = 0) -> List[np.ndarray]:
        """Deterministic random inputs (placeholders, in argument order): what the
        measuring processes of `tune(..., seed=seed)` make for themselves."""
        return make_inputs(self.arg_specs, seed)

    def __repr__(self):
        return (f"Task({self.name!r}, args={list(self.args)}, target={self.target!r}, "
                f"space size={self.space.size:,}, flop={self.flop:.4g})")


def create_task(template, args=(), target: str = "llvm", reference=None, rtol=1e-3, atol=1e-4,
                flop=None) -> Task:
    """A tuning task: `template` (decorated with `@template`) applied to `args`."""
    if isinstance(args, (str, bytes)) or not isinstance(args, (tuple, list)):
        args = (args,)
    return Task(template, args, target, reference, rtol, atol, flop)
