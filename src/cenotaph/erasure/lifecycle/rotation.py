"""Key rotation: rewrap every live key under a new KEK epoch, then destroy every older epoch
nothing holds (``erasure.lifecycle.horizon`` names the holders), which is what brings horizons in."""

from __future__ import annotations

from ...backends import ops
from ...backends.base import Backend
from ...caches import StoreCaches
from ...crypto.keys import KeyChain
from ...crypto.provider import KeyProvider
from ...errors import StorageError
from ...ledger.journal import KEK_EPOCH, anchor_audit
from ...model import RotationReport
from ..proof.verification import Progress
from .horizon import Horizons

__all__ = ["Rotation"]


class Rotation:
    def __init__(
        self,
        backend: Backend,
        provider: KeyProvider,
        keys: KeyChain,
        horizons: Horizons,
        caches: StoreCaches,
    ) -> None:
        self._backend = backend
        self._provider = provider
        self._keys = keys
        self._horizons = horizons
        self._caches = caches

    def rotate(self, progress: Progress | None = None) -> RotationReport:
        self._caches.sync()
        new_epoch = self._provider.new_epoch()
        with self._backend.write() as txn:
            self._keys.refresh_epoch()
            rows = txn.run(ops.WrappedKeys())
            rewrapped = []
            for n, (table, pk, wrapped, epoch) in enumerate(rows, start=1):
                key = self._keys.unwrap(wrapped, epoch)
                if key is None:
                    raise StorageError(
                        "a live key could not be unwrapped during rotation; nothing was changed"
                    )
                new_wrapped, _ = self._keys.wrap(key, new_epoch)
                rewrapped.append((table, pk, new_wrapped, new_epoch))
                if progress is not None and n % 1000 == 0:
                    progress(n, len(rows))
            txn.run(ops.Rewrap(rewrapped))
            txn.run(ops.SetMeta(KEK_EPOCH, new_epoch))
            anchor_audit(self._provider, txn, "rotate", {"epoch": new_epoch, "rewrapped": len(rewrapped)})
        # old wrapped bytes must be unreachable (SQLite: out of the WAL) before old epochs can be said to be gone
        self._backend.physical.reclaim()
        with self._backend.read() as txn:
            probing = txn.run(ops.ProbeKeyEpochs())  # pending requests' probes: kept until they verify
        destroyed = [
            epoch
            for epoch in self._provider.live_epochs()
            # the provider decides "no registered backup needs it" and destroys in one step: a
            # backup registering at this moment (another thread or process) never loses its epoch
            if epoch != new_epoch and epoch not in probing and self._provider.destroy_epoch(epoch)
        ]
        self._keys.forget_epoch_sealers()
        self._horizons.record(destroyed=bool(destroyed))
        if progress is not None:
            progress(len(rows), len(rows))
        # every old epoch still alive is held by someone: name each holder, why, and the release
        retained = tuple(r for r in self._horizons.retention() if r.epoch != new_epoch)
        return RotationReport(
            new_epoch=new_epoch,
            rewrapped=len(rewrapped),
            destroyed_epochs=tuple(destroyed),
            retained_epochs=tuple(sorted({r.epoch for r in retained})),
            retained=retained,
        )
