"""lower.PASSES against what describes and tests it: the architecture page names every
pass in order, every pass has its own test file here, and each phase is one lowering
knows."""
import os
import re

from pass_ir import LOWER

HERE = os.path.dirname(__file__)
PAGE = os.path.join(HERE, "..", "..", "docs", "architecture.md")


def _section():
    with open(PAGE) as fh:
        text = fh.read()
    start = text.index("## Lowering: the pass list")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def test_architecture_page_names_every_pass_in_order():
    text = _section()
    at = 0
    for p in LOWER.PASSES:
        m = re.compile(rf"`{p.name}`").search(text, at)
        assert m is not None, (f"docs/architecture.md, 'Lowering: the pass list': `{p.name}` "
                               f"(phase {p.phase}) is missing after position {at}, where "
                               "lower.PASSES has it")
        at = m.end()


def test_every_pass_has_its_own_test_file():
    missing = sorted({p.name for p in LOWER.PASSES} -
                     {f[len("test_pass_"):-3] for f in os.listdir(HERE)
                      if f.startswith("test_pass_") and f.endswith(".py")})
    assert not missing, f"no tests/passes/test_pass_<name>.py for {missing}"


def test_passes_are_named_functions_of_known_phases():
    phases = {LOWER.LOWER, LOWER.TARGET, LOWER.CPU, LOWER.GPU, LOWER.BUILD}
    for p in LOWER.PASSES:
        assert p.phase in phases and callable(p.fn) and p.name.isidentifier()
        assert set(p.options) <= set(LOWER.Options.__dataclass_fields__)
    # the build's passes come last: build() runs them on what lower() left
    tail = [p.phase == LOWER.BUILD for p in LOWER.PASSES]
    assert tail == sorted(tail)
