"""Verification by scanning (S4): scan every file the store owns for each pending request's
probes, tell residue from the store's own bookkeeping, and conclude each request with a verdict
(``erasure.proof.verdicts``) recorded in its row and in the audit log.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ...backends import ops
from ...backends.base import Backend, ErasureRow, LayerEntry, Txn, dump_layers
from ...crypto.keys import KeyChain
from ...crypto.provider import KeyProvider, LocalKeyring
from ...faults import fault_point
from ...ledger.journal import anchor_audit_many
from ...ledger.plan import ForgetPlan
from ...model import ErasureState, Layer, Mode
from ..planning.planner import remains
from ..planning.probes import ProbeSample, open_probes
from .scan_worker import scan_in_child
from .scanner import ScanResult
from .verdicts import judge_scan

__all__ = ["KEYRING_LABEL", "PENDING_STATES", "Progress", "Verifier", "now_iso"]

Progress = Callable[[int, int], None]
PENDING_STATES = (ErasureState.SHREDDED, ErasureState.PURGED)  # compliance requests not verified yet
KEYRING_LABEL = "<keyring>/"  # how a scan names the files of a keyring kept outside the data directory


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


class Verifier:
    """Scans and concludes the requests a purge hands it (every purge layer done)."""

    def __init__(
        self,
        backend: Backend,
        provider: KeyProvider,
        keys: KeyChain,
        horizon: Callable[[ErasureRow], tuple[datetime | None, str]],
    ) -> None:
        self._backend = backend
        self._provider = provider
        self._keys = keys
        self._horizon = horizon  # (reached at, reason) of a request, as of now

    def _scan_roots(self) -> dict[str, Path]:
        """The directories a scan reads, by the prefix of their files' names in its evidence: the
        backend's (the data directory), and a local keyring kept outside them (``<keyring>/``)."""
        roots = dict(self._backend.physical.scan_sources().roots)
        if isinstance(self._provider, LocalKeyring) and not any(
            self._provider.path.resolve().is_relative_to(r) for r in roots.values()
        ):
            roots[KEYRING_LABEL] = self._provider.path.resolve()
        return roots

    def _keyring_files(self) -> set[str]:
        """The names a scan gives the files in a local keyring's directory: a match there is never
        answered with "remove the file"."""
        if not isinstance(self._provider, LocalKeyring):
            return set()
        keyring = self._provider.path.resolve()
        return {
            label + f.resolve().relative_to(root).as_posix()
            for label, root in self._scan_roots().items()
            if keyring.is_relative_to(root)
            for f in keyring.iterdir()
            if f.is_file()
        }

    def _scan(self, probes: list[bytes], progress: Progress | None) -> ScanResult:
        roots = self._scan_roots()
        return scan_in_child(list(roots.values()), probes, progress, labels=list(roots))

    def verify(self, rows: list[ErasureRow], progress: Progress | None) -> dict[str, Any]:
        with self._backend.read() as txn:
            samples = {r.id: self._open_probes(txn, r) for r in rows}
        probes = {rid: [] if s is None else s.probes for rid, s in samples.items()}
        every = [p for listed in probes.values() for p in listed]
        combined = self._scan(every, progress)
        uninformative = self._bookkeeping(combined.matched_probes)
        if uninformative:  # bytes the store keeps by design (an id the erased value quoted)
            probes = {rid: [p for p in listed if p not in uninformative] for rid, listed in probes.items()}
            every = [p for listed in probes.values() for p in listed]
            combined = self._scan(every, progress)
        physical = self._backend.physical
        in_database = any(physical.is_database_file(f) for f in combined.matched_files)
        # once per request: a match in live cells (a value quoting text the store keeps, say)
        # survives any rewrite, and must not cost the store's size on every purge after
        untried = any(not _scan_evidence(r).get("rewritten") for r in rows)
        rewritten = in_database and untried and physical.rewrite()
        if rewritten:
            # residue in the database's own files can sit in free space no deletion zeroes (SQLite:
            # a page reorganized earlier keeps a stale fragment of a cell); rebuilding the database
            # from its live rows leaves none. Costs the store's size, only then.
            combined = self._scan(every, progress)
        # attribute residue by the probes found: only a request whose own probes matched is
        # scanned again, alone, to learn its files (a scan per pending request, every purge, was
        # what made one stray file's cost grow with the requests)
        found = set(combined.matched_probes)
        clean = replace(combined, matches=0, matched_files=(), matched_probes=())
        results = {r.id: self._scan(probes[r.id], None) if found & set(probes[r.id]) else clean for r in rows}
        fault_point("purge.scanned")
        with self._backend.write() as txn:
            audited: list[tuple[str, dict[str, Any]]] = []
            for row in rows:  # oldest first: a request may wait for an earlier one concluded here
                sample = samples[row.id]
                scanned = None if sample is None else ProbeSample(probes[row.id], sample.found)
                dropped = 0 if sample is None else len(sample.probes) - len(probes[row.id])
                audited.append(self._conclude(txn, row, results[row.id], scanned, rewritten, dropped))
            anchor_audit_many(self._provider, txn, audited)
        # the sealed probes were just deleted: make their bytes unreachable too (SQLite: the WAL)
        physical.reclaim()
        return combined.to_dict()

    def worth_scanning(self, row: ErasureRow, retry_stuck: bool) -> bool:
        """Should this purge scan a request again? A stuck one only when what holds it may have
        changed: one held by files the store does not write, when one of those files changed or
        went away; any other, when asked to retry (an explicit purge or wait, not a background
        pass for other requests). Rescanning them on every purge, with every probe each one
        holds, made the cost of one stray file grow with every later purge."""
        evidence = _scan_evidence(row)
        if not evidence.get("stuck"):
            return True
        stray = evidence.get("stray")
        if isinstance(stray, dict) and stray:
            return self._fingerprint(list(stray)) != stray
        return retry_stuck

    def _fingerprint(self, names: Sequence[str]) -> dict[str, list[int] | None]:
        """(size, mtime in ns) of each file a scan named (None: gone), by its scan name."""
        roots = sorted(self._scan_roots().items(), key=lambda item: -len(item[0]))  # labels first
        found: dict[str, list[int] | None] = {}
        for name in names:
            label, root = next((lb, r) for lb, r in roots if name.startswith(lb))
            try:
                info = (root / name[len(label) :]).stat()
            except OSError:
                found[name] = None
            else:
                found[name] = [info.st_size, info.st_mtime_ns]
        return found

    def _bookkeeping(self, matched: Sequence[bytes]) -> set[bytes]:
        """Matched probes that also occur in what the store keeps in plain by design (ids, the
        audit log, request rows; the ledger): content-free bytes, which no scan can tell from
        residue. An erased value that quoted a request id would otherwise never verify."""
        if not matched:
            return set()
        # the ledger's entries as a local keyring writes them (other providers' are not scanned);
        # never any other file of the keyring's directory, which could hold a real copy
        ledger = b"\n".join(
            json.dumps(e, sort_keys=True, separators=(",", ":")).encode() for e in self._provider.ledger()
        )
        with self._backend.read() as txn:
            return {p for p in matched if p in ledger or txn.run(ops.PlaintextHolds(p))}

    def _open_probes(self, txn: Txn, row: ErasureRow) -> ProbeSample | None:
        wrapped = txn.run(ops.ProbeKey(row.id))
        key = None if wrapped is None else self._keys.unwrap(*wrapped)
        return open_probes(key, row.id, row.probes)

    def _earlier_unverified(self, txn: Txn, row: ErasureRow) -> list[str]:
        """Earlier compliance requests for the same target that are not verified: a request that
        found nothing to erase proves nothing about data one of them still has to remove."""
        return [
            r.id
            for r in txn.run(ops.Erasures(PENDING_STATES))
            if r.version < row.version
            and r.mode == Mode.COMPLIANCE
            and (r.target_kind, bytes(r.target)) == (row.target_kind, bytes(row.target))
        ]

    def _conclude(
        self,
        txn: Txn,
        row: ErasureRow,
        result: ScanResult,
        sample: ProbeSample | None,
        rewritten: bool,
        uninformative: int,
    ) -> tuple[str, dict[str, Any]]:
        """Record the verdict of ``row``; returns its audit entry (event, fields), anchored with
        the others of this transaction."""
        plan = ForgetPlan.from_entry(row.plan_entry)
        # rows this purge really removed (for requests sealed before the forget's tally existed)
        evidence_rows = row.layer_entries[Layer.ROWS].evidence
        removed = int(evidence_rows.get("rows_removed", evidence_rows.get("records", 0)))
        remaining = remains(txn, plan)
        tried = rewritten or bool(_scan_evidence(row).get("rewritten"))
        found_nothing = sample is not None and sample.found_nothing
        verdict = judge_scan(
            result,
            sample,
            removed=removed,
            remaining=remaining,
            rewrite_tried=tried,
            waiting_for=self._earlier_unverified(txn, row) if found_nothing else [],
            keyring_files=self._keyring_files(),
            database_file=self._backend.physical.is_database_file,
        )
        evidence: dict[str, Any] = {
            **result.to_dict(),
            "probes": len(sample.probes) if sample else 0,
            "remaining": remaining,
        }
        if sample is not None and sample.found is not None:
            evidence |= {"found": sample.found, "nothing_to_erase": found_nothing}
        if uninformative:
            evidence["uninformative_probes"] = uninformative  # they occur in the store's bookkeeping
        unscanned = self._backend.physical.scan_sources().gaps
        if unscanned:  # what the scan cannot read, and what covers it instead
            evidence["unscanned"] = [g.to_dict() for g in unscanned]
        if tried:
            evidence["rewritten"] = True  # the database was rewritten for this request already
        gap = verdict.gap
        if gap is not None:
            evidence |= {"gap": gap, "release": verdict.release}
            evidence |= {"stuck": True} if verdict.stuck else {}
            evidence |= {"stray": self._fingerprint(verdict.stray)} if verdict.stray else {}
            evidence |= {"waiting_for": list(verdict.waiting_for)} if verdict.waiting_for else {}
        layers = {**row.layer_entries, Layer.SCAN: LayerEntry(verdict.state, evidence)}
        fields: dict[str, Any] = {"layers": dump_layers(layers), "scan": json.dumps(evidence)}
        verified_at = None if gap else now_iso()
        if gap is None:
            fields |= {"state": ErasureState.VERIFIED, "verified_at": verified_at, "probes": None}
            txn.run(ops.DeleteProbeKey(row.id))
            # stored once reached; until then the reason is whatever holds an epoch now (status)
            horizon, reason = self._horizon(row)
            if horizon is not None:
                fields |= {"horizon": horizon.isoformat(), "horizon_reason": reason}
        txn.run(ops.UpdateErasure(row.id, fields))
        return (
            "verify",
            {
                "request_id": row.id,
                "verified": gap is None,
                "matches": result.matches,
                "probes": evidence["probes"],
                "scan": evidence,  # what a certificate states is what this audited entry says
                "verified_at": verified_at,
            },
        )


def _scan_evidence(row: ErasureRow) -> Mapping[str, Any]:
    return row.evidence(Layer.SCAN)
