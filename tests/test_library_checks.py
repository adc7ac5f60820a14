"""Libraries are checked before they are mapped: `load_module` of any prefix of an exported
library, of one with a flipped byte, of a foreign shared object or of a text file raises
`LibraryError` (a `TdslError`); the process never dies (a truncated mapping is SIGBUS)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import tdsl
from tdsl.errors import LibraryError
from tdsl.runtime import libfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    n = tdsl.var("n")
    A = tdsl.placeholder((n,), name="A")
    B = tdsl.compute((n,), lambda i: A[i] * 3.0 + 1.0, name="B")
    s = tdsl.create_schedule(B)
    path = str(tmp_path_factory.mktemp("lib") / "k.so")
    tdsl.build(s, [A, B], name="k3").export_library(path)
    with open(path, "rb") as f:
        return path, f.read()


def _check_runs(m):
    a = np.arange(7, dtype="float32")
    b = np.zeros_like(a)
    m(a, b)
    np.testing.assert_allclose(b, a * 3 + 1)


def test_an_intact_library_loads_and_runs(exported):
    path, _ = exported
    _check_runs(tdsl.load_module(path))


def test_every_prefix_is_refused(exported, tmp_path):
    _, data = exported
    p = str(tmp_path / "cut.so")
    lengths = sorted(set(range(0, len(data), 61)) | {1, 4, 64, len(data) - libfile.TRAILER_SIZE,
                                                       len(data) - 8, len(data) - 1})
    for n in lengths:
        with open(p, "wb") as f:
            f.write(data[:n])
        with pytest.raises(LibraryError, match="not a complete tdsl file|cut or extended"):
            tdsl.load_module(p)
    assert len(lengths) > 50


def test_a_flipped_byte_is_refused(exported, tmp_path):
    _, data = exported
    p = str(tmp_path / "flipped.so")
    for pos in list(range(0, len(data), max(1, len(data) // 97))) + [len(data) - 1]:
        bad = bytearray(data)
        bad[pos] ^= 0x40
        with open(p, "wb") as f:
            f.write(bytes(bad))
        with pytest.raises(LibraryError):
            tdsl.load_module(p)


def test_foreign_text_and_missing_files_are_refused(tmp_path):
    from tdsl.runtime import ccompiler
    if ccompiler.find() is None:
        pytest.skip("no C compiler to make a foreign library")
    foreign = tmp_path / "foreign.so"
    foreign.write_bytes(ccompiler.shared_object({"f.c": "int f(void) { return 1; }\n"}, [], "test"))
    with pytest.raises(LibraryError, match="no tdsl trailer"):
        tdsl.load_module(str(foreign))
    text = tmp_path / "notes.so"
    text.write_text("hello\n")
    with pytest.raises(LibraryError):
        tdsl.load_module(str(text))
    with pytest.raises(LibraryError, match="no such library"):
        tdsl.load_module(str(tmp_path / "missing.so"))
    # a sealed file whose content is no library: refused by the loader, cleanly
    sealed = tmp_path / "sealed-text.so"
    sealed.write_bytes(libfile.seal(b"not an ELF file"))
    with pytest.raises(LibraryError, match="cannot load"):
        tdsl.load_module(str(sealed))
    assert issubclass(LibraryError, tdsl.TdslError)


def test_a_truncated_library_never_kills_the_process(exported, tmp_path):
    """Half of the file, as an interrupted copy leaves it, in a fresh process."""
    _, data = exported
    half = tmp_path / "half.so"
    half.write_bytes(data[:len(data) // 2])
    code = ("import tdsl\n"
            f"try:\n    tdsl.load_module({str(half)!r})\n"
            "except tdsl.TdslError as e:\n    print('refused:', type(e).__name__)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "refused: LibraryError"


def test_reexport_keeps_the_seal(exported, tmp_path):
    path, _ = exported
    m = tdsl.load_module(path)
    copy = str(tmp_path / "copy.so")
    m.export_library(copy)
    assert libfile.read_sealed(copy) == libfile.read_sealed(path)
    _check_runs(tdsl.load_module(copy))


def test_c_target_modules_export_sealed_libraries(tmp_path):
    A = tdsl.placeholder((5,), name="A")
    B = tdsl.compute((5,), lambda i: A[i] + 2.0, name="B")
    m = tdsl.build(tdsl.create_schedule(B), [A, B], target="c", name="plus2")
    p = str(tmp_path / "plus2.so")
    m.export_library(p)
    m2 = tdsl.load_module(p)
    a = np.arange(5, dtype="float32")
    b = np.zeros_like(a)
    m2(a, b)
    np.testing.assert_array_equal(b, a + 2)
