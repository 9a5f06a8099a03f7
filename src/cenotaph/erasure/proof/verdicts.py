"""Where an erasure request stands: why it is not verified, whether purging again can change
that, and what to do -- the words ``status``, ``wait``, ``confirm_erasure``, ``rotate_keys`` and
``doctor`` share, so none of them advises a purge that changes nothing.

A request the verifying scan could not conclude is *stuck* when purging again cannot verify it
until someone acts: residue that survived a full rewrite of the database (a live row the store
does not write holds a copy), a file the store does not write holding one, a failed positive control,
probes that can no longer be opened, rows of its target that no erasure will remove, or an
earlier erasure of the same target that is stuck itself. Every verdict records what releases it.
An open reader blocking WAL truncation is not stuck: it clears when the reader goes away.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from ...backends import ops
from ...backends.base import Backend, ErasureRow
from ...model import ErasureState, Layer, LayerState, Mode
from ..planning.probes import ProbeSample
from .scanner import ScanResult

__all__ = [
    "OPERATIONAL_GAP",
    "PURGE",
    "Standing",
    "Verdict",
    "judge_scan",
    "standing_in",
    "standing_of",
]

OPERATIONAL_GAP = "an operational forget never reports erasure; use mode='compliance' to erase"
PURGE = "run store.purge()"
READER = (
    "close the open read transaction that keeps the WAL (another connection or process holds it), "
    "then run store.purge()"
)
REFORGET = "forget the same target again: the new request takes its own evidence and verifies"
INVESTIGATE = (
    "check the store with store.check_integrity() (the database may have been altered) and report it"
)


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of one verifying scan for one request."""

    gap: str | None  # None: verified
    stuck: bool = False
    release: str = PURGE
    waiting_for: tuple[str, ...] = ()
    stray: tuple[str, ...] = ()  # files the store does not write that hold residue (scan names)

    @property
    def state(self) -> LayerState:
        """The scan layer's state: done, pending (waiting for another request) or failed."""
        if self.gap is None:
            return LayerState.DONE
        return LayerState.PENDING if self.waiting_for else LayerState.FAILED


def judge_scan(
    result: ScanResult,
    sample: ProbeSample | None,
    *,
    removed: int,
    remaining: Mapping[str, int],
    rewrite_tried: bool,
    waiting_for: Sequence[str],
    keyring_files: Collection[str] = (),
    database_file: Callable[[str], bool],
) -> Verdict:
    """Decide one request from its scan, its probes and what of its target is left (S4).
    ``keyring_files``: the names the scan gives the key provider's own files; ``database_file``:
    whether a scanned file is one of the database's own (``Physical.is_database_file``)."""
    if sample is None:
        return Verdict(
            "its sealed probes cannot be opened (their key, or the KEK epoch wrapping it, is gone), "
            "so no scan can prove it",
            stuck=True,
            release=REFORGET,
        )
    if result.matches:
        return _residue(result, rewrite_tried, keyring_files, database_file)
    if not result.positive_control:
        return Verdict(
            "the scanner's positive control failed, so a clean scan proves nothing",
            stuck=True,
            release="make the temporary directory writable and check store.check_integrity() passes, then "
            "run store.purge()",
        )
    if result.files == 0 or result.bytes == 0:
        return Verdict(
            "the scan read no file, so it proves nothing",
            stuck=True,
            release="check the data directory holds the store's files, then run store.purge()",
        )
    # what the forget found (sealed with its probes); for requests sealed before that was
    # recorded, what the purge removed stands in for it
    found_something = removed > 0 if sample.found is None else any(sample.found.values())
    if found_something and not sample.probes:
        return Verdict(
            "the forget removed data but took no probes of it, so a clean scan proves nothing",
            stuck=True,
            release=REFORGET,
        )
    if any(remaining.values()):
        return Verdict(
            f"{remaining.get('records', 0)} record row(s) and {remaining.get('keys', 0)} live record key(s) "
            "of its target, written before the forget, are still in the database, and no pending erasure "
            "removes them",
            stuck=True,
            release=INVESTIGATE,
        )
    if waiting_for:
        return Verdict(
            f"an earlier erasure of the same target ({', '.join(waiting_for)}) is not verified yet; this "
            "request found nothing left to erase and verifies with it",
            waiting_for=tuple(waiting_for),
        )
    return Verdict(None)


