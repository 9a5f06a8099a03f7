"""Byte-level oracles for the erasure tests, independent of cenotaph's own scanner.

Everything that opens a file of a store runs in a CHILD process (``python _erasure_kit.py ...``):
SQLite locks with POSIX advisory locks, and POSIX drops every lock a process holds on a file when
that process closes *any* descriptor of it (see ``cenotaph/erasure/scan_worker.py``). A test that
read ``cenotaph.db`` in the process that has the store open would silently break the store's
locking. The child imports nothing of cenotaph: it is stdlib only.

- :func:`sql` runs one read-only query against a database file and returns its rows (blobs as bytes).
- :func:`residue` looks, in every regular file under a root, for texts in plain UTF-8, hex (lower
  and upper) and UTF-16-LE form, and for any 32-byte window of given blobs (ciphertext cells).

Nothing here is a test; the assertions live in the test modules.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

KIT = Path(__file__).resolve()
WINDOW = 32  # a residue is any WINDOW-byte window of a removed cell
_ANCHOR = WINDOW // 2  # file positions sampled at this stride: every WINDOW-byte match holds one anchor


# -- child-process plumbing -------------------------------------------------------------------
def _run(command: str, payload: dict[str, Any], timeout: float = 120) -> Any:
    proc = subprocess.run(
        [sys.executable, str(KIT), command],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(f"the {command} child failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def _encode(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return {"hex": bytes(value).hex()}
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"hex"}:
        return bytes.fromhex(value["hex"])
    return value


# -- sql --------------------------------------------------------------------------------------
def sql(
    db: Path, query: str, params: Sequence[Any] = (), *, immutable: bool = False
) -> list[tuple[Any, ...]]:
    """Rows of one read-only query, run in a child. ``immutable=True`` when no process has the
    database open (then the child creates no -wal/-shm files)."""
    rows = _run(
        "sql",
        {"db": str(db), "query": query, "params": [_encode(p) for p in params], "immutable": immutable},
    )
    return [tuple(_decode(v) for v in row) for row in rows]


def write_sql(db: Path, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
    """Run write statements in one transaction in a child (the store must be closed)."""
    _run(
        "write_sql",
        {"db": str(db), "statements": [[q, [_encode(p) for p in ps]] for q, ps in statements]},
    )


def copy_file(src: Path, dst: Path) -> None:
    """Copy one file in a child (e.g. a database file of an open store: a plain ``cp``)."""
    _run("copy_file", {"src": str(src), "dst": str(dst)})


def _child_copy_file(payload: dict[str, Any]) -> Any:
    import shutil

    shutil.copyfile(payload["src"], payload["dst"])
    return None


def _child_sql(payload: dict[str, Any]) -> Any:
    import sqlite3

    uri = f"file:{payload['db']}?mode=ro" + ("&immutable=1" if payload["immutable"] else "")
    conn = sqlite3.connect(uri, uri=True)
    try:
        rows = conn.execute(payload["query"], [_decode(p) for p in payload["params"]]).fetchall()
    finally:
        conn.close()
    return [[_encode(v) for v in row] for row in rows]


def _child_write_sql(payload: dict[str, Any]) -> Any:
    import sqlite3

    conn = sqlite3.connect(payload["db"], isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        for query, params in payload["statements"]:
            conn.execute(query, [_decode(p) for p in params])
        conn.execute("COMMIT")
    finally:
        conn.close()
    return None


# -- residue ----------------------------------------------------------------------------------
def forms(text: str) -> dict[str, bytes]:
    """The forms a leaked text is searched in."""
    raw = text.encode("utf-8")
    return {
        "utf-8": raw,
        "hex": raw.hex().encode(),
        "HEX": raw.hex().upper().encode(),
        "utf-16-le": text.encode("utf-16-le"),
    }


def residue(root: Path, *, texts: Iterable[str] = (), blobs: Iterable[bytes] = ()) -> dict[str, Any]:
    """Scan every regular file under ``root`` (in a child). Returns ``files``, ``bytes``,
    ``text_hits`` ([file, text index, form]) and ``window_hits`` ([file, blob index, file offset,
    blob offset]) where a hit is a WINDOW-byte window of a blob found in a file."""
    return _run(
        "residue",
        {"root": str(root), "texts": list(texts), "blobs": [bytes(b).hex() for b in blobs]},
    )


def _files(root: Path) -> list[Path]:
    found = []
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            mode = os.lstat(path).st_mode
            if stat.S_ISREG(mode):
                found.append(path)
    return sorted(found)


def _window_index(blobs: list[bytes]) -> dict[bytes, list[tuple[int, int]]]:
    index: dict[bytes, list[tuple[int, int]]] = {}
    for i, blob in enumerate(blobs):
        if len(blob) < WINDOW:
            continue
        for off in range(len(blob) - _ANCHOR + 1):
            index.setdefault(blob[off : off + _ANCHOR], []).append((i, off))
    return index


def _window_hits(
    data: bytes, blobs: list[bytes], index: dict[bytes, list[tuple[int, int]]]
) -> list[list[int]]:
    """Every WINDOW-byte window of a blob in ``data``. A match at file offset f covers the anchor at
    the first multiple of _ANCHOR >= f (it ends by f + WINDOW), so sampling anchors finds it; each
    candidate is then checked byte for byte at every alignment it can belong to."""
    hits: set[tuple[int, int, int]] = set()
    for pos in range(0, len(data) - _ANCHOR + 1, _ANCHOR):
        owners = index.get(data[pos : pos + _ANCHOR])
        if not owners:
            continue
        for i, off in owners:
            blob = blobs[i]
            for k in range(_ANCHOR):
                f, o = pos - k, off - k
                if f < 0 or o < 0 or o + WINDOW > len(blob) or f + WINDOW > len(data):
                    continue
                if data[f : f + WINDOW] == blob[o : o + WINDOW]:
                    hits.add((i, f, o))
    return [list(h) for h in sorted(hits)]


def _child_residue(payload: dict[str, Any]) -> Any:
    root = Path(payload["root"])
    texts = payload["texts"]
    needles = [(t, name, form) for t, text in enumerate(texts) for name, form in forms(text).items()]
    blobs = [bytes.fromhex(b) for b in payload["blobs"]]
    index = _window_index(blobs)
    text_hits: list[list[Any]] = []
    window_hits: list[list[Any]] = []
    total = 0
    files = _files(root)
    for path in files:
        data = path.read_bytes()
        total += len(data)
        name = path.relative_to(root).as_posix()
        for t, form_name, form in needles:
            if form in data:
                text_hits.append([name, t, form_name])
        window_hits.extend([name, *hit] for hit in _window_hits(data, blobs, index))
    return {"files": len(files), "bytes": total, "text_hits": text_hits, "window_hits": window_hits}


_COMMANDS = {
    "copy_file": _child_copy_file,
    "sql": _child_sql,
    "write_sql": _child_write_sql,
    "residue": _child_residue,
}

if __name__ == "__main__":
    result = _COMMANDS[sys.argv[1]](json.loads(sys.stdin.read()))
    sys.stdout.write(json.dumps(result))
