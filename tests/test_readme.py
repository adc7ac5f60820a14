"""README's Python examples run as written, in order, in one namespace."""
import os
import re


def test_readme_examples_run():
    text = open(os.path.join(os.path.dirname(__file__), "..", "README.md")).read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 2
    ns = {}
    for code in blocks:
        exec(compile(code, "README.md", "exec"), ns)
    assert "dense_relu" in ns["g"].get_source()
