"""The key provider's ledger, read as the authority over what the database only caches (S9).

Whoever can write ``cenotaph.db`` but not the key provider can delete tombstone rows, clear
hidden marks, plant lifts or reauthorization rows and edit request states. None of those rows
decides anything any more: :class:`LedgerView` holds, in memory, what the ledger says --

- ``tombstones``: target token -> newest forget version (every forget's plan),
- ``forgets``: target token -> every forget of it, ``(version, owner token)``, oldest first: a
  newer forget of a target never hides an older one (whose owner may differ),
- ``anchored``: scope token -> every key or scope forget whose scope is that scope or lies below
  it (:class:`Anchored`), for the forgets a subtree's reauthorization would reopen,
- ``forgotten``: record id -> version of the first forget that hid or destroyed it,
- ``destroyed``: record id -> version of the compliance forget that destroyed its keys,
- ``lifts``: target token -> newest lift version (a reauthorization token's use),
- ``grants`` / ``consumed``: reauthorization tokens issued (by digest) and used,
- ``plans``: request id -> the forget's plan, in ledger order (``by_version``: a forget's version
  -> its request id); ``max_version``: the newest
  version the ledger knows (the database clock may not be behind it).

The view is extended incrementally: the ledger only grows, and its mark (size) is the change
signal, read before every call (one ``stat``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..crypto.provider import KeyProvider
from ..model import Mode

__all__ = ["FORGET_KIND", "GRANT_KIND", "IMPORT_KIND", "LIFT_KIND", "Anchored", "Grant", "LedgerView"]

FORGET_KIND = "forget"
GRANT_KIND = "reauth"  # a reauthorization token was issued
LIFT_KIND = "lift"  # a token was used: what it lifted, at which version
IMPORT_KIND = "cache-import"  # once per keyring: the lifts and tokens of a store from before S9


@dataclass(frozen=True, slots=True)
class Anchored:
    """A key or scope forget as seen from one scope of its chain: ``here`` when it is that
    scope's own forget (a scope forget, or a key forget of its subtree or slot)."""

    version: int
    owner: bytes | None
    here: bool
    kind: str  # the plan's target kind: "key" | "scope"
    exact: bool


@dataclass(frozen=True, slots=True)
class Grant:
    """A reauthorization token as the ledger recorded its issue."""

    kind: str  # "scope" | "key" | "subject" (legacy)
    target: bytes
    issued_version: int
    subject: bytes | None


