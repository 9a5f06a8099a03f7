"""What one running server holds: the store, its API keys, sessions, owners and the purge thread."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import Request

from cenotaph import Store

from ..apikeys import ApiKeyRing
from .ownership import Ownership
from .paging import Pager
from .sessions import Sessions

__all__ = ["Service", "service_dependency", "service_of"]


@dataclass
class Service:
    store: Store
    keys: ApiKeyRing
    backup_dir: Path | None = None
    owners: Ownership = field(init=False)
    sessions: Sessions = field(init=False)
    pager: Pager = field(init=False)
    _running: int = field(init=False, default=0)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.owners = Ownership(self.keys)
        self.sessions = Sessions(self.store)
        self.pager = Pager(self.keys)

    def start(self) -> None:
        """A server runs this app's lifespan (however many do, sessions end with the last)."""
        with self._lock:
            self._running += 1

    def stop(self) -> None:
        """When the last server stops: end every session (the store stays open, and its
        background purge with it: its owner closes it)."""
        with self._lock:
            self._running -= 1
            if self._running == 0:
                self.sessions.close_all()


async def service_dependency(request: Request) -> Service:
    """``service_of`` as a FastAPI dependency (async: no trip through the thread pool)."""
    return service_of(request)


def service_of(request: Request) -> Service:
    svc: Service = request.app.state.service
    return svc
