"""What the HTTP tests share: a uvicorn in a thread, a world (store + app, served two ways) and
tenants with keys. The fixtures built on them are in ``conftest.py``."""

from __future__ import annotations

import secrets
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx
import uvicorn
from fastapi.testclient import TestClient

import cenotaph
from cenotaph.service.apikeys import ApiKeyRing
from cenotaph.service.http import create_app

TRANSPORTS = ("asgi", "uvicorn")


class UvicornThread:
    """A real uvicorn serving ``app`` on 127.0.0.1:<free port>, in a thread of this process."""

    def __init__(self, app: Any) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # TCP_NODELAY
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> UvicornThread:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(20)
        self.sock.close()


@dataclass
class Tenant:
    """A fresh tenant ``tenant:<id>`` and its keys (secrets)."""

    id: str
    root: str  # tenant:<id>
    alice: str  # tenant:<id>/user:alice
    agent: str  # agent key, prefix alice
    operator: str  # operator key, prefix the whole tenant
    bob_agent: str  # agent key, prefix tenant:<id>/user:bob
    alice_operator: str  # operator key, prefix alice only

    def auth(self, secret: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {secret}"}


class World:
    def __init__(self, base: Path) -> None:
        self.data = base / "data"
        self.store = cenotaph.open(self.data)
        self.keys = ApiKeyRing(self.data)
        self.backup_dir = base / "backups"
        self.app = create_app(self.store, self.keys, backup_dir=self.backup_dir, secure_cookies=False)
        self.asgi = TestClient(self.app, base_url="http://testserver")
        self.server = UvicornThread(self.app)

    def __enter__(self) -> World:
        self.asgi.__enter__()  # runs the lifespan for the ASGI transport
        self.server.__enter__()  # and uvicorn runs it again for its own app instance's lifespan
        self.http = httpx.Client(base_url=self.server.url, timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()
        self.server.__exit__(*exc)
        self.asgi.__exit__(*exc)
        self.store.close()

    def client(self, transport: str) -> httpx.Client:
        # starlette's TestClient subclasses httpx2.Client, httpx's API under another name
        return cast(httpx.Client, self.asgi) if transport == "asgi" else self.http

    def base_url(self, transport: str) -> str:
        return "http://testserver" if transport == "asgi" else self.server.url

    def tenant(self) -> Tenant:
        tid = "t" + secrets.token_hex(4)
        root, alice = f"tenant:{tid}", f"tenant:{tid}/user:alice"

        def make(prefix: str, role: str) -> str:
            return self.keys.create(tenant=tid, prefix=prefix, role=role)[1]

        return Tenant(
            id=tid,
            root=root,
            alice=alice,
            agent=make(alice, "agent"),
            operator=make(root, "operator"),
            bob_agent=make(f"{root}/user:bob", "agent"),
            alice_operator=make(alice, "operator"),
        )


def wait_verified(api: httpx.Client, status_url: str, secret: str, timeout: float = 30.0) -> dict[str, Any]:
    """Poll an erasure's status until it is verified (the server purges in the background)."""
    deadline = time.monotonic() + timeout
    while True:
        doc: dict[str, Any] = api.get(status_url, headers={"Authorization": f"Bearer {secret}"}).json()
        if doc["status"]["state"] == "verified" or time.monotonic() > deadline:
            return doc
        time.sleep(0.05)