class LedgerView:
    def __init__(self, provider: KeyProvider) -> None:
        self._provider = provider
        self._mark: int | None = None
        self._offset = 0  # bytes of the ledger read (providers with ``ledger_since``)
        self._count = 0  # entries read (other providers)
        self._reset()

    def _reset(self) -> None:
        self.tombstones: dict[bytes, int] = {}
        self.forgets: dict[bytes, list[tuple[int, bytes | None]]] = {}
        self.anchored: dict[bytes, list[Anchored]] = {}
        self.forgotten: dict[str, int] = {}
        self.destroyed: dict[str, int] = {}
        self.lifts: dict[bytes, int] = {}
        self.grants: dict[bytes, Grant] = {}
        self.consumed: dict[bytes, int] = {}
        self.plans: dict[str, dict[str, Any]] = {}
        self.by_version: dict[int, str] = {}  # a forget's version -> its request id
        self.imported = False
        self.max_version = 0
        self._offset = self._count = 0

    @property
    def mark(self) -> int | None:
        return self._mark

    def refresh(self, mark: int | None = None) -> int:
        """Read what the ledger gained since the last call; returns how many forgets it brought.
        ``mark``: the ledger's mark if the caller just read it (one ``stat`` per call, not two)."""
        mark = self._provider.ledger_mark() if mark is None else mark
        if mark == self._mark:
            return 0
        if self._mark is not None and mark < self._mark:
            self._reset()  # the ledger was replaced by a shorter one: read it whole again
        before = len(self.plans)
        self._apply(self._new_entries())
        self._mark = mark
        return len(self.plans) - before

    def _new_entries(self) -> list[dict[str, Any]]:
        since = getattr(self._provider, "ledger_since", None)
        if since is not None:
            got = since(self._offset)
            if got is None:
                self._reset()
                got = since(0) or ([], 0)
            entries, self._offset = got
            return list(entries)
        entries = self._provider.ledger()
        if len(entries) < self._count:
            self._reset()
        new, self._count = entries[self._count :], len(entries)
        return new

    def _apply(self, entries: Iterable[dict[str, Any]]) -> None:
        for entry in entries:
            kind = entry.get("kind")
            if kind == FORGET_KIND:
                self._forget(entry["plan"])
            elif kind == GRANT_KIND:
                digest = bytes.fromhex(entry["digest"])
                subject = entry.get("subject")
                self.grants[digest] = Grant(
                    str(entry["target_kind"]),
                    bytes.fromhex(entry["target"]),
                    int(entry["version"]),
                    None if subject is None else bytes.fromhex(subject),
                )
                self._saw(int(entry["version"]))
            elif kind == LIFT_KIND:
                self._lift(entry)
            elif kind == IMPORT_KIND:
                self._import(entry)

    def _forget(self, plan: dict[str, Any]) -> None:
        if plan["request_id"] in self.plans:
            return
        self.plans[plan["request_id"]] = plan
        version = int(plan["version"])
        self.by_version[version] = plan["request_id"]
        owner = None if plan.get("owner") is None else bytes.fromhex(plan["owner"])
        for target, _ in plan["tombstones"]:
            token = bytes.fromhex(target)
            self.tombstones[token] = max(self.tombstones.get(token, 0), version)
            self.forgets.setdefault(token, []).append((version, owner))
        chain = [bytes.fromhex(t) for t in plan.get("chain", [])]
        for depth, token in enumerate(chain, 1):
            self.anchored.setdefault(token, []).append(
                Anchored(
                    version, owner, depth == len(chain), str(plan["target_kind"]), plan.get("exact") is True
                )
            )
        for record_id in plan["hide"]:
            self.forgotten.setdefault(record_id, version)
        if plan["mode"] == Mode.COMPLIANCE:
            for record_id in plan["destroy_records"]:
                self.forgotten.setdefault(record_id, version)
                self.destroyed.setdefault(record_id, version)
        self._saw(version)

    def _lift(self, entry: dict[str, Any]) -> None:
        digest = entry.get("digest")
        if digest is not None:
            self.consumed.setdefault(bytes.fromhex(digest), int(entry["version"]))
        for target, version in entry["lifts"]:
            token = bytes.fromhex(target)
            self.lifts[token] = max(self.lifts.get(token, 0), int(version))
        self._saw(int(entry["version"]))

    def _import(self, entry: dict[str, Any]) -> None:
        self.imported = True
        self._lift({"version": 0, "lifts": entry["lifts"]})
        for digest, kind, target, version, subject, consumed in entry["grants"]:
            self._apply([{"kind": GRANT_KIND, "digest": digest, "target_kind": kind, "target": target,
                          "version": version, "subject": subject}])  # fmt: skip
            if consumed is not None:
                self.consumed.setdefault(bytes.fromhex(digest), int(consumed))

    def _saw(self, version: int) -> None:
        self.max_version = max(self.max_version, version)

    # -- questions the store asks ------------------------------------------------------
    def tombstone_versions(self, targets: Sequence[bytes]) -> dict[bytes, int]:
        """Newest tombstone version per covered target (empty: no forget ever covered them)."""
        found = self.tombstones
        if not found:
            return {}
        return {t: found[t] for t in targets if t in found}

    def lift_versions(self, targets: Sequence[bytes]) -> dict[bytes, int]:
        found = self.lifts
        return {t: found[t] for t in targets if t in found}

    def lifted(self, targets: Sequence[bytes]) -> int:
        """The newest lift of any of ``targets`` (0: none): forgets older than it are lifted."""
        found = self.lifts
        return max((found[t] for t in targets if t in found), default=0)

    def forget_versions(self, targets: Sequence[bytes], after: int = 0) -> list[tuple[int, bytes | None]]:
        """Every forget of ``targets`` newer than ``after``, ``(version, owner)``, oldest first."""
        found = self.forgets
        return sorted({f for t in targets if t in found for f in found[t] if f[0] > after}, key=_version)

    def subtree_forgets(self, chain: Sequence[bytes], after: int = 0) -> list[tuple[int, bytes | None]]:
        """Every forget newer than ``after`` that a write somewhere in the subtree of the scope
        whose prefix tokens are ``chain`` (root first) could meet: the key and scope forgets of
        that scope and below it, and the scope forgets and key-subtree forgets of its ancestors.
        (A forget of one ancestor slot reaches no scope below it.)"""
        if not chain:
            return []
        found = [(a.version, a.owner) for a in self.anchored.get(chain[-1], ()) if a.version > after]
        for token in chain[:-1]:
            found += [
                (a.version, a.owner)
                for a in self.anchored.get(token, ())
                if a.here and not a.exact and a.version > after
            ]
        return sorted(set(found), key=_version)


def _version(forget: tuple[int, bytes | None]) -> int:
    return forget[0]
