"""Opening a store: what its first write transaction settles before it serves anything.

In order, in one transaction: the key provider must be this store's (``check_keyring``); a
store without an audit chain id gets one only if neither it nor its key provider has history;
a restored copy's audit log is checked against the key provider's ledger (still under its
source's chain id), then the copy takes a chain id of its own and anchors its restore; the
ledger's cache of lifts and tokens is imported once per keyring; and the database is reconciled
with the ledger, so a forget logged but never committed happens now, and a restore replays every
forget its copy's audit log does not hold.
"""

from __future__ import annotations

from ...backends import ops
from ...backends.base import Txn
from ...caches import StoreCaches
from ...crypto.provider import KeyProvider
from ...crypto.tokens import TokenMaker
from ...errors import KeyProviderError, StorageError
from ...ledger.journal import AUDIT_CHAIN, Ledger, anchor_audit, start_audit_chain
from .restoring import audited_forgets

__all__ = ["check_keyring", "settle_at_open"]


def check_keyring(txn: Txn, tokens: TokenMaker) -> None:
    """Refuse a key provider that is not this store's (every read would silently miss)."""
    fingerprint = int.from_bytes(tokens.key("\0cenotaph-keyring-check")[:7], "big")
    stored = txn.run(ops.Meta("keyring_check"))
    if stored is None:
        txn.run(ops.SetMeta("keyring_check", fingerprint))
    elif stored != fingerprint:
        raise KeyProviderError(
            "this key provider is not the one this data directory was created with; point "
            "CENOTAPH_KEYRING (or key_provider=) at the store's own keyring"
        )


def _ledger_has_history(provider: KeyProvider) -> bool:
    """Has any store on this key provider anchored an audit entry or logged a forget?"""
    return any(e.get("kind") in ("anchor", "forget") for e in provider.ledger())


def settle_at_open(
    txn: Txn,
    provider: KeyProvider,
    tokens: TokenMaker,
    ledger: Ledger,
    caches: StoreCaches,
    *,
    restored: bool,
) -> None:
    """The opening sequence (the module's docstring), inside the store's first write ``txn``;
    ``restored``: the store is a backup's copy opened by ``restore``."""
    check_keyring(txn, tokens)
    audited: set[str] | None = None
    if restored or txn.run(ops.Meta(AUDIT_CHAIN)) is None:
        if not restored and (txn.run(ops.AuditTail()) is not None or _ledger_has_history(provider)):
            # a chain id is minted once, for a new store on a new keyring; losing it
            # would orphan every anchor in the ledger and let any log verify (S7)
            raise StorageError(
                "the audit chain id is missing, but this store or its key provider already "
                "has history: the database was altered or replaced; restore it from a "
                "backup with cenotaph.restore(), or investigate"
            )
        if restored:  # the copy's log, still under its source's chain id (S9)
            ledger.view.refresh()
            logged = set(ledger.view.plans)
            audited = audited_forgets(txn, provider.ledger(), logged)
        start_audit_chain(provider, txn)
    if restored:
        anchor_audit(provider, txn, "restore", {})
    ledger.import_cache(txn)  # once per keyring: lifts and tokens of an older store
    # forgets logged but never committed happen now (W7); a restore replays every
    # forget its copy's audit log does not hold, whatever its request rows say
    ledger.reconcile(txn, audited if restored else None)
    caches.forget_epoch = txn.run(ops.Count("forget_epoch"))
