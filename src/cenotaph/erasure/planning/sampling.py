"""Taking a forget's probes from the store's own records (``erasure.planning.probes`` says what they are):
open each sampled record and embed it while its keys still exist, then seal the probes under a
fresh probe key wrapped by one of the plan's KEK epochs."""

from __future__ import annotations

from collections.abc import Sequence

from ...backends import ops
from ...backends.base import LineageRow, RecordRow, Txn
from ...crypto.aead import new_key
from ...crypto.keys import KeyChain
from ...crypto.provider import KeyProvider
from ...index.search import SearchIndex
from ...ledger.plan import ForgetPlan
from ...model import Record
from ...records import RecordCrypto
from .probes import RecordSample, sample_probes, sample_records, seal_probes

__all__ = ["ProbeSampler"]


class ProbeSampler:
    def __init__(
        self, provider: KeyProvider, keys: KeyChain, crypto: RecordCrypto, search: SearchIndex
    ) -> None:
        self._provider = provider
        self._keys = keys
        self._crypto = crypto
        self._search = search

    def sample_ahead(self, txn: Txn, ids: Sequence[str]) -> RecordSample:
        """Probes of a large forget's records, sampled before its transaction (keys still exist)."""
        return sample_records(txn, ids, self.open_record)

    def seal(self, txn: Txn, plan: ForgetPlan, sample: RecordSample | None, whole: bool) -> bytes:
        """The plan's probes, sampled in its forget's transaction and sealed (the ledger's sampler)."""
        probes = sample_probes(txn, plan, self.open_record, sample, whole=whole)
        # under one of the plan's epochs, so the horizon (every plan epoch destroyed) covers the
        # probes of any copy taken while this request is pending; the newest still live, which a
        # rotation waiting for this transaction will see in probe_keys and keep
        live = set(self._provider.live_epochs())
        usable = [e for e in plan.epochs if e in live]
        if usable:
            epoch = max(usable)
        else:  # a replay whose plan's epochs are all gone: the current one joins the plan
            epoch = self._keys.refresh_epoch()
            plan.epochs.append(epoch)
        key = new_key()
        wrapped, _ = self._keys.wrap(key, epoch)
        txn.run(ops.InsertProbeKey(plan.request_id, wrapped, epoch))
        return seal_probes(key, plan.request_id, probes)

    def open_record(
        self, txn: Txn, row: RecordRow, lineage: LineageRow | None
    ) -> tuple[Record, bytes | None] | None:
        """A record's row decrypted, and its vector's bytes, while its keys still exist."""
        opened = self._crypto.open(txn, row, lineage)
        if opened is None:
            return None
        record = opened.record()
        return record, self._search.embed_records([record])[0].tobytes()