def _residue(
    result: ScanResult,
    rewrite_tried: bool,
    keyring_files: Collection[str],
    database_file: Callable[[str], bool],
) -> Verdict:
    files = list(result.matched_files)
    gap = f"{result.matches} probe match(es) in {files}"
    database = [f for f in files if database_file(f)]
    keyring = [f for f in files if f in keyring_files]
    stray = [f for f in files if f not in database and f not in keyring]
    if stray:
        return Verdict(
            gap + ": file(s) the store does not write hold bytes of what was erased",
            stuck=True,
            release=f"remove or move {stray} out of the directories the store scans, then run store.purge()",
            stray=tuple(stray),
        )
    if keyring:  # nothing the store writes there holds content: never advise removing them
        return Verdict(
            gap + ": the key provider's files hold bytes of what was erased", stuck=True, release=INVESTIGATE
        )
    if rewrite_tried:  # what the store writes in plain was set aside as bookkeeping already
        return Verdict(
            gap + ", after the database was rewritten from its live rows: a live row holds a copy of "
            "what was erased (a table or row the store does not write, added to its database file)",
            stuck=True,
            release="remove that copy from the database file, then run store.purge(); " + INVESTIGATE,
        )
    return Verdict(gap + "; the next purge rewrites the database and scans again")


@dataclass(frozen=True, slots=True)
class Standing:
    """Why a request is not verified (``gaps``), whether purging again can change that (``stuck``),
    whether an open reader blocks it (``blocked``), and what to do next."""

    gaps: tuple[str, ...]
    stuck: bool
    blocked: bool
    next_step: str | None


def standing_in(backend: Backend, row: ErasureRow) -> Standing:
    """Where ``row`` stands, the requests it waits for read from ``backend``."""

    def lookup(request_id: str) -> ErasureRow | None:
        with backend.read() as txn:
            return txn.run(ops.Erasure(request_id))

    return standing_of(row, lookup)


def standing_of(row: ErasureRow, lookup: Callable[[str], ErasureRow | None], _depth: int = 0) -> Standing:
    """Where ``row`` stands; ``lookup`` finds the requests it waits for."""
    layers = row.layer_entries
    gaps = [
        f"layer {name!r} is {layer.state}" + (f": {layer.evidence['gap']}" if "gap" in layer.evidence else "")
        for name, layer in sorted(layers.items())
        if not layer.done
    ]
    if row.mode == Mode.OPERATIONAL:
        pending = not layers[Layer.RECLAIM].done
        return Standing((OPERATIONAL_GAP, *gaps), False, False, PURGE if pending else None)
    if row.state == ErasureState.VERIFIED and not gaps:
        return Standing((), False, False, None)
    scan = row.evidence(Layer.SCAN)
    if scan.get("stuck"):
        return Standing(tuple(gaps), True, False, str(scan.get("release") or INVESTIGATE))
    for earlier_id in scan.get("waiting_for", []):
        earlier = lookup(str(earlier_id))
        if earlier is not None and earlier.state != ErasureState.VERIFIED and _depth < 64:
            waited = standing_of(earlier, lookup, _depth + 1)
            if waited.stuck:
                return Standing(
                    tuple(gaps), True, False, f"{earlier.id} cannot verify yet: {waited.next_step}"
                )
    wal = layers.get(Layer.WAL)
    if wal is None or wal.state != LayerState.PENDING or "gap" not in wal.evidence:
        return Standing(tuple(gaps), False, False, PURGE)
    # an open reader (SQLite), or what the backend says releases it (a replica behind)
    return Standing(tuple(gaps), False, True, str(wal.evidence.get("release") or READER))
