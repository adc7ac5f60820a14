"""No tdsl module reaches into another one's private (`_`-prefixed) names.

Read with `ast` from every module under tdsl/, as tests/test_layers.py reads the imports.
A hit is one of:

- an import of a `_name` from another tdsl module (`from .bound import _helper`);
- `mod._name` where `mod` names a tdsl module the file imported (`topi._dim(...)`);
- `obj._name` where no class of the file itself defines `_name` (a method, a class
  attribute, a `self._name = ...` in one of its methods) but another tdsl module does:
  the name belongs to a class of that module (`low._wrap(...)`,
  `sched._insert_stage(...)`). That holds for `self._name` too: a mixin calling its
  partner's private method. A `_name` that no tdsl module defines belongs to a library
  (llvmlite's `IRBuilder._anchor`, a namedtuple's `_replace`) and is not this test's
  business. Setting `obj._name = ...` on another module's object counts as reaching in.

Dunder names are public.
"""
import ast
import sys
from collections import defaultdict

import pytest

from test_layers import MODULES, ROOT, _target


def _private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _own_names(tree):
    """Underscore names the file's own classes define: methods, nested classes and
    attributes of a class body, and attributes its methods set on `self` or `cls`."""
    own = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(item.name)
            elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                for t in item.targets if isinstance(item, ast.Assign) else [item.target]:
                    own |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
        for item in ast.walk(node):
            if isinstance(item, ast.Attribute) and isinstance(item.ctx, ast.Store) \
                    and isinstance(item.value, ast.Name) and item.value.id in ("self", "cls"):
                own.add(item.attr)
    return {n for n in own if _private(n)}


_BY_NAME = {"getattr": False, "hasattr": False, "setattr": True, "delattr": True}


def _attribute_uses(tree):
    """(line, receiver, name, whether it sets) of every `obj._name`, and of every
    getattr/hasattr/setattr/delattr of `obj` with a constant `"_name"`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            yield node.lineno, node.value, node.attr, isinstance(node.ctx, (ast.Store, ast.Del))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in _BY_NAME and len(node.args) >= 2 \
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str) \
                and _private(node.args[1].value):
            yield node.lineno, node.args[0], node.args[1].value, _BY_NAME[node.func.id]


def _stored_names(tree):
    """Underscore attributes the file sets on any object (`t._info = ...`)."""
    return {name for _, _, name, store in _attribute_uses(tree) if store}


def _module_aliases(module, is_package, tree):
    """name -> tdsl module, for the names the file binds to a tdsl module."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "tdsl":
                    if a.asname:
                        aliases[a.asname] = a.name
                    else:
                        aliases["tdsl"] = "tdsl"
        elif isinstance(node, ast.ImportFrom):
            base = _target(module, is_package, node, ast.alias(name="*"))
            for a in node.names:
                t = _target(module, is_package, node, a)
                if t is not None and t != base:      # the name is a module itself
                    aliases[a.asname or a.name] = t
    return aliases


def _dotted(node, aliases):
    """The tdsl module an expression names (`arith`, `tdsl.schedule.nest`), or None."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, aliases)
        if base is not None and base + "." + node.attr in MODULES:
            return base + "." + node.attr
    return None


def _tree(path):
    return ast.parse(path.read_text(), str(path))


def _definers():
    """`_name` -> the tdsl modules whose classes define it or that set it on an object."""
    out = defaultdict(set)
    for module, path in MODULES.items():
        tree = _tree(path)
        for name in _own_names(tree) | _stored_names(tree):
            out[name].add(module)
    return out


def hits_of(module, definers, path=None):
    """["path:line: what"] for one module (read from `path` when given), by line."""
    path = path or MODULES[module]
    rel = path.relative_to(ROOT.parent) if path.is_relative_to(ROOT.parent) else path.name
    tree = _tree(path)
    is_package = path.name == "__init__.py"
    own = _own_names(tree)
    aliases = _module_aliases(module, is_package, tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for a in node.names:
                t = _target(module, is_package, node, a)
                if t is not None and t != module and _private(a.name):
                    out.append((node.lineno, f"imports {a.name} from {t}"))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "tdsl" and any(_private(p) for p in a.name.split(".")):
                    out.append((node.lineno, f"imports {a.name}"))
    for line, recv, name, store in _attribute_uses(tree):
        mod = _dotted(recv, aliases)
        if mod is not None:
            if mod != module:
                out.append((line, f"{mod}.{name}"))
        elif name not in own and definers.get(name, set()) - {module}:
            where = ", ".join(sorted(definers[name] - {module}))
            out.append((line, f"{ast.unparse(recv)}.{name} (defined in {where})"))
        elif name not in own and store:
            out.append((line, f"{ast.unparse(recv)}.{name} = ... (on an object of another "
                              "module)"))
    return [f"{rel}:{line}: {what}" for line, what in sorted(out)]


def test_no_private_names_of_other_modules():
    definers = _definers()
    hits = [h for m in sorted(MODULES) for h in hits_of(m, definers)]
    assert hits == [], "private names of other modules:\n" + "\n".join(hits)


def test_the_check_can_fail(tmp_path):
    src = ("from .bound import _helper, public\n"
           "from .. import arith\n"
           "class K:\n"
           "    def __init__(self):\n"
           "        self._mine = 1\n"
           "    def f(self, low, t, b):\n"
           "        self._mine, self.__dict__, t._replace(), b._anchor\n"
           "        low._wrap(1)\n"
           "        self._partner()\n"
           "        t._info = 2\n"
           "        getattr(low, '_wrap', None)\n"
           "        return arith._dim\n")
    path = tmp_path / "probe.py"
    path.write_text(src)
    definers = {"_wrap": {"tdsl.schedule.schedule_ops"}, "_partner": {"tdsl.autosched.cpu"}}
    got = [h.split(": ", 1)[1] for h in hits_of("tdsl.schedule.probe", definers, path)]
    assert got == ["imports _helper from tdsl.schedule.bound",
                   "low._wrap (defined in tdsl.schedule.schedule_ops)",
                   "self._partner (defined in tdsl.autosched.cpu)",
                   "t._info = ... (on an object of another module)",
                   "low._wrap (defined in tdsl.schedule.schedule_ops)",
                   "tdsl.arith._dim"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
