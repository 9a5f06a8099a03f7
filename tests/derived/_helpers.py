"""Helpers of the derived suite: second processes (``tests.kit.proc``), raw SQLite reads, at-rest
probes, read-path checks."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from tests.kit.proc import run_json
from tests.kit.stores import Location

from cenotaph import Record, Store
from cenotaph.index.embedder import HashingEmbedder, l2_normalise, memory_text, value_text

DB_FILE = "cenotaph.db"
VECTOR_WINDOW = 32  # bytes (8 float32s) of an embedding searched for at a time


def _where(location: Location | Path | str) -> dict[str, Any] | str:
    return location.to_json() if isinstance(location, Location) else str(location)


def forget_in_child(
    location: Location | Path | str, scope: str, key: str | None, mode: str, *, purge: bool = False
) -> dict[str, Any]:
    """``forget`` in a real second process (``key`` None: the whole scope); its request's id,
    version and state."""
    result: dict[str, Any] = run_json(
        "forget",
        location=_where(location),
        scope=scope,
        key=key,
        mode=mode,
        auto_purge="sync" if purge else "off",
    )
    return result


def forget_subject_in_child(location: Location | Path | str, subject: str) -> dict[str, Any]:
    result: dict[str, Any] = run_json("forget-subject", location=_where(location), subject=subject)
    return result


def write_in_child(location: Location | Path | str, scope: str, key: str, value: Any) -> dict[str, Any]:
    """``write`` in a real second process; the record's id and version."""
    result: dict[str, Any] = run_json("write", location=_where(location), scope=scope, key=key, value=value)
    return result


@contextlib.contextmanager
def raw_db(directory: Path) -> Iterator[sqlite3.Connection]:
    """A plain connection to a *closed* store's database (reading or tampering)."""
    path = directory / DB_FILE
    assert path.is_file(), path
    with contextlib.closing(sqlite3.connect(path, isolation_level=None, timeout=30.0)) as conn:
        yield conn


# -- at-rest probes ---------------------------------------------------------------------------
def text_forms(text: str) -> list[bytes]:
    """Plain UTF-8, hex (lower and upper) and UTF-16-LE forms of ``text`` (S1)."""
    raw = text.encode("utf-8")
    return [raw, raw.hex().encode(), raw.hex().upper().encode(), text.encode("utf-16-le")]


def embedding_bytes(value: object, key: str = "", metadata: Mapping[str, Any] | None = None) -> list[bytes]:
    """The float32 bytes the store computes for a record of this key, value and metadata
    (``memory_text``): the default embedder's row, and that row normalised again as the in-memory
    index holds it (they usually agree to the bit)."""
    row = HashingEmbedder().embed([memory_text(key, value, metadata)])[0]
    forms = [row.astype("<f4").tobytes(), l2_normalise(row[np.newaxis, :])[0].astype("<f4").tobytes()]
    return list(dict.fromkeys(forms))


def vector_windows(value: object, key: str = "", metadata: Mapping[str, Any] | None = None) -> list[bytes]:
    """Every float-aligned 32-byte window of a record's embedding that could not match by chance.

    Skipped: windows that are all zero or one byte repeated (the brief's rule), and also windows with
    fewer than 8 non-zero bytes (one float among zeros: zeroed SQLite pages hold such runs by
    accident). A leaked vector leaks all of its windows, so this loses no detection power.
    """
    out: list[bytes] = []
    for raw in embedding_bytes(value, key, metadata):
        assert len(raw) == 4 * HashingEmbedder().dim
        for start in range(0, len(raw) - VECTOR_WINDOW + 1, 4):
            window = raw[start : start + VECTOR_WINDOW]
            if len(set(window)) == 1 or sum(b != 0 for b in window) < 8:
                continue
            out.append(window)
    assert len(out) >= 10, "the embedding should have many informative windows"
    return list(dict.fromkeys(out))


# -- read path ----------------------------------------------------------------------------------
def visible_ids(store: Store, scope: str, query: str) -> set[str]:
    """Ids ``search`` returns for ``query`` from ``scope`` and everything under and above it."""
    return {h.record.id for h in store.search(scope, query, k=1000, include_descendants=True)}


def assert_unreadable(store: Store, record: Record, query: str | None = None) -> None:
    """``record`` is returned by no read path: read (both ways), get, list, search, session, export."""
    resolved = store.read(record.scope, record.key)  # may fall through to an ancestor's own record
    assert resolved is None or resolved.id != record.id
    assert store.read(record.scope, record.key, fallthrough=False) is None
    assert store.get(record.id) is None
    assert record.id not in {r.id for r in store.list(record.scope, include_descendants=True)}
    root = record.scope.split("/")[0]
    assert record.id not in {r.id for r in store.list(root, include_descendants=True)}
    text = query if query is not None else value_text(record.value)
    assert record.id not in visible_ids(store, record.scope, text)
    assert record.id not in visible_ids(store, root, text)
    with store.session(record.scope) as session:
        assert session.get(record.id) is None
        assert session.read(record.scope, record.key, fallthrough=False) is None
        assert record.id not in {h.record.id for h in session.search(record.scope, text, k=1000)}
        assert record.id not in session.read_set
    for subject in record.subjects:
        export = store.export_subject(subject)
        exported = [r["id"] for r in (*export["records"], *export["derived_records"])]
        assert record.id not in exported
