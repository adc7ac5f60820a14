"""The runtime's modules import one another without a cycle (lazy imports inside functions
included): each has one responsibility and sits above the ones it uses."""
import ast
import os

RUNTIME = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tdsl", "runtime")


def _imports(name):
    tree = ast.parse(open(os.path.join(RUNTIME, name + ".py")).read())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module.split(".")[0])
            else:
                out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 2 and node.module \
                and node.module.startswith("runtime"):
            parts = node.module.split(".")
            out.update([parts[1]] if len(parts) > 1 else [a.name for a in node.names])
    return out


def test_no_import_cycles_in_the_runtime():
    mods = {f[:-3] for f in os.listdir(RUNTIME) if f.endswith(".py") and f != "__init__.py"}
    graph = {m: _imports(m) & mods for m in mods}
    assert "cpu" not in graph["aot"] and "aot" not in graph["cpu"]
    done, stack = set(), []

    def visit(m):
        if m in stack:
            raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(m):] + [m]))
        if m in done:
            return
        stack.append(m)
        for n in sorted(graph[m]):
            visit(n)
        stack.pop()
        done.add(m)
    for m in sorted(mods):
        visit(m)
