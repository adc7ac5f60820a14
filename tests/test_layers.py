"""The levels of tdsl hold: no import circle, and no import from a lower level to a higher one.

The order is written here once (and drawn in docs/architecture.md). Imports are read with
`ast` from every module under tdsl/, including those inside functions: a lazy import is
still a dependency. The only upward imports allowed are the plug-in points listed below.
"""
import ast
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "tdsl"

# Lowest first. A module may import modules of its own level or of any level before it.
LEVELS = (
    ("base", ("tdsl.errors", "tdsl.dtype", "tdsl.target", "tdsl.target_kind", "tdsl.gpu_arch",
              "tdsl.tiling", "tdsl.version")),
    ("ir", ("tdsl.ir",)),
    ("arith", ("tdsl.arith",)),
    ("te", ("tdsl.te", "tdsl.utils")),
    ("tir", ("tdsl.tir",)),
    ("schedule", ("tdsl.schedule",)),
    ("passes", ("tdsl.passes",)),
    ("lower", ("tdsl.lower",)),
    ("runtime", ("tdsl.runtime", "tdsl.contrib")),
    ("codegen", ("tdsl.codegen",)),
    ("build", ("tdsl.build", "tdsl.fingerprint")),
    ("autosched", ("tdsl.autosched",)),
    ("api", ("tdsl",)),
    ("autotune", ("tdsl.autotune",)),
    ("graph", ("tdsl.graph",)),
    ("apps", ("tdsl.examples", "tdsl.__main__")),
)

# (module, function) pairs whose imports may point up: the facade's lazy sub-packages
# (`tdsl.graph`, `tdsl.autotune` load on first use, so `import tdsl` stays light and the
# layers above the API can use it).
PLUGIN_POINTS = {("tdsl", "__getattr__")}


def _modules():
    mods = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


MODULES = _modules()


def level_of(module):
    best = None
    for rank, (_, prefixes) in enumerate(LEVELS):
        for prefix in prefixes:
            # "tdsl" is the package facade alone; dotted prefixes take their sub-modules
            if module == prefix or ("." in prefix and module.startswith(prefix + ".")):
                if best is None or len(prefix) > best[1]:
                    best = (rank, len(prefix))
    return None if best is None else best[0]


def _target(module, is_package, node, alias):
    """The tdsl module that `node` (one imported name `alias`) depends on."""
    if isinstance(node, ast.Import):
        name = alias.name
    else:
        base = node.module or ""
        if node.level:
            parts = module.split(".")
            if not is_package:
                parts = parts[:-1]
            parts = parts[:len(parts) - (node.level - 1)]
            base = ".".join(parts + ([base] if base else []))
        name = base + "." + alias.name if base + "." + alias.name in MODULES else base
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name if name in MODULES else None


def imports_of(module):
    """[(imported module, line, enclosing function or None)] for one module."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    out = []

    def visit(node, func):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for alias in child.names:
                    t = _target(module, path.name == "__init__.py", child, alias)
                    if t and t != module:
                        out.append((t, child.lineno, func))
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else func
            visit(child, func if func else inner)
    visit(tree, None)
    return out


def _graph():
    return {m: imports_of(m) for m in MODULES}


def test_every_module_has_a_level():
    assert [m for m in MODULES if level_of(m) is None] == []


def test_no_upward_imports():
    bad = []
    for module, deps in _graph().items():
        for dep, line, func in deps:
            if level_of(dep) > level_of(module) and (module, func) not in PLUGIN_POINTS:
                bad.append(f"{MODULES[module].relative_to(ROOT.parent)}:{line}: {module} "
                           f"({LEVELS[level_of(module)][0]}) imports {dep} ({LEVELS[level_of(dep)][0]})")
    assert bad == [], "imports from a lower level to a higher one:\n" + "\n".join(bad)


def strongly_connected(graph):
    """Tarjan's algorithm, iterative: the components with more than one module."""
    index, low, stack, on_stack, comps = {}, {}, [], set(), []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(graph[w])))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        comps.append(sorted(comp))
    return comps


def test_no_import_circles():
    graph = {m: sorted({d for d, _, func in deps if (m, func) not in PLUGIN_POINTS})
             for m, deps in _graph().items()}
    assert strongly_connected(graph) == []


def test_the_checks_can_fail():
    # the circle finder and the level order catch what they are written for
    assert strongly_connected({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]
    assert level_of("tdsl.graph.executor") > level_of("tdsl.runtime.module")
    assert level_of("tdsl") < level_of("tdsl.graph")


def test_long_modules_say_why():
    """A module past 600 lines says at its top why it is one piece."""
    long = []
    for module, path in MODULES.items():
        text = path.read_text()
        if text.count("\n") > 600:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if "one piece" not in doc:
                long.append(f"{path.relative_to(ROOT.parent)} ({text.count(chr(10))} lines)")
    assert long == []


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
