"""The registry of intrinsic ops and their attributes: TVM's `tvm.ir.register_op_attr`.

An intrinsic op is a name that a `Call` carries (`exp`, `popcount`, or a user's own
`mylog`). tdsl's own ops are known to every code generator; a user's op exists once an
attribute is registered for it, as in TVM ("new op registration is triggered by
registering an attribute of the op"), and `call_intrin` builds calls of it.

The attributes acted on:

- `"<target>.FLowerIntrinsic"` (`"cuda.FLowerIntrinsic"`, ...): the rule `f(call) -> Expr`
  that `lower_intrinsics` applies for that target kind (`register_intrin_lowering` is
  this attribute); `"default.FLowerIntrinsic"` (or plain `"FLowerIntrinsic"`) applies to
  every target without a rule of its own.
- `"TCallEffectKind"`: a `CallEffectKind`; kept for TVM code that declares it (every
  intrinsic call in tdsl is treated as pure).

Any other attribute is stored and readable with `get_op_attr`. Registrations have TVM's
levels: a higher level replaces an attribute, a lower one leaves it, the same level
raises (unless `override=True`). Op names may be written as TVM writes them (`tir.exp`).
"""
from __future__ import annotations

import enum
from typing import Any, Callable, Dict, Tuple

from .. import dtype as dt
from ..errors import TdslError
from . import expr as E

DEFAULT_LEVEL = 10
LOWER_ATTR = "FLowerIntrinsic"

# tdsl's own ops, which the code generators map themselves
_CLASSIFY = ("isnan", "isinf", "isfinite")
BUILTIN_OPS = frozenset(E.FLOAT_INTRINSICS + E.BINARY_INTRINSICS + E.INT_INTRINSICS
                        + _CLASSIFY + ("likely",))

_attrs: Dict[Tuple[str, str], Tuple[Any, int]] = {}


class CallEffectKind(enum.IntEnum):
    """TVM's `tir.CallEffectKind`: what a call may do besides returning its value."""
    ExprAnnotation = 0
    Pure = 1
    ReadState = 2
    UpdateState = 3
    Opaque = 4
    Embedded = 5
    ControlJump = 6


def short_name(name, what="register_op_attr") -> str:
    """`name` without TVM's `tir.` prefix; a non-empty identifier."""
    if not isinstance(name, str) or not name:
        raise TdslError(f"{what}: the op name must be a string such as 'tir.exp', got {name!r}")
    short = name[4:] if name.startswith("tir.") else name
    if not short.isidentifier():
        raise TdslError(f"{what}: the op name {name!r} is not an identifier (after 'tir.')")
    return short


def _attr_key(key):
    if not isinstance(key, str) or not key:
        raise TdslError(f"register_op_attr: the attribute name must be a string such as "
                        f"'TCallEffectKind' or 'cuda.FLowerIntrinsic', got {key!r}")
    return "default." + LOWER_ATTR if key == LOWER_ATTR else key


def register_op_attr(op_name, attr_key, value=None, level=DEFAULT_LEVEL, override=False):
    """Sets attribute `attr_key` of op `op_name` (which it registers if new). Without
    `value`, a decorator. A registration at the level the attribute already has raises
    unless `override=True`; a lower level leaves the attribute as it is (TVM's rule)."""
    name = short_name(op_name)
    key = _attr_key(attr_key)
    if not isinstance(level, int) or isinstance(level, bool):
        raise TdslError(f"register_op_attr('{name}', '{key}'): level must be an int, got {level!r}")
    if value is None:
        return lambda v: (register_op_attr(op_name, attr_key, v, level, override), v)[1]
    if key.endswith("." + LOWER_ATTR) and not callable(value):
        raise TdslError(f"register_op_attr('{name}', '{key}'): the rule must be a function of "
                        f"the Call, got {value!r}")
    if key == "TCallEffectKind" and not isinstance(value, (CallEffectKind, int)):
        raise TdslError(f"register_op_attr('{name}', 'TCallEffectKind'): expected a "
                        f"tdsl.tir.CallEffectKind, got {value!r}")
    old = _attrs.get((name, key))
    if old is not None and not override:
        if old[1] == level:
            raise TdslError(f"register_op_attr: '{name}' already has '{key}' at level {level}; "
                            "pass a higher level or override=True to replace it")
        if old[1] > level:
            return value
    _attrs[(name, key)] = (value, level)
    return value


def get_op_attr(op_name, attr_key, default=None):
    """The value of attribute `attr_key` of op `op_name`, or `default`."""
    hit = _attrs.get((short_name(op_name, "get_op_attr"), _attr_key(attr_key)))
    return default if hit is None else hit[0]


