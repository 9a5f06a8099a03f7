"""The physical-erasure contract: what a backend does to bytes, so ``erasure/`` never knows how.

Deleting a row removes it from what queries see; the bytes it occupied may live on in free
space, a log, a replica or a copy. Each backend says which layers of a request it proves and how
(:attr:`Physical.layers`), and does the engine-specific work behind five calls the erasure side
makes: :meth:`Physical.reclaim` after rows are deleted, :meth:`Physical.scan_pages` where the
server's pages are not files the scan reads, :meth:`Physical.rewrite` when a scan
found residue in the database's own files, :meth:`Physical.scan_sources` (what the verifying
scan reads, and what it cannot reach), :meth:`Physical.snapshot` for a backup, and the
:class:`DirectoryFormat` of a data directory (is it a store, restore's files, the doctor's
checks), known without opening a store.

The SQLite implementation is ``backends/sqlite/physical.py``; a backend exposes its own as
``backend.physical``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from ..model import Layer
from .base import LayerEntry

__all__ = [
    "Check",
    "DirectoryFormat",
    "LayerProof",
    "Outcome",
    "PageScan",
    "Physical",
    "Reclaimed",
    "ScanGap",
    "ScanSources",
]

Outcome = Literal["ok", "warn", "fail"]


@dataclass(frozen=True, slots=True)
class Check:
    """One line of ``cenotaph doctor``: a name, ok / warn / fail, and what was found."""

    name: str
    status: Outcome
    detail: str


@dataclass(frozen=True, slots=True)
class LayerProof:
    """A layer of a compliance request this backend proves, and how (what its evidence means)."""

    layer: Layer
    how: str


@dataclass(frozen=True, slots=True)
class Reclaimed:
    """What :meth:`Physical.reclaim` achieved: whether every freed byte is now unreachable, how
    many bytes may still hold freed content, and the request layers it settles (their state and
    content-free evidence, as a purge records them in every pending request)."""

    done: bool
    bytes_left: int
    layers: Mapping[str, LayerEntry] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ScanGap:
    """A place erased bytes may be that the verifying scan cannot read, and what covers it."""

    what: str
    covered_by: str

    def to_dict(self) -> dict[str, str]:
        return {"what": self.what, "covered_by": self.covered_by}


@dataclass(frozen=True, slots=True)
class ScanSources:
    """What a verifying scan reads for a backend: directories scanned whole (every regular file
    under each, recursively), keyed by the prefix the scan gives their files' names (``""`` for
    the data directory), and the places it cannot reach."""

    roots: Mapping[str, Path]
    gaps: tuple[ScanGap, ...] = ()


@dataclass(frozen=True, slots=True)
class PageScan:
    """What one page scan read (relations, pages, bytes, seconds), the probes it found, or why it
    could not read the pages (``gap``, with what releases it)."""

    tables: int = 0
    relations: int = 0
    pages: int = 0
    size: int = 0  # bytes read
    seconds: float = 0.0
    matched_probes: frozenset[bytes] = frozenset()
    matched_relations: tuple[str, ...] = ()
    gap: str | None = None
    release: str | None = None
    vacuumed: tuple[str, ...] = ()

    def evidence(self, probes: Sequence[bytes]) -> dict[str, object]:
        """Content-free evidence for a request whose probes are ``probes``."""
        if self.gap is not None:
            return {"gap": self.gap, "release": self.release or ""}
        found = [p for p in probes if p in self.matched_probes]
        out: dict[str, object] = {
            "tables": self.tables,
            "relations": self.relations,
            "pages": self.pages,
            "bytes": self.size,
            "seconds": round(self.seconds, 3),
            "vacuumed": len(self.vacuumed),
            "probes": len(probes),
            "matches": len(found),
        }
        if found:
            out["matched_relations"] = list(self.matched_relations)
            out["gap"] = (
                f"{len(found)} probe(s) of this request are still in the server's pages "
                f"({', '.join(self.matched_relations)})"
            )
            out["release"] = "run store.purge() again (it rewrites the tables with VACUUM FULL)"
        return out


class DirectoryFormat(Protocol):
    """How a backend lays out a data directory, known without opening a store there: whether it
    holds one, which of its files this process may not write, a snapshot's files (a backup
    directory), restoring one, and the doctor's checks of the engine."""

    def holds_store(self, directory: Path) -> bool:
        """Does ``directory`` hold a store's database (not merely a keyring, say)?"""
        ...

    def unwritable(self, directory: Path) -> list[Path]:
        """The directory and store files this process may not write (any: the store opens read-only)."""
        ...

    def snapshot_files(self, directory: Path) -> list[Path]:
        """The files :meth:`Physical.snapshot` writes into ``directory`` (whether they exist yet or not)."""
        ...

    def holds_snapshot(self, directory: Path) -> bool:
        """Does ``directory`` hold a snapshot's files (a backup's copy of the database)?"""
        ...

    @property
    def restored_files(self) -> frozenset[str]:
        """The names a restore copies into its target, or the restored store creates there
        before its first commit: what an interrupted or refused restore removes."""
        ...

    def install_snapshot(self, src: Path, target: Path) -> None:
        """Copy the snapshot in ``src`` into ``target`` (which holds none of :attr:`restored_files`),
        each file durable."""
        ...

    def settings_checks(self, directory: Path) -> list[Check]:
        """The engine's erasure settings on a fresh connection (the store's database, else a
        temporary one)."""
        ...

    def integrity_check(self, directory: Path) -> Check:
        """The engine's own check of the store's database file(s)."""
        ...

    def version_checks(self) -> list[Check]:
        """The engine's version(s), for the doctor's report."""
        ...

    def tombstone_targets(self, directory: Path) -> list[bytes]:
        """Every tombstone's target as the store's files hold it, read straight from them, as
        anyone who copied the directory would (``cenotaph demo`` shows each is an HMAC token)."""
        ...


class Physical(Protocol):
    """One open backend's physical erasure (``backend.physical``)."""

    @property
    def format(self) -> DirectoryFormat: ...

    @property
    def layers(self) -> tuple[LayerProof, ...]:
        """Every layer of a compliance request this backend proves, in order; all but
        ``Layer.SCAN`` must be done before a purge hands the request to the verifying scan."""
        ...

    def reclaim(self) -> Reclaimed:
        """Make the bytes of rows just deleted unreachable (no log or free space the engine may
        read back keeps them); never waits long for a blocker (an open reader), says so instead."""
        ...

    def rewrite(self) -> bool:
        """Rebuild the database from its live rows, so no free space keeps stale bytes; whether it
        completed (and :meth:`reclaim` with it)."""
        ...

    def scan_sources(self) -> ScanSources: ...

    def is_database_file(self, name: str) -> bool:
        """Is ``name`` (a file as the scan names it) one the engine writes, whose residue a
        :meth:`rewrite` may remove? Residue in any other file is a file the store does not write."""
        ...

    def snapshot(self, directory: Path) -> set[int]:
        """Write a consistent copy holding no freed bytes into ``directory`` (replacing what an
        earlier attempt left there); the KEK epochs its wrapped keys use, read from the copy."""
        ...

    def scan_pages(self, probes: Sequence[bytes]) -> PageScan | None:
        """Search the pages of a server the scan's files do not hold (PostgreSQL: dead tuples
        and index entries, through ``pageinspect``) for ``probes``; None where the files are the
        database (SQLite: the verifying scan reads them whole)."""
        ...

    def blocked_wait_s(self) -> float:
        """How long a caller waiting for a request waits out a blocker of :meth:`reclaim` (an open
        reader) before it reports the request blocked."""
        ...
