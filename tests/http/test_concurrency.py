"""Many clients writing and forgetting at once through a real uvicorn: no write acknowledged after a
forget of its key was acknowledged survives it (0 resurrections), and every acknowledged write to a
key nobody forgot is what a read returns at the end (0 lost writes)."""

from __future__ import annotations

import random
import threading
from collections import defaultdict

import httpx
from tests.http._support import Tenant, World

CLIENTS = 8
OPS_PER_CLIENT = 60
KEYS = 40


def test_concurrent_writes_and_forgets_through_the_server(world: World, tenant: Tenant) -> None:
    scope = f"{tenant.alice}/session:race"
    headers = tenant.auth(tenant.agent)
    writes: dict[str, list[tuple[int, object]]] = defaultdict(list)  # key -> (version, value) acknowledged
    forgets: dict[str, list[int]] = defaultdict(list)  # key -> forget versions acknowledged
    refused: list[int] = []
    errors: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(CLIENTS)

    def client(n: int) -> None:
        rng = random.Random(n)
        with httpx.Client(base_url=world.server.url, headers=headers, timeout=60) as http:
            start.wait()
            for op in range(OPS_PER_CLIENT):
                key = f"k{rng.randrange(KEYS)}"
                if n % 4 == 0 and op % 3 == 0:  # a quarter of the clients also forget
                    mode = "compliance" if op % 15 == 0 else "operational"
                    r = http.post("/v1/forget", json={"scope": scope, "key": key, "mode": mode})
                    if r.status_code == 202:
                        with lock:
                            forgets[key].append(r.json()["version"])
                    else:
                        errors.append(f"forget {r.status_code} {r.text}")
                    continue
                value = {"client": n, "op": op}
                r = http.post("/v1/memories", json={"scope": scope, "key": key, "value": value})
                if r.status_code == 201:
                    with lock:
                        writes[key].append((r.json()["version"], value))
                elif r.status_code == 409 and r.json()["error"] == "forgotten":
                    refused.append(r.json()["version"])
                else:
                    errors.append(f"write {r.status_code} {r.text}")

    threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert sum(len(v) for v in writes.values()) > CLIENTS * OPS_PER_CLIENT // 2
    assert forgets, "the schedule forgets some keys"

    resurrected, lost = [], []
    with httpx.Client(base_url=world.server.url, headers=headers, timeout=60) as http:
        for n in range(KEYS):
            key = f"k{n}"
            got = http.get("/v1/memories", params={"scope": scope, "key": key})
            if forgets[key]:
                first = min(forgets[key])
                # a write acknowledged with a version past the forget would be a resurrection
                resurrected += [(key, v) for v, _ in writes[key] if v > first]
                if got.status_code != 404:
                    resurrected.append((key, got.json()["version"]))
            elif writes[key]:
                version, value = max(writes[key], key=lambda pair: pair[0])
                if got.status_code != 200 or got.json()["value"] != value or got.json()["version"] != version:
                    lost.append((key, version))
    assert resurrected == [], f"{len(resurrected)} resurrections"
    assert lost == [], f"{len(lost)} lost writes"
    assert all(v in {v for vs in forgets.values() for v in vs} for v in refused)
