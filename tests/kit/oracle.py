"""Byte-level oracles for the erasure and derived tests, independent of cenotaph's own scanner.

Each runs in a child process (:mod:`tests.kit.proc`, scenarios in ``tests/kit/scenarios/oracle.py``):
a process that has a store open must never open that store's files itself (closing any descriptor
of a file drops every POSIX lock the process holds on it, SQLite's included).

- :func:`sql` runs one read-only query against a database file and returns its rows (blobs as bytes);
  :func:`write_sql` runs write statements in one transaction (the store must be closed);
- :func:`residue` looks, in every regular file under a root, for texts in plain UTF-8, hex (lower
  and upper) and UTF-16-LE form, and for any 32-byte window of given blobs (ciphertext cells);
- :func:`scan_in_child` reports which named needles occur in which file (:func:`scan_here` does the
  same in this process, once every store on the directory is closed).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tests.kit.proc import run_json
from tests.kit.scenarios.oracle import WINDOW, decode, encode, forms, scan_directory

__all__ = ["WINDOW", "copy_file", "forms", "residue", "scan_here", "scan_in_child", "sql", "write_sql"]


def sql(
    db: Path, query: str, params: Sequence[Any] = (), *, immutable: bool = False
) -> list[tuple[Any, ...]]:
    """Rows of one read-only query, run in a child. ``immutable=True`` when no process has the
    database open (then the child creates no -wal/-shm files)."""
    rows = run_json(
        "oracle-sql", db=str(db), query=query, params=[encode(p) for p in params], immutable=immutable
    )
    return [tuple(decode(v) for v in row) for row in rows]


def write_sql(db: Path, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
    """Run write statements in one transaction in a child (the store must be closed)."""
    run_json(
        "oracle-write-sql", db=str(db), statements=[[q, [encode(p) for p in ps]] for q, ps in statements]
    )


def copy_file(src: Path, dst: Path) -> None:
    """Copy one file in a child (e.g. a database file of an open store: a plain ``cp``)."""
    run_json("oracle-copy-file", src=str(src), dst=str(dst))


def residue(root: Path, *, texts: Iterable[str] = (), blobs: Iterable[bytes] = ()) -> dict[str, Any]:
    """Scan every regular file under ``root`` (in a child). Returns ``files``, ``bytes``,
    ``text_hits`` ([file, text index, form]) and ``window_hits`` ([file, blob index, file offset,
    blob offset]) where a hit is a WINDOW-byte window of a blob found in a file."""
    found: dict[str, Any] = run_json(
        "oracle-residue", root=str(root), texts=list(texts), blobs=[bytes(b).hex() for b in blobs]
    )
    return found


def scan_in_child(directory: Path, needles: dict[str, list[bytes]], workdir: Path) -> dict[str, Any]:
    """Which needles occur where under ``directory``, from a second process (safe while this
    process has the store open). ``workdir`` keeps a copy of the needles, for a failure's autopsy."""
    spec = workdir / f"needles-{len(list(workdir.glob('needles-*')))}.json"
    hexed = {name: [b.hex() for b in items] for name, items in needles.items()}
    spec.write_text(json.dumps(hexed))
    result: dict[str, Any] = run_json("oracle-scan", directory=str(directory), needles=hexed)
    return result


def scan_here(directory: Path, needles: dict[str, list[bytes]]) -> dict[str, Any]:
    """:func:`scan_in_child` in this process: only once every store on ``directory`` is closed."""
    return scan_directory(directory, needles)