def remove_op(op_name):
    """Drops every attribute registered for `op_name` (a user's op is then unknown)."""
    name = short_name(op_name, "remove_op")
    for key in [k for k in _attrs if k[0] == name]:
        del _attrs[key]


def is_registered(name) -> bool:
    """Whether `name` is one of tdsl's ops or has a registered attribute."""
    short = name[4:] if name.startswith("tir.") else name
    return short in BUILTIN_OPS or any(n == short for n, _ in _attrs)


def user_ops():
    """The names of the registered ops that are not tdsl's own."""
    return sorted({n for n, _ in _attrs if n not in BUILTIN_OPS})


def is_user_op(name) -> bool:
    """A registered op that no code generator knows: it needs a lowering rule."""
    return name not in BUILTIN_OPS and any(n == name for n, _ in _attrs)


def register_intrin_lowering(op_name, target, f=None, level=DEFAULT_LEVEL, override=False):
    """Lowers intrinsic `op_name` with `f(call) -> Expr` for functions built for `target`
    ("llvm", "c", "cuda", "opencl"; "default" for every target without its own rule).
    Without `f`, a decorator. TVM's `register_op_attr(op, target + ".FLowerIntrinsic", f,
    level)`: a second rule at the same level needs `override=True`."""
    name = short_name(op_name, "register_intrin_lowering")
    if not isinstance(target, str) or not target.strip():
        raise TdslError(f"register_intrin_lowering('{name}'): target must be a target kind "
                        f"such as 'cuda', got {target!r}")
    kind = target.split()[0]
    if f is None:
        return lambda fn: (register_intrin_lowering(op_name, target, fn, level, override), fn)[1]
    if not callable(f):
        raise TdslError(f"register_intrin_lowering('{name}', '{kind}'): the rule must be a "
                        f"function of the Call, got {f!r}")
    key = f"{kind}.{LOWER_ATTR}"
    old = _attrs.get((name, key))
    if old is not None and old[1] == level and not override:
        raise TdslError(f"register_intrin_lowering: '{name}' already has a rule for target "
                        f"'{kind}'; pass override=True to replace it (or a higher level)")
    return register_op_attr(name, key, f, level, override=True if old is None else override)


def remove_intrin_lowering(op_name, target):
    """Drops the rule for `op_name` on `target` (if any)."""
    name = short_name(op_name, "remove_intrin_lowering")
    _attrs.pop((name, f"{target.split()[0]}.{LOWER_ATTR}"), None)


def lowering_rule(name, kind) -> Callable | None:
    """The rule for op `name` on target `kind`: its own, else the default one."""
    hit = _attrs.get((name, f"{kind}.{LOWER_ATTR}")) or _attrs.get((name, f"default.{LOWER_ATTR}"))
    return None if hit is None else hit[0]


def lowering_rules():
    """[((op, kind), rule)] of every registered lowering rule, sorted."""
    n = len(LOWER_ATTR) + 1
    return sorted(((op, key[:-n]), v[0]) for (op, key), v in _attrs.items()
                  if key.endswith("." + LOWER_ATTR))


def call_intrin(dtype, op_name, *args) -> E.Expr:
    """A call of intrinsic op `op_name` returning `dtype` (TVM's `tir.call_intrin`): one
    of tdsl's (`"tir.exp"`) or one registered with `register_op_attr`."""
    name = short_name(op_name, "call_intrin")
    if not is_registered(name):
        raise TdslError(f"call_intrin: unknown op '{op_name}'; register it first, e.g. "
                        f"tdsl.ir.register_op_attr('tir.{name}', 'TCallEffectKind', "
                        "tdsl.tir.CallEffectKind.Pure), and give it a lowering rule with "
                        "register_intrin_lowering")
    dtype = dt.check(dtype)
    if name in BUILTIN_OPS:
        if len(args) != (2 if name in E.BINARY_INTRINSICS or name == "ldexp" else 1):
            raise TdslError(f"call_intrin: '{name}' takes "
                            f"{2 if name in E.BINARY_INTRINSICS else 1} argument(s), got {len(args)}")
        out = E.classify(name, args[0]) if name in _CLASSIFY else \
            E.likely(E.convert(args[0])) if name == "likely" else E.call(name, *args)
        if out.dtype != dtype:
            raise TdslError(f"call_intrin: '{name}' of these arguments returns {out.dtype}, "
                            f"not {dtype}")
        return out
    return E.Call(name, tuple(E.convert(a) for a in args), dtype)
