"""Rich display for notebooks: loop IR, schedules and modules render as HTML and Markdown
with the expected content and highlighting markup; str() stays plain text."""
import tdsl
from tdsl.examples import gemm
from tdsl.ir.html import highlight


def _sched():
    return gemm.register_blocked(64, 64, 64, mr=8, nr=32)   # a fixed tile: the same text on every host


def test_primfunc_html_is_highlighted_ir():
    s, args = _sched()
    func = tdsl.lower(s, args)
    h = func._repr_html_()
    assert '<span class="kw">for</span>' in h
    assert '<span class="kind">vectorized</span>' in h and '<span class="kind">parallel</span>' in h
    assert "C.local" in h and "packedB" in h
    assert "<span" not in str(func)
    assert func._repr_markdown_().startswith("```python\ndef main(")


def test_schedule_html_lists_stages_loops_attach_and_trace():
    s, args = _sched()
    h = s._repr_html_()
    assert "<table>" in h
    for text in ("packedB", "C.local", "C.n.outer", "local", '<span class="kind">unrolled</span>',
                 "<i>k</i>", "s[C].fuse(m.outer, n.outer)", "cache_write(C, &#x27;local&#x27;)"):
        assert text in h, text
    md = s._repr_markdown_()
    assert "| C.local | k, m.c (unrolled)" in md


def test_module_html_summarises_generated_code():
    s, args = _sched()
    f = tdsl.build(s, args)
    h = f._repr_html_()
    assert "tdsl.Module" in h and "llvm" in h
    assert "vectors of 32 lanes" in h and "2 parallel loops" in h
    assert "<td>A</td><td>float32</td><td>(64, 64)</td>" in h
    assert '<span class="kw">define</span>' in h   # highlighted LLVM IR
    md = f._repr_markdown_()
    assert "| C | float32 | (64, 64) |" in md


def test_scalar_module_summary():
    A = tdsl.placeholder((7,), name="A")
    B = tdsl.compute((7,), lambda i: A[i] + 1.0, name="B")
    f = tdsl.build(tdsl.create_schedule(B), [A, B])
    assert "no parallel loops" in f._repr_markdown_()


def test_highlighter_escapes_and_marks_tokens():
    h = highlight("for i in range(8):\n  A[i] = B[i] < 3  # a < b", "ir")
    assert "&lt;" in h and "<" not in h.replace("<span", "").replace("</span", "").replace("<pre", "").replace("</pre", "")
    assert '<span class="com"># a &lt; b</span>' in h
    assert '<span class="num">8</span>' in h
    h = highlight("%1 = fadd fast <16 x float> %a, %b ; sum", "llvm")
    assert '<span class="ty">&lt;16 x float&gt;</span>' in h and '<span class="var">%a</span>' in h


def test_graph_html_shows_the_picture_or_the_text():
    import shutil
    import pytest
    pytest.importorskip("onnx")
    from tdsl.graph import models
    mod = tdsl.graph.optimize(tdsl.graph.from_onnx(models.mlp(batch=2, sizes=(16, 8, 4))))
    h = mod._repr_html_()
    assert "fused" in h and "nn.dense" in h
    if shutil.which("dot"):
        assert "<svg" in h
    else:
        assert '<span class="kw">def</span>' in h


def test_gpu_module_display_lists_kernels_and_launch_sizes():
    from tdsl.examples import gpu
    s, args = gpu.softmax_schedule(8, 100)
    g = tdsl.build(s, args, target="cuda", name="sm")
    md = g._repr_markdown_()
    assert md.startswith("**tdsl.DeviceModule** `sm` (target `cuda`)")
    assert "3 kernels: sm_kernel0 grid 8x1x1 block 64x1x1" in md
    s, args = gpu.elementwise_schedule(1024)
    h = tdsl.build(s, args, target="opencl")._repr_html_()
    assert "vectors of 4 lanes" in h and '<span class="kw">__kernel</span>' in h
