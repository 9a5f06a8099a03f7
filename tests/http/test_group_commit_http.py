"""The HTTP server gets group commit for free: concurrent write requests, each in its own server
thread, share one transaction, and each gets its own answer (a refused one a 409, the others 201)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import httpx
from tests.http._support import Tenant, World

REQUESTS = 6


def test_concurrent_write_requests_share_one_transaction(world: World, tenant: Tenant) -> None:
    scope = f"{tenant.alice}/session:group"
    headers = tenant.auth(tenant.agent)
    with httpx.Client(base_url=world.server.url, headers=headers, timeout=60) as http:
        assert http.post("/v1/memories", json={"scope": scope, "key": "gone", "value": 1}).status_code == 201
        assert (
            http.post("/v1/forget", json={"scope": scope, "key": "gone", "mode": "operational"}).status_code
            == 202
        )
    queue = world.store._group
    real = queue._commit
    entered, go = threading.Event(), threading.Event()

    def held(works: Sequence[Any]) -> Sequence[Any]:
        if not entered.is_set():
            entered.set()
            assert go.wait(30)
        return real(works)

    queue._commit = held
    statuses: dict[str, int] = {}

    def post(key: str) -> None:
        with httpx.Client(base_url=world.server.url, headers=headers, timeout=60) as http:
            r = http.post("/v1/memories", json={"scope": scope, "key": key, "value": key})
            statuses[key] = r.status_code

    try:
        first = threading.Thread(target=post, args=("first",))
        first.start()
        assert entered.wait(30)
        keys = [f"k{i}" for i in range(REQUESTS - 1)] + ["gone"]
        threads = [threading.Thread(target=post, args=(k,)) for k in keys]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while queue.queued() < REQUESTS + 1:
            assert time.monotonic() < deadline, "the requests did not queue behind the held write"
            time.sleep(0.001)
        go.set()
        for t in [first, *threads]:
            t.join(60)
    finally:
        go.set()
        queue._commit = real
    assert queue.largest >= REQUESTS  # the queued requests committed as one group
    assert statuses["gone"] == 409  # refused alone
    assert all(statuses[k] == 201 for k in ["first", *keys[:-1]])
    with httpx.Client(base_url=world.server.url, headers=headers, timeout=60) as http:
        for k in keys[:-1]:
            assert http.get("/v1/memories", params={"scope": scope, "key": k}).json()["value"] == k
