"""Byte-level oracles, independent of cenotaph's own scanner: the child side (stdlib only, and
pyahocorasick for :func:`scan_directory`), run through :mod:`tests.kit.oracle`.

Everything that opens a file of a store runs in a CHILD process: SQLite locks with POSIX advisory
locks, and POSIX drops every lock a process holds on a file when that process closes *any*
descriptor of it (see ``cenotaph/erasure/proof/scan_worker.py``). A test that read ``cenotaph.db`` in
the process that has the store open would silently break the store's locking.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import sys
from pathlib import Path
from typing import Any

from tests.kit.scenarios import say

WINDOW = 32  # a residue is any WINDOW-byte window of a removed cell
_ANCHOR = WINDOW // 2  # file positions sampled at this stride: every WINDOW-byte match holds one anchor


def encode(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return {"hex": bytes(value).hex()}
    return value


def decode(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"hex"}:
        return bytes.fromhex(value["hex"])
    return value


def copy_file(src: str, dst: str) -> None:
    shutil.copyfile(src, dst)


def sql(db: str, query: str, params: list[Any], immutable: bool) -> list[list[Any]]:
    uri = f"file:{db}?mode=ro" + ("&immutable=1" if immutable else "")
    conn = sqlite3.connect(uri, uri=True)
    try:
        rows = conn.execute(query, [decode(p) for p in params]).fetchall()
    finally:
        conn.close()
    return [[encode(v) for v in row] for row in rows]


def write_sql(db: str, statements: list[list[Any]]) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        for query, params in statements:
            conn.execute(query, [decode(p) for p in params])
        conn.execute("COMMIT")
    finally:
        conn.close()


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


def residue(root: str, texts: list[str], blobs: list[str]) -> dict[str, Any]:
    """Scan every regular file under ``root``: see :func:`tests.kit.oracle.residue`."""
    base = Path(root)
    needles = [(t, name, form) for t, text in enumerate(texts) for name, form in forms(text).items()]
    cells = [bytes.fromhex(b) for b in blobs]
    index = _window_index(cells)
    text_hits: list[list[Any]] = []
    window_hits: list[list[Any]] = []
    total = 0
    files = _files(base)
    for path in files:
        data = path.read_bytes()
        total += len(data)
        name = path.relative_to(base).as_posix()
        for t, form_name, form in needles:
            if form in data:
                text_hits.append([name, t, form_name])
        window_hits.extend([name, *hit] for hit in _window_hits(data, cells, index))
    return {"files": len(files), "bytes": total, "text_hits": text_hits, "window_hits": window_hits}


def scan_directory(directory: Path, needles: dict[str, list[bytes]]) -> dict[str, object]:
    """Every ``(needle name, relative path)`` whose bytes occur in a file under ``directory``."""
    import ahocorasick

    automaton = ahocorasick.Automaton()
    for name, items in needles.items():
        for item in items:
            assert item, name
            automaton.add_word(item.decode("latin-1"), name)
    automaton.make_automaton()
    matches: set[tuple[str, str]] = set()
    files = size = 0
    for path in sorted(p for p in Path(directory).rglob("*") if p.is_file()):
        data = path.read_bytes()
        files += 1
        size += len(data)
        for _, name in automaton.iter(data.decode("latin-1")):
            matches.add((name, str(path.relative_to(directory))))
    return {"files": files, "bytes": size, "matches": [list(m) for m in sorted(matches)]}


def scan(directory: str, needles: dict[str, list[str]]) -> dict[str, object]:
    """:func:`scan_directory` of hex needles (a process without the store open, so its reads
    cannot drop another process's SQLite locks)."""
    return scan_directory(
        Path(directory), {name: [bytes.fromhex(h) for h in items] for name, items in needles.items()}
    )


def hold_reader(db: str) -> None:
    """Hold ``BEGIN; SELECT count(*) FROM records;`` open on ``db`` (a WAL snapshot): prints
    ``holding COUNT``, waits until the parent closes our stdin, commits, prints ``released``."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN")
    count = conn.execute("SELECT count(*) FROM records").fetchone()[0]
    say(f"holding {count}")
    sys.stdin.read()  # hold the snapshot until the parent closes our stdin
    conn.execute("COMMIT")
    conn.close()
    say("released")
