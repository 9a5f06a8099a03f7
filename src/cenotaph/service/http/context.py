"""What one running server holds: the store, its API keys, sessions, owners and the purge thread."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fastapi import Request

from ...store import Store
from ..apikeys import ApiKeyRing
from .ownership import Ownership
from .paging import Pager
from .purger import Purger
from .sessions import Sessions

__all__ = ["Service", "service_of"]


@dataclass
class Service:
    store: Store
    keys: ApiKeyRing
    backup_dir: Path | None = None
    owners: Ownership = field(init=False)
    sessions: Sessions = field(init=False)
    pager: Pager = field(init=False)
    purger: Purger = field(init=False)

    def __post_init__(self) -> None:
        self.owners = Ownership(self.keys)
        self.sessions = Sessions(self.store)
        self.pager = Pager(self.keys)
        self.purger = Purger(self.store)

    def start(self) -> None:
        self.purger.start()

    def stop(self) -> None:
        """Finish the purge under way and end every session (the store stays open: its owner closes it)."""
        self.purger.stop()
        self.sessions.close_all()


def service_of(request: Request) -> Service:
    svc: Service = request.app.state.service
    return svc
