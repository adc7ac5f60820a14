"""Rich display of a built Module in notebooks: target, arguments, a one-line summary of
what the generated code does (vector width, parallel loops), for CUDA what ptxas says each
kernel costs (registers, spills, shared memory, occupancy), and the highlighted source."""
from __future__ import annotations

import html
import re

from ..errors import TdslError
from ..ir.html import highlight, wrap

# A notebook keeps every output it shows; a GEMM's LLVM IR alone is ~0.5 MB of HTML.
MAX_SOURCE_LINES = 200


def code_summary(mod) -> dict:
    """Facts read off the generated code: the widest vector type, and parallel loops (CPU)
    or kernels with their launch sizes (GPU)."""
    try:
        src = mod.get_source()
    except Exception:  # a backend without source text
        return {}
    widths = [int(n) for n in re.findall(r"<(\d+) x (?:float|double|half|i\d+)>", src)]
    widths += [int(n) for n in re.findall(r"\b(?:float|half|int|uint|double)(\d)\b", src)]
    widths += [int(n) for n in re.findall(r"\bv(?:load|store)(\d+)\b", src)]
    out = {"vector_width": max(widths, default=1)}
    kernels = getattr(mod, "kernels", None)
    if kernels is not None:
        out["kernels"] = [(k.name, tuple(k.grid), tuple(k.block)) for k in kernels]
    else:
        out["parallel_loops"] = len(set(re.findall(r"define [^@]*@([\w.]+_par\d+)_task", src)))
    return out


def summary_line(mod) -> str:
    s = code_summary(mod)
    if not s:
        return ""
    vec = f"vectors of {s['vector_width']} lanes" if s["vector_width"] > 1 else "scalar code only"
    if "kernels" in s:
        ks = "; ".join(f"{n} grid {'x'.join(map(str, g))} block {'x'.join(map(str, b))}"
                       for n, g, b in s["kernels"])
        return f"{vec}, {len(s['kernels'])} kernel{'s' if len(s['kernels']) != 1 else ''}: {ks}"
    par = {0: "no parallel loops", 1: "1 parallel loop"}.get(s["parallel_loops"], f"{s['parallel_loops']} parallel loops")
    return f"{vec}, {par}"


def resource_rows(mod):
    """(kernel, arch, registers, spill bytes, shared bytes, occupancy) per kernel and
    architecture when the module can say (`CUDAModule.resources()`, which runs ptxas once);
    [] for other modules or where ptxas cannot be run."""
    res = getattr(mod, "resources", None)
    if res is None:
        return []
    try:
        recs = res()
    except TdslError:   # no NVRTC or ptxas here: the display shows the rest
        return []
    return [(r.kernel, r.arch, str(r.registers), str(r.spill_bytes), str(r.shared_bytes),
             f"{r.occupancy.fraction:.0%} ({r.occupancy.limiter})") for r in recs]


RESOURCE_HEADER = ("kernel", "arch", "registers", "spill bytes", "shared bytes", "occupancy")


def _args_rows(mod):
    sig = mod.signature
    rows = []
    for p in sig.params[:sig.num_user_args]:
        shape = ", ".join(p.get("shape_text") or map(str, p.get("shape", [])))
        kind = f"({shape})" if p["kind"] == "buffer" else "scalar"
        rows.append((p["name"], p["dtype"], kind))
    return rows


def module_html(mod) -> str:
    rows = "".join(f"<tr><td>{html.escape(n)}</td><td>{d}</td><td>{html.escape(k)}</td></tr>"
                   for n, d, k in _args_rows(mod))
    src = mod.get_source()
    lines = src.splitlines()
    shown = "\n".join(lines[:MAX_SOURCE_LINES])
    if len(lines) > MAX_SOURCE_LINES:
        shown += f"\n... {len(lines) - MAX_SOURCE_LINES} more lines: get_source() has them all"
    lang = "llvm" if mod.type_key.startswith("llvm") else "c"
    kind = "tdsl.Module" if lang == "llvm" else "tdsl.DeviceModule"
    body = (f"<b>{kind}</b> <code>{html.escape(mod.name)}</code> &middot; target "
            f"<code>{html.escape(mod.type_key)}</code> &middot; {html.escape(summary_line(mod))}"
            f"<table><tr><th>argument</th><th>dtype</th><th>shape</th></tr>{rows}</table>"
            f"{_resources_html(mod)}"
            f"<details><summary>generated code ({len(src.splitlines())} lines)</summary>"
            f"{highlight(shown, lang)}</details>")
    return wrap(body)


def _resources_html(mod):
    rows = resource_rows(mod)
    if not rows:
        return ""
    head = "".join(f"<th>{h}</th>" for h in RESOURCE_HEADER)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def module_markdown(mod) -> str:
    kind = "tdsl.Module" if mod.type_key.startswith("llvm") else "tdsl.DeviceModule"
    lines = [f"**{kind}** `{mod.name}` (target `{mod.type_key}`): {summary_line(mod)}", "",
             "| argument | dtype | shape |", "| --- | --- | --- |"]
    lines += [f"| {n} | {d} | {k} |" for n, d, k in _args_rows(mod)]
    rows = resource_rows(mod)
    if rows:
        lines += ["", "| " + " | ".join(RESOURCE_HEADER) + " |",
                  "|" + " --- |" * len(RESOURCE_HEADER)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)
