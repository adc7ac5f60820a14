"""The persistent compile cache: compiled code kept on disk across processes.

Where: `$TDSL_CACHE_DIR`, else `~/.cache/tdsl`; entries live in its `v1/` folder, one
file each, named `<kind>-<key>`. `TDSL_CACHE=0` turns the cache off (nothing is read or
written); `TDSL_CACHE_MAX_MB` bounds its size (default 1024), least recently used
entries going first. `tdsl cache info` / `tdsl cache clear` inspect and empty it.

What: an entry is a list of byte strings, sealed (`libfile.seal`: size and SHA-256 in a
trailer) and written atomically (a temporary file and a rename). Several processes may
build the same kernel at once: both write the same content and the last rename wins;
a reader sees a complete file or none. A truncated or altered entry (a full disk, a
crash, a bad copy) fails its check on reading: it is deleted and counts as a miss, and
the caller rebuilds it.

Keys are SHA-256 digests of what determines the content (the caller's parts) plus
`tdsl_identity()`: the tdsl version and a digest of tdsl's own source files, so editing
tdsl (an editable install) never reads code compiled by an older tdsl. Callers add the
versions of the other tools involved (LLVM, the C compiler).

The cache is an optimisation: an unwritable folder means misses, never an error.
"""
from __future__ import annotations

import functools
import hashlib
import os
import struct
import threading
import time

from .. import version
from ..errors import LibraryError
from .libfile import seal, unseal, write_atomic

LAYOUT = "v1"
DEFAULT_MAX_MB = 1024
_STALE_TMP_S = 3600          # a temporary file this old belongs to a writer that died

stats = {"hits": 0, "misses": 0, "writes": 0, "corrupt": 0, "evicted": 0, "errors": 0}
_lock = threading.Lock()
_since_scan = {"bytes": None, "puts": 0}


def enabled() -> bool:
    return os.environ.get("TDSL_CACHE", "1").strip().lower() not in ("0", "false", "off", "no")


def directory() -> str:
    """The cache folder (it may not exist yet)."""
    base = os.environ.get("TDSL_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                            "tdsl")
    return os.path.join(os.path.abspath(base), LAYOUT)


def max_bytes() -> int:
    try:
        mb = float(os.environ.get("TDSL_CACHE_MAX_MB", DEFAULT_MAX_MB))
    except ValueError:
        mb = DEFAULT_MAX_MB
    return max(0, int(mb * 2**20))


@functools.lru_cache(maxsize=None)
def tdsl_identity() -> str:
    """The tdsl version plus a digest of the package's source files (.py, .c)."""
    root = os.path.dirname(os.path.abspath(version.__file__))
    h = hashlib.sha256(version.__version__.encode())
    for d, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(files):
            if name.endswith((".py", ".c")):
                p = os.path.join(d, name)
                h.update(os.path.relpath(p, root).encode() + b"\0")
                with open(p, "rb") as f:
                    h.update(f.read())
    return f"{version.__version__}+{h.hexdigest()[:16]}"


def key(*parts) -> str:
    """The digest of `parts` (str or bytes) and of this tdsl."""
    h = hashlib.sha256()
    for p in (tdsl_identity(),) + parts:
        b = p.encode() if isinstance(p, str) else bytes(p)
        h.update(struct.pack("<Q", len(b)))
        h.update(b)
    return h.hexdigest()


def _path(kind: str, k: str) -> str:
    return os.path.join(directory(), f"{kind}-{k}")


def _pack(parts) -> bytes:
    return b"".join(struct.pack("<Q", len(p)) + p for p in parts)


def _unpack(data: bytes, what: str):
    parts, i = [], 0
    while i < len(data):
        if i + 8 > len(data):
            raise LibraryError(f"{what}: malformed entry")
        (n,) = struct.unpack_from("<Q", data, i)
        i += 8
        if i + n > len(data):
            raise LibraryError(f"{what}: malformed entry")
        parts.append(data[i:i + n])
        i += n
    return parts


def get(kind: str, k: str):
    """The parts stored under (kind, key), or None (a miss, or an entry that failed its
    check, which is then deleted)."""
    if not enabled():
        return None
    path = _path(kind, k)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        stats["misses"] += 1
        return None
    try:
        parts = _unpack(unseal(data, path), path)
    except LibraryError:
        stats["corrupt"] += 1
        stats["misses"] += 1
        _unlink(path)
        return None
    try:
        os.utime(path)          # most recently used: evicted last
    except OSError:
        pass
    stats["hits"] += 1
    return parts


def put(kind: str, k: str, parts):
    """Stores `parts` (a list of bytes) under (kind, key); failures are only counted."""
    if not enabled():
        return
    data = seal(_pack(parts))
    try:
        write_atomic(_path(kind, k), data)
    except OSError:
        stats["errors"] += 1
        return
    stats["writes"] += 1
    with _lock:
        if _since_scan["bytes"] is not None:
            _since_scan["bytes"] += len(data)
        _since_scan["puts"] += 1
        due = (_since_scan["bytes"] is None or _since_scan["bytes"] > max_bytes()
               or _since_scan["puts"] >= 100)
    if due:
        evict()


def _unlink(path):
    try:
        os.unlink(path)
        return True
    except OSError:
        return False


def _scan():
    """[(mtime, size, path)] of the entries, and the paths of stale temporary files."""
    entries, stale = [], []
    now = time.time()
    try:
        it = os.scandir(directory())
    except OSError:
        return entries, stale
    with it:
        for e in it:
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if e.name.startswith(".tmp-"):
                if now - st.st_mtime > _STALE_TMP_S:
                    stale.append(e.path)
            elif e.is_file(follow_symlinks=False):
                entries.append((st.st_mtime, st.st_size, e.path))
    return entries, stale


def evict(limit: int = None) -> int:
    """Deletes least recently used entries until the cache holds at most `limit` bytes
    (default `max_bytes()`), and temporary files left by dead writers; returns how many
    entries went."""
    limit = max_bytes() if limit is None else limit
    entries, stale = _scan()
    for p in stale:
        _unlink(p)
    total = sum(size for _, size, _ in entries)
    gone = 0
    if total > limit:
        for _, size, p in sorted(entries):
            if total <= limit:
                break
            if _unlink(p):
                gone += 1
            total -= size
    stats["evicted"] += gone
    with _lock:
        _since_scan["bytes"], _since_scan["puts"] = total, 0
    return gone


def info() -> dict:
    """The cache's folder, whether it is on, its bound, and its entries by kind."""
    entries, _ = _scan()
    kinds = {}
    for _, size, p in entries:
        kind = os.path.basename(p).split("-", 1)[0]
        n, b = kinds.get(kind, (0, 0))
        kinds[kind] = (n + 1, b + size)
    return {"directory": directory(), "enabled": enabled(), "max_bytes": max_bytes(),
            "entries": len(entries), "bytes": sum(s for _, s, _ in entries), "kinds": kinds}


def clear() -> int:
    """Deletes every entry; returns how many."""
    entries, _ = _scan()
    gone = sum(_unlink(p) for _, _, p in entries)
    with _lock:
        _since_scan["bytes"], _since_scan["puts"] = None, 0
    return gone
