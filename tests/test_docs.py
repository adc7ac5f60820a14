"""The documentation in docs/ and README.md: it builds with Sphinx with no warning (broken
cross-references included), every Python block in it runs, the API reference covers every
public name and its documented signatures are the code's, and README links only into the
repository."""
import inspect
import os
import re
import subprocess
import sys

import pytest

import tdsl

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
PAGES = sorted(os.path.relpath(os.path.join(d, f), DOCS) for d, _, fs in os.walk(DOCS)
               if "_build" not in d for f in fs if f.endswith(".md"))
DIRECTIVE = re.compile(r"^`{3,}\{py:(function|method|class|exception|data)\} ([\w.]+)(\(.*\))?\s*$", re.M)


def _read(rel):
    with open(os.path.join(DOCS, rel)) as f:
        return f.read()


def test_docs_build_with_no_warning(tmp_path):
    pytest.importorskip("myst_parser", reason="the test extra installs Sphinx and MyST")
    r = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q", "-b",
                        "html", DOCS, str(tmp_path / "html")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert os.path.exists(tmp_path / "html" / "reference" / "te.html")


@pytest.mark.parametrize("page", PAGES)
def test_python_blocks_run(page, tmp_path, monkeypatch):
    blocks = re.findall(r"^```python\n(.*?)^```", _read(page), re.S | re.M)
    monkeypatch.chdir(tmp_path)                       # examples may write files
    ns = {"__name__": "__docs__"}
    for code in blocks:
        exec(compile(code, os.path.join("docs", page), "exec"), ns)


def _documented():
    out = {}
    for page in PAGES:
        for kind, name, sig in DIRECTIVE.findall(_read(page)):
            out[name] = (kind, sig, page)
    return out


def _resolve(dotted):
    import importlib
    parts = dotted.split(".")
    obj = __import__(parts[0])
    for i, p in enumerate(parts[1:], 1):
        if not hasattr(obj, p):     # a submodule its package does not import (tdsl.graph.zoo)
            importlib.import_module(".".join(parts[:i + 1]))
        obj = getattr(obj, p)
    return obj


def public_names():
    import tdsl.autotune as at
    import tdsl.graph as G
    names = [f"tdsl.{n}" for n in dir(tdsl)
             if not n.startswith("_") and not inspect.ismodule(getattr(tdsl, n))]
    names += [f"tdsl.graph.{n}" for n in G.__all__ if n != "GraphError"]
    names += [f"tdsl.autotune.{n}" for n in at.__all__]
    names += [f"tdsl.nd.{n}" for n in ("array", "empty", "NDArray")]   # nd.cpu is tdsl.cpu
    names += ["tdsl.utils.get_const_tuple", "tdsl.target.Target"]
    return names


def test_reference_covers_the_public_api():
    documented = _documented()
    missing = [n for n in public_names() if n not in documented]
    assert not missing, f"not in docs/reference: {missing}"


def _code_signature(obj, kind):
    if kind in ("class", "exception"):
        obj = obj.__init__
    sig = inspect.signature(obj)
    params = list(sig.parameters.values())
    if kind in ("method", "class", "exception") and params and params[0].name == "self":
        params = params[1:]
    params = [p.replace(annotation=inspect.Parameter.empty) for p in params]
    return str(sig.replace(parameters=params, return_annotation=inspect.Signature.empty))


def test_documented_signatures_are_the_code():
    wrong = []
    for name, (kind, sig, page) in _documented().items():
        obj = _resolve(name)                          # every documented name exists
        if sig:
            code = _code_signature(obj, kind)
            if sig.replace('"', "'") != code:
                wrong.append(f"{page}: {name}{sig} but the code says {code}")
    assert not wrong, "\n".join(wrong)


def test_readme_links_stay_in_the_repository():
    text = open(os.path.join(ROOT, "README.md")).read()
    links = re.findall(r"\]\(([^)]+)\)", text)
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        assert "://" not in link and not link.startswith(".."), link
        assert os.path.exists(os.path.join(ROOT, link.split("#")[0])), link
