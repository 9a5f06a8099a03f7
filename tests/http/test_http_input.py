"""Bad input over HTTP: a 4xx with a JSON body that says what to fix, never a 5xx or a traceback,
and nothing stored from a refused request."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from tests.http._support import Tenant, World

from cenotaph.service.http import MAX_BODY_BYTES


def _post(
    api: httpx.Client, t: Tenant, path: str, raw: bytes, content_type: str = "application/json"
) -> httpx.Response:
    return api.post(path, content=raw, headers={**t.auth(t.agent), "Content-Type": content_type})


def _nothing_stored(api: httpx.Client, t: Tenant) -> None:
    r = api.get(
        "/v1/memories/list", params={"scope": t.alice, "include_descendants": "true"}, headers=t.auth(t.agent)
    )
    assert r.status_code == 404, r.text  # the whole prefix is still empty


def _refusal(r: httpx.Response, status: int, *words: str) -> None:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) >= {"error", "message"} and "Traceback" not in r.text
    for word in words:
        assert word in body["message"], body["message"]


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b"{not json", ["not valid JSON"]),
        (b"[" * 100_000 + b"]" * 100_000, ["JSON"]),
        (b'{"scope": "tenant:x", "key": "k", "value": ' + b"9" * 5000 + b"}", ["JSON"]),
        (b'"just a string"', ["malformed"]),
        (b"", ["malformed"]),
        (b"\xff\xfe\x00garbage", ["JSON"]),
    ],
)
def test_unreadable_bodies(api: httpx.Client, tenant: Tenant, raw: bytes, words: list[str]) -> None:
    _refusal(_post(api, tenant, "/v1/memories", raw), 422, *words)
    _nothing_stored(api, tenant)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"scope": "tenant:x//user:a"}, ["scope"]),
        ({"scope": 7}, ["scope"]),
        ({"key": ""}, ["key"]),
        ({"key": "a\nb"}, ["key"]),
        ({"value": float("inf")}, []),
        ({"ttl_seconds": -1}, ["ttl_seconds"]),
        ({"ttl_seconds": "60"}, ["ttl_seconds"]),
        ({"metadata": [1]}, ["metadata"]),
        ({"base_version": True}, ["base_version"]),
        ({"derived_from": "abc"}, ["derived_from"]),
        ({"unknown": 1}, ["unknown"]),
        ({"value": {"a": "x" * (1 << 20)}}, []),
    ],
)
def test_malformed_writes_say_what_to_fix(
    api: httpx.Client, tenant: Tenant, change: dict[str, object], words: list[str]
) -> None:
    body = {"scope": tenant.alice, "key": "k", "value": 1, **change}
    raw = json.dumps(body, allow_nan=True).encode()
    r = _post(api, tenant, "/v1/memories", raw)
    assert r.status_code in (413, 422), r.text
    _refusal(r, r.status_code, *words)
    _nothing_stored(api, tenant)


def test_a_batch_with_one_bad_item_stores_nothing(api: httpx.Client, tenant: Tenant) -> None:
    items = [{"scope": tenant.alice, "key": f"k{n}", "value": n} for n in range(5)]
    for bad in (
        {"scope": tenant.alice, "key": "", "value": 1},
        {"scope": "tenant:elsewhere", "key": "k", "value": 1},
        {"scope": tenant.alice, "key": "k0", "value": 2},
    ):
        r = api.post("/v1/memories/batch", json={"items": [*items, bad]}, headers=tenant.auth(tenant.agent))
        assert r.status_code in (404, 422), r.text
        _nothing_stored(api, tenant)


def test_bodies_over_the_limit_are_413(api: httpx.Client, tenant: Tenant) -> None:
    big = (
        b'{"scope": "' + tenant.alice.encode() + b'", "key": "k", "value": "' + b"x" * MAX_BODY_BYTES + b'"}'
    )
    _refusal(_post(api, tenant, "/v1/memories", big), 413, "1 MiB")

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit holds for a streamed body too
        for _ in range(MAX_BODY_BYTES // 65536 + 2):
            yield b"x" * 65536

    r = api.post(
        "/v1/memories",
        content=chunks(),
        headers={**tenant.auth(tenant.agent), "Content-Type": "application/json"},
    )
    _refusal(r, 413)
    _nothing_stored(api, tenant)


def test_a_value_at_the_store_limit_fits_through_the_server(api: httpx.Client, tenant: Tenant) -> None:
    value = "é" * ((1 << 20) // 2 - 8)  # ~1 MiB of UTF-8: the store's own limit
    r = api.post(
        "/v1/memories",
        content=json.dumps({"scope": tenant.alice, "key": "k", "value": value}, ensure_ascii=False).encode(),
        headers={**tenant.auth(tenant.agent), "Content-Type": "application/json"},
    )
    assert r.status_code == 201, r.text[:200]


@pytest.mark.parametrize(
    ("method", "path", "options"),
    [
        ("GET", "/v1/memories", {"params": {"scope": "tenant:x"}}),  # no key=
        ("GET", "/v1/memories", {"params": {"scope": "bad scope", "key": "k"}}),
        ("GET", "/v1/memories/list", {"params": {"scope": "tenant:x", "limit": 0}}),
        ("GET", "/v1/memories/list", {"params": {"scope": "tenant:x", "limit": "many"}}),
        ("GET", "/v1/memories", {"params": {"scope": "tenant:x", "key": "k", "fallthrough": "perhaps"}}),
        ("POST", "/v1/search", {"json": {"scope": "tenant:x", "query": ""}}),
        ("POST", "/v1/search", {"json": {"scope": "tenant:x", "query": "q", "k": 0}}),
        (
            "POST",
            "/v1/search",
            {"json": {"scope": "tenant:x", "query": "q", "filter": {"a": {"$regex": "x"}}}},
        ),
        ("POST", "/v1/forget", {"json": {"scope": "tenant:x", "mode": "gentle"}}),
        ("POST", "/v1/sessions", {"json": {}}),
    ],
)
def test_malformed_requests_on_other_routes(
    api: httpx.Client, tenant: Tenant, method: str, path: str, options: dict[str, Any]
) -> None:
    options = json.loads(json.dumps(options).replace("tenant:x", tenant.alice))
    r = api.request(method, path, headers=tenant.auth(tenant.agent), **options)
    _refusal(r, 422)


def test_unknown_routes_and_methods(api: httpx.Client, tenant: Tenant) -> None:
    _refusal(api.get("/v1/nothing", headers=tenant.auth(tenant.agent)), 404, "/docs")
    _refusal(api.put("/v1/memories", headers=tenant.auth(tenant.agent)), 405, "/docs")


def test_an_internal_error_is_a_json_500_whose_log_holds_only_its_type(
    world: World,
    tenant: Tenant,
    transport: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("canary-secret-3c1d in an exception message")

    monkeypatch.setattr(world.store, "search", broken)
    caplog.set_level("INFO")
    r = world.client(transport).post(
        "/v1/search", json={"scope": tenant.alice, "query": "q"}, headers=tenant.auth(tenant.agent)
    )
    assert r.status_code == 500 and r.json() == {
        "error": "internal",
        "message": "internal error (RuntimeError); please report it",
    }
    deadline = time.monotonic() + 5
    while (
        not any("internal error" in rec.getMessage() for rec in caplog.records)
        and time.monotonic() < deadline
    ):
        time.sleep(0.01)
    text = "\n".join(rec.getMessage() + str(rec.exc_info or "") for rec in caplog.records)
    assert "internal error: RuntimeError" in text and "canary-secret" not in text and "Traceback" not in text


def test_an_unknown_query_parameter_is_refused_and_named(api: httpx.Client, tenant: Tenant) -> None:
    """A typo (``limt=``) is refused with a 422 naming it, never ignored."""
    listing = {"scope": tenant.alice, "include_descendants": "true"}
    r = api.get("/v1/memories/list", params={**listing, "limt": "5"}, headers=tenant.auth(tenant.agent))
    _refusal(r, 422, "'limt'", "limit")
    r = api.get("/v1/memories/list", params={**listing, "limit": "5"}, headers=tenant.auth(tenant.agent))
    assert r.status_code == 404, r.text  # the known parameter passes (and the prefix is empty)
