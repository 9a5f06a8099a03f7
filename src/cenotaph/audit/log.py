"""The audit entries as a transparency log: leaves, signed heads and proofs, from the backend's rows.

Leaf ``i`` (0-based) is audit entry ``seq = i + 1``; its data is the entry's canonical JSON
(:func:`cenotaph.model.canonical_json` of :func:`~cenotaph.audit.chain.entry_to_dict`, UTF-8), so
anyone holding the entry recomputes its leaf hash. The log first checks the hash chain links (a
head is never signed over a log whose links do not hold); whether the chain matches the key
provider's ledger is ``verify_audit``'s question, not this one's.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from ..backends import ops
from ..backends.base import Backend
from ..errors import InvalidValueError, StorageError
from ..model import canonical_json
from . import merkle
from .chain import AuditEntry, entry_from_dict, entry_to_dict, verify_chain
from .tree_head import sign_tree_head

__all__ = ["TransparencyLog", "entry_leaf"]


def entry_leaf(entry: AuditEntry) -> bytes:
    """The RFC 9162 leaf hash of one audit entry."""
    return merkle.leaf_hash(canonical_json(entry_to_dict(entry)).encode("utf-8"))


class TransparencyLog:
    def __init__(self, backend: Backend, sign: Callable[[], Callable[[bytes], bytes]]) -> None:
        self._backend = backend
        self._sign = sign
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[AuditEntry, bytes]] = {}  # stored text -> (entry, leaf hash)

    def entries(self) -> tuple[list[AuditEntry], list[bytes]]:
        """Every audit entry (chain links checked) and its leaf hash, oldest first."""
        with self._backend.read() as txn:
            raw = txn.run(ops.AuditEntries())
        entries: list[AuditEntry] = []
        leaves: list[bytes] = []
        with self._lock:
            cache = self._cache
            fresh: dict[str, tuple[AuditEntry, bytes]] = {}
            for text in raw:
                hit = cache.get(text)
                if hit is None:
                    try:
                        entry = entry_from_dict(json.loads(text))
                    except ValueError as exc:
                        raise StorageError(
                            "an audit entry is not valid JSON: the audit log was altered; restore it from a "
                            "trusted copy and investigate"
                        ) from exc
                    hit = (entry, entry_leaf(entry))
                fresh[text] = hit
                entries.append(hit[0])
                leaves.append(hit[1])
            self._cache = fresh
        verify_chain(entries)
        return entries, leaves

    def leaves(self) -> list[bytes]:
        return self.entries()[1]

    def head(self, leaves: list[bytes] | None = None) -> dict[str, Any]:
        """A signed tree head over ``leaves`` (default: the whole log now)."""
        leaves = self.leaves() if leaves is None else leaves
        at = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        return sign_tree_head(len(leaves), merkle.tree_root(leaves), at, self._sign())

    def consistency(self, old_size: object) -> dict[str, Any]:
        """``{"tree_head", "proof"}``: a signed head of the log now and the proof that the tree of its
        first ``old_size`` entries is a prefix of it."""
        if isinstance(old_size, bool) or not isinstance(old_size, int) or old_size < 0:
            raise InvalidValueError(
                "old_size must be the tree_size of an earlier tree head (an integer >= 0)"
            )
        leaves = self.leaves()
        if old_size > len(leaves):
            raise InvalidValueError(
                f"the log holds {len(leaves)} entries, fewer than the {old_size} of the head you hold: "
                "it was truncated or rolled back (or that head is from another store)"
            )
        return {
            "tree_head": self.head(leaves),
            "proof": [h.hex() for h in merkle.consistency_path(leaves, old_size)],
        }

    def inclusion(self, find: Callable[[AuditEntry], bool]) -> dict[str, Any]:
        """``{"leaf_index", "leaf_hash", "inclusion_path", "tree_head"}`` of the first entry ``find``
        accepts, against a signed head of the whole log."""
        entries, leaves = self.entries()
        index = next((i for i, entry in enumerate(entries) if find(entry)), None)
        if index is None:
            raise StorageError(
                "the audit log holds no entry for this erasure: the audit log was altered; restore it from a "
                "trusted copy and investigate"
            )
        return {
            "leaf_index": index,
            "leaf_hash": leaves[index].hex(),
            "inclusion_path": [h.hex() for h in merkle.inclusion_path(leaves, index)],
            "tree_head": self.head(leaves),
        }
