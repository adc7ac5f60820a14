"""Sealed files: libraries and cache entries that are checked before they are used.

A sealed file is its payload followed by a 48-byte trailer: the payload's SHA-256, its
length (little-endian u64) and the magic `TDSLSEAL`. Mapping a truncated shared object
kills the process with SIGBUS when the missing pages are touched, and a flipped byte can
do anything, so every library tdsl writes (`export_library`, the disk cache) is sealed and
every one it loads is unsealed first: a short, altered or foreign file raises
`LibraryError` instead. ELF loaders ignore bytes past the last segment, so the
trailer does not disturb `dlopen`; tdsl still loads the verified payload, not the file.

`dlopen_bytes(payload)` maps a library from memory: it writes a private temporary copy,
opens it and unlinks it at once (the mapping keeps the inode alive), so no temporary file
outlives the call. The copy is named after the payload's hash: glibc hands back an
already-loaded library when a path is reused, which is then exactly the same code.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import secrets
import struct
import tempfile
import threading

from ..errors import LibraryError

MAGIC = b"TDSLSEAL"
_TRAILER = struct.Struct("<32sQ8s")
TRAILER_SIZE = _TRAILER.size


def seal(payload: bytes) -> bytes:
    """`payload` with its checksum trailer appended."""
    return payload + _TRAILER.pack(hashlib.sha256(payload).digest(), len(payload), MAGIC)


def unseal(data: bytes, what: str) -> bytes:
    """The payload of a sealed file; `LibraryError` naming `what` if it is not intact."""
    if len(data) < TRAILER_SIZE or data[-len(MAGIC):] != MAGIC:
        raise LibraryError(f"{what}: not a complete tdsl file ({len(data)} bytes, no tdsl trailer "
                           "at the end): it is truncated, or was not written by tdsl")
    digest, size, _ = _TRAILER.unpack(data[-TRAILER_SIZE:])
    payload = data[:-TRAILER_SIZE]
    if size != len(payload):
        raise LibraryError(f"{what}: the file records {size} bytes of content but holds "
                           f"{len(payload)}: it was cut or extended")
    if hashlib.sha256(payload).digest() != digest:
        raise LibraryError(f"{what}: checksum mismatch: the file was altered after tdsl wrote it")
    return payload


def read_sealed(path: str, what: str = None) -> bytes:
    """The verified payload of the sealed file at `path`."""
    what = what or path
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise LibraryError(f"no such library: {path}") from None
    except OSError as e:
        raise LibraryError(f"cannot read {path}: {e.strerror or e}") from None
    return unseal(data, what)


def write_atomic(path: str, data: bytes):
    """Writes `data` to `path` through a temporary file in the same folder and a rename,
    so readers see the old file or the complete new one, never a partial write. The file
    gets the usual permissions (0666 less the umask), as `open()` would give it."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = os.path.join(d, f".tmp-{os.getpid()}-{secrets.token_hex(6)}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


_dl_lock = threading.Lock()


def dlopen_bytes(payload: bytes, what: str, opener=None):
    """Maps the shared object `payload`; returns `opener(path)` (default `ctypes.CDLL`).
    The temporary file is gone when this returns."""
    opener = opener or ctypes.CDLL
    name = f"tdsl_{hashlib.sha256(payload).hexdigest()[:32]}_{os.getpid()}.so"
    path = os.path.join(tempfile.gettempdir(), name)
    with _dl_lock:
        try:
            write_atomic(path, payload)
        except OSError as e:
            raise LibraryError(f"{what}: cannot write a temporary copy to load: {e}") from None
        try:
            return opener(path)
        except (OSError, RuntimeError) as e:   # RuntimeError: llvmlite's loader
            raise LibraryError(f"cannot load {what}: {e}") from None
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass
