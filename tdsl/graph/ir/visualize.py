"""`Module.visualize()`: operators as nodes, tensors as edges, fused groups as one box.

Returns a `GraphView` whose `.dot` is the DOT text; in Jupyter it shows as SVG when
graphviz's `dot` is installed (`_repr_svg_`), and as the DOT text otherwise. `path=`
writes `.svg` (with `dot`) or `.dot`."""
from __future__ import annotations

import html
import shutil
import subprocess

from ...ir.html import highlight, wrap
from .nodes import Call, Const, Function, Module


def _label(n: Call):
    attrs = ", ".join(f"{k}={v}" for k, v in list(n.attrs.items())[:3])
    return n.op if not attrs else f"{n.op}\\n{attrs}"


def to_dot(mod: Module) -> str:
    lines = ["digraph tdsl {", '  rankdir=TB; node [shape=box, style="rounded,filled", fillcolor="#eef3fb", fontname="Helvetica", fontsize=10];',
             '  edge [fontname="Helvetica", fontsize=8];']
    ids = {}
    counter = [0]

    def nid(e):
        if e not in ids:
            counter[0] += 1
            ids[e] = f"n{counter[0]}"
        return ids[e]

    for p in mod.main.params:
        lines.append(f'  {nid(p)} [label="%{p.name}\\n{p.type}", shape=ellipse, fillcolor="#ffffff"];')
    for k, n in enumerate(mod.main.nodes()):
        if isinstance(n.op, Function):
            fn = n.op
            lines.append(f'  subgraph cluster_{k} {{ label="@{fn.name}"; style="rounded"; color="#4a78c2";')
            inner = {p: a for p, a in zip(fn.params, n.args)}
            local = {}
            for m in fn.nodes():
                counter[0] += 1
                local[m] = f"n{counter[0]}"
                lines.append(f'    {local[m]} [label="{_label(m)}"];')
            lines.append("  }")
            for m in fn.nodes():
                for a in m.args:
                    if a in local:
                        lines.append(f'  {local[a]} -> {local[m]} [label="{a.type.shape}"];')
                    else:
                        src = inner.get(a, a)
                        if isinstance(src, Const):
                            continue
                        lines.append(f'  {nid(src)} -> {local[m]} [label="{src.type.shape}"];')
            ids[n] = local[fn.outputs[0]]
        else:
            lines.append(f'  {nid(n)} [label="{_label(n)}"];')
            for a in n.args:
                if isinstance(a, Const):
                    continue
                lines.append(f'  {nid(a)} -> {nid(n)} [label="{a.type.shape}"];')
    for i, o in enumerate(mod.main.outputs):
        lines.append(f'  out{i} [label="output {i}\\n{o.type}", shape=ellipse, fillcolor="#ffffff"];')
        if not isinstance(o, Const):
            lines.append(f"  {nid(o)} -> out{i};")
    lines.append("}")
    return "\n".join(lines)


class GraphView:
    def __init__(self, dot: str):
        self.dot = dot

    def svg(self):
        exe = shutil.which("dot")
        if not exe:
            return None
        r = subprocess.run([exe, "-Tsvg"], input=self.dot.encode(), capture_output=True, timeout=60)
        return r.stdout.decode() if r.returncode == 0 else None

    def _repr_svg_(self):
        return self.svg()

    def _repr_html_(self):
        if shutil.which("dot"):
            return None
        return "<pre>" + html.escape(self.dot) + "</pre>"

    def __str__(self):
        return self.dot

    def save(self, path):
        svg = self.svg() if str(path).endswith(".svg") else None
        with open(path, "w") as f:
            f.write(svg if svg is not None else self.dot)
        return path


def visualize(mod: Module, path=None):
    view = GraphView(to_dot(mod))
    if path:
        view.save(path)
    return view


# the nodes do not import their pictures (this module imports them): attached here
def _repr_html_(self):
    """The picture of visualize() (SVG where graphviz's dot exists) over the text."""
    picture = self.visualize().svg()
    text = highlight(self.astext(), "ir")
    if picture is None:
        return wrap(text)
    return wrap(picture + f"<details><summary>text</summary>{text}</details>")


Module._repr_html_ = _repr_html_
Module.visualize = visualize
