"""Every /v1 route does what the store does, through the ASGI transport and a real uvicorn."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from tests.http._support import Tenant, World, wait_verified

import cenotaph
from cenotaph.cli.main import cli


def _write(
    api: httpx.Client,
    t: Tenant,
    scope: str,
    key: str,
    value: object,
    secret: str | None = None,
    **extra: object,
) -> dict[str, Any]:
    r = api.post(
        "/v1/memories",
        json={"scope": scope, "key": key, "value": value, **extra},
        headers=t.auth(secret or t.agent),
    )
    assert r.status_code == 201, r.text
    created: dict[str, Any] = r.json()
    return created


def test_write_read_get_list(api: httpx.Client, tenant: Tenant) -> None:
    session = f"{tenant.alice}/session:s1"
    rec = _write(
        api, tenant, tenant.alice, "diet", {"likes": ["tea"]}, metadata={"topic": "food"}, ttl_seconds=3600
    )
    assert (rec["scope"], rec["key"], rec["value"], rec["metadata"]) == (
        tenant.alice,
        "diet",
        {"likes": ["tea"]},
        {"topic": "food"},
    )
    assert rec["subjects"] == [tenant.alice] and rec["expires_at"] is not None
    h = tenant.auth(tenant.agent)
    got = api.get("/v1/memories", params={"scope": session, "key": "diet"}, headers=h)
    assert got.status_code == 200 and got.json() == rec  # falls through to the ancestor
    assert (
        api.get(
            "/v1/memories", params={"scope": session, "key": "diet", "fallthrough": "false"}, headers=h
        ).status_code
        == 404
    )
    assert api.get(f"/v1/memories/{rec['id']}", headers=h).json() == rec
    _write(api, tenant, session, "mood", "calm")
    listed = api.get("/v1/memories/list", params={"scope": tenant.alice}, headers=h).json()
    assert [r["key"] for r in listed["records"]] == ["diet"] and listed["next_cursor"] is None
    deep = api.get(
        "/v1/memories/list", params={"scope": tenant.alice, "include_descendants": "true"}, headers=h
    ).json()
    assert [(r["scope"], r["key"]) for r in deep["records"]] == [(tenant.alice, "diet"), (session, "mood")]


def test_list_pages_with_a_cursor(api: httpx.Client, tenant: Tenant) -> None:
    items = [{"scope": tenant.alice, "key": f"k{n:02d}", "value": n} for n in range(25)]
    r = api.post("/v1/memories/batch", json={"items": items}, headers=tenant.auth(tenant.agent))
    assert r.status_code == 201 and len(r.json()["records"]) == 25
    seen, cursor = [], None
    while True:
        params: dict[str, str | int] = {
            "scope": tenant.alice,
            "limit": 10,
            **({"cursor": cursor} if cursor else {}),
        }
        page = api.get("/v1/memories/list", params=params, headers=tenant.auth(tenant.agent)).json()
        seen += [r["key"] for r in page["records"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
        assert tenant.alice not in cursor and tenant.id not in cursor  # opaque
    assert seen == [f"k{n:02d}" for n in range(25)]


def test_a_cursor_is_bound_to_its_key_and_listing(api: httpx.Client, tenant: Tenant) -> None:
    api.post(
        "/v1/memories/batch",
        json={"items": [{"scope": tenant.alice, "key": f"k{n}", "value": n} for n in range(3)]},
        headers=tenant.auth(tenant.agent),
    )
    page = api.get(
        "/v1/memories/list", params={"scope": tenant.alice, "limit": 1}, headers=tenant.auth(tenant.agent)
    ).json()
    cursor = page["next_cursor"]
    for secret, params in (
        (tenant.operator, {"scope": tenant.alice, "cursor": cursor}),  # another key
        (
            tenant.agent,
            {"scope": tenant.alice, "include_descendants": "true", "cursor": cursor},
        ),  # another listing
        (tenant.agent, {"scope": tenant.alice, "cursor": cursor[:-2] + "AA"}),  # edited
        (tenant.agent, {"scope": tenant.alice, "cursor": "%%%"}),
    ):
        r = api.get("/v1/memories/list", params=params, headers=tenant.auth(secret))
        assert r.status_code == 422 and "cursor" in r.json()["message"], r.text


def test_search_stays_inside_the_prefix(api: httpx.Client, tenant: Tenant, world: World) -> None:
    world.store.write(tenant.root, "note", "cardiology appointment for the tenant")  # outside alice's prefix
    _write(api, tenant, tenant.alice, "note", "cardiology appointment tuesday")
    _write(
        api,
        tenant,
        f"{tenant.alice}/session:s1",
        "note2",
        "cardiology follow-up",
    )
    h = tenant.auth(tenant.agent)
    hits = api.post(
        "/v1/search",
        json={"scope": f"{tenant.alice}/session:s1", "query": "cardiology appointment"},
        headers=h,
    ).json()["hits"]
    assert {hit["record"]["scope"] for hit in hits} == {tenant.alice, f"{tenant.alice}/session:s1"}
    assert all(hit["score"] > 0 for hit in hits)
    hits = api.post(
        "/v1/search",
        json={"scope": tenant.alice, "query": "cardiology", "include_descendants": True, "k": 1},
        headers=h,
    ).json()["hits"]
    assert len(hits) == 1
    wide = api.post(
        "/v1/search", json={"scope": tenant.root, "query": "cardiology"}, headers=tenant.auth(tenant.operator)
    ).json()["hits"]
    assert tenant.root in {hit["record"]["scope"] for hit in wide}


def test_read_never_falls_through_past_the_prefix(api: httpx.Client, tenant: Tenant, world: World) -> None:
    world.store.write(tenant.root, "policy", "tenant-wide")
    r = api.get(
        "/v1/memories", params={"scope": tenant.alice, "key": "policy"}, headers=tenant.auth(tenant.agent)
    )
    assert r.status_code == 404
    r = api.get(
        "/v1/memories", params={"scope": tenant.alice, "key": "policy"}, headers=tenant.auth(tenant.operator)
    )
    assert r.status_code == 200 and r.json()["value"] == "tenant-wide"


def test_sessions_record_what_was_read_as_derived_from(api: httpx.Client, tenant: Tenant) -> None:
    source = _write(api, tenant, f"{tenant.alice}/session:s1", "note", "cardiology appointment")
    h = tenant.auth(tenant.agent)
    opened = api.post("/v1/sessions", json={"scope": tenant.alice}, headers=h)
    assert opened.status_code == 201
    sid = opened.json()["session_id"]
    hs = {**h, "Cenotaph-Session": sid}
    assert (
        api.post(
            "/v1/search", json={"scope": f"{tenant.alice}/session:s1", "query": "cardiology"}, headers=hs
        ).status_code
        == 200
    )
    summary = api.post(
        "/v1/memories",
        json={"scope": tenant.alice, "key": "summary", "value": "mentioned cardiology"},
        headers=hs,
    ).json()
    assert summary["derived_from"] == [source["id"]]
    plain = _write(api, tenant, tenant.alice, "plain", "no session")
    assert plain["derived_from"] == []
    # another key cannot use the session, even in the same tenant
    r = api.get(
        "/v1/memories",
        params={"scope": tenant.alice, "key": "summary"},
        headers={**tenant.auth(tenant.operator), "Cenotaph-Session": sid},
    )
    assert r.status_code == 404
    assert api.delete(f"/v1/sessions/{sid}", headers=h).status_code == 204
    r = api.get("/v1/memories", params={"scope": tenant.alice, "key": "summary"}, headers=hs)
    assert r.status_code == 404  # an ended session is refused
    # forgetting the source forgets what the session derived from it (W3 through W6)
    fr = api.post("/v1/forget", json={"scope": f"{tenant.alice}/session:s1"}, headers=h).json()
    wait_verified(api, fr["status_url"], tenant.agent)
    assert (
        api.get("/v1/memories", params={"scope": tenant.alice, "key": "summary"}, headers=h).status_code
        == 404
    )
    assert (
        api.get("/v1/memories", params={"scope": tenant.alice, "key": "plain"}, headers=h).status_code == 200
    )


def test_forget_answers_202_and_the_status_url_polls_to_verified(api: httpx.Client, tenant: Tenant) -> None:
    _write(api, tenant, tenant.alice, "diet", "vegetarian")
    h = tenant.auth(tenant.agent)
    r = api.post("/v1/forget", json={"scope": tenant.alice, "key": "diet"}, headers=h)
    assert r.status_code == 202, r.text
    body = r.json()
    assert r.headers["location"] == body["status_url"] == f"/v1/erasures/{body['request_id']}"
    assert (body["mode"], body["target_kind"]) == ("compliance", "key")
    doc = wait_verified(api, body["status_url"], tenant.agent)
    assert doc["status"]["state"] == "verified" and doc["status"]["gaps"] == []
    assert doc["status"]["layers"]["rows"]["state"] == "done"
    listed = api.get("/v1/erasures", headers=h).json()["erasures"]
    assert [e["id"] for e in listed] == [body["request_id"]]
    cert = api.get(f"{body['status_url']}/certificate", headers=tenant.auth(tenant.operator))
    assert cert.status_code == 200
    public = api.get("/v1/public-key").json()["public_key"]
    certificate = cenotaph.verify_certificate(cert.text, public)
    assert certificate["request_id"] == body["request_id"]
    # the requester is the key that made the request (not the operator who fetched the certificate)
    assert certificate["requester"] == {"key_id": api.get("/v1/key", headers=h).json()["id"]}
    # writes to the forgotten key are refused until reauthorized
    r = api.post("/v1/memories", json={"scope": tenant.alice, "key": "diet", "value": "vegan"}, headers=h)
    assert (
        r.status_code == 409 and r.json()["error"] == "forgotten" and r.json()["version"] == body["version"]
    )
    token = api.post("/v1/reauthorizations", json={"scope": tenant.alice, "key": "diet"}, headers=h).json()[
        "token"
    ]
    _write(api, tenant, tenant.alice, "diet", "vegan", reauthorization=token)


def test_the_certificate_answers_409_with_gaps_until_verified(api: httpx.Client, tenant: Tenant) -> None:
    _write(api, tenant, tenant.alice, "x", "y")
    body = api.post(
        "/v1/forget",
        json={"scope": tenant.alice, "key": "x", "mode": "operational"},
        headers=tenant.auth(tenant.agent),
    ).json()
    r = api.get(f"{body['status_url']}/certificate", headers=tenant.auth(tenant.operator))
    assert r.status_code == 409 and r.json()["error"] == "not_provable" and r.json()["gaps"]


def test_scope_closure_names_only_ancestors_inside_the_prefix(
    api: httpx.Client, tenant: Tenant, world: World
) -> None:
    world.store.write(tenant.root, "k", "tenant copy")  # outside alice's prefix
    _write(api, tenant, f"{tenant.alice}/session:s1", "k", "session copy")
    h = tenant.auth(tenant.agent)
    for include in (False, True):
        r = api.post(
            "/v1/forget",
            json={"scope": f"{tenant.alice}/session:s1", "key": "k", "include_ancestors": include},
            headers=h,
        )
        assert r.status_code == 409 and r.json()["error"] == "scope_closure", r.text
        assert tenant.root not in r.text and r.json()["ancestors"] == []
    assert world.store.read(tenant.root, "k") is not None  # nothing outside the prefix was touched
    _write(api, tenant, tenant.alice, "j", "alice copy")
    _write(api, tenant, f"{tenant.alice}/session:s1", "j", "session copy")
    r = api.post("/v1/forget", json={"scope": f"{tenant.alice}/session:s1", "key": "j"}, headers=h)
    assert r.status_code == 409 and r.json()["ancestors"] == [tenant.alice]
    r = api.post(
        "/v1/forget",
        json={"scope": f"{tenant.alice}/session:s1", "key": "j", "include_ancestors": True},
        headers=h,
    )
    assert r.status_code == 202


def test_subject_erasure_and_export(api: httpx.Client, tenant: Tenant, world: World) -> None:
    _write(api, tenant, tenant.alice, "diet", "vegetarian")
    _write(api, tenant, f"{tenant.alice}/session:s1", "note", "tuesday")
    ho = tenant.auth(tenant.operator)
    export = api.get(f"/v1/subjects/{tenant.alice}/export", headers=ho)
    assert export.status_code == 200, export.text
    assert sorted(r["key"] for r in export.json()["records"]) == ["diet", "note"]
    paged = api.get(f"/v1/subjects/{tenant.alice}/export", params={"limit": 1}, headers=ho).json()
    assert len(paged["records"]) == 1 and paged["next_cursor"]
    rest = api.get(
        f"/v1/subjects/{tenant.alice}/export", params={"limit": 1, "cursor": paged["next_cursor"]}, headers=ho
    ).json()
    assert len(rest["records"]) == 1 and rest["next_cursor"] is None and rest["records"] != paged["records"]
    r = api.post(f"/v1/subjects/{tenant.alice}/forget", headers=ho)
    assert r.status_code == 202 and r.json()["target_kind"] == "subject"
    wait_verified(api, r.json()["status_url"], tenant.operator)
    after = api.get(f"/v1/subjects/{tenant.alice}/export", headers=ho).json()
    assert after["records"] == [] and [e["id"] for e in after["erasure_requests"]] == [r.json()["request_id"]]
    # alice's own keys went with her: her agent key and her operator key authenticate nobody
    assert api.get("/v1/key", headers=tenant.auth(tenant.agent)).status_code == 401
    assert api.get("/v1/key", headers=tenant.auth(tenant.alice_operator)).status_code == 401
    # the subject's erasure blocks writes until an operator lifts it
    agent = world.keys.create(tenant=tenant.id, prefix=tenant.alice, role="agent")[1]  # a new key
    blocked = api.post(
        "/v1/memories",
        json={"scope": tenant.alice, "key": "diet", "value": "v"},
        headers=tenant.auth(agent),
    )
    assert blocked.status_code == 409
    for body in ({"scope": tenant.alice, "subject": tenant.alice}, {"scope": tenant.alice, "key": "diet"}):
        refused = api.post("/v1/reauthorizations", json=body, headers=tenant.auth(agent))
        assert refused.status_code == 403 and "operator key" in refused.json()["message"]
    token = api.post(
        "/v1/reauthorizations",
        json={"scope": tenant.alice, "key": "diet", "subject": tenant.alice},
        headers=ho,
    ).json()["token"]
    _write(api, tenant, tenant.alice, "diet", "v", agent, reauthorization=token)


def test_backups_epochs_rotation_and_purge(api: httpx.Client, tenant: Tenant) -> None:
    ho = tenant.auth(tenant.operator)
    made = api.post("/v1/backups", headers=ho)
    assert made.status_code == 201, made.text
    backup = made.json()
    assert backup["created_here"] and backup["epochs"] and backup["bytes"] > 0
    listed = {b["id"]: b for b in api.get("/v1/backups", headers=ho).json()["backups"]}
    assert listed[backup["id"]]["created_here"] is True
    epochs = api.get("/v1/keys/epochs", headers=ho).json()["epochs"]
    held = [e for e in epochs if backup["id"] in e["backups"]]
    assert held and sum(e["current"] for e in epochs) == 1
    rotated = api.post("/v1/keys/rotate", headers=ho).json()
    assert set(backup["epochs"]) <= set(rotated["retained_epochs"])
    assert api.post(f"/v1/backups/{backup['id']}/release", headers=ho).status_code == 204
    assert backup["id"] not in {b["id"] for b in api.get("/v1/backups", headers=ho).json()["backups"]}
    purged = api.post("/v1/purge", headers=ho)
    assert purged.status_code == 200 and "scan" in purged.json()


def test_key_health_public_key_and_docs(api: httpx.Client, tenant: Tenant) -> None:
    me = api.get("/v1/key", headers=tenant.auth(tenant.agent)).json()
    assert (me["tenant"], me["prefix"], me["role"]) == (tenant.id, tenant.alice, "agent")
    assert api.get("/v1/health").json() == {"status": "ok"}
    assert len(api.get("/v1/public-key").json()["public_key"]) == 64
    schema = api.get("/openapi.json").json()
    assert "/v1/erasures/{request_id}/certificate" in schema["paths"]
    assert api.get("/docs").status_code == 200


def test_openapi_documents_every_body_response_and_error(world: World) -> None:
    schema = world.app.openapi()
    assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    for path, methods in schema["paths"].items():
        if not path.startswith("/v1/"):
            continue
        for method, op in methods.items():
            responses = op["responses"]
            success = [c for c in responses if c.startswith("2")]
            assert success, f"{method} {path} documents no success response"
            for code in success:
                if code != "204":
                    assert "schema" in responses[code]["content"]["application/json"], (method, path, code)
            if path not in ("/v1/health", "/v1/public-key"):
                assert "401" in responses, (method, path)
                assert responses["401"]["content"]["application/json"]["schema"]["$ref"].endswith(
                    "/ErrorBody"
                )
            if method == "post" and op.get("requestBody"):
                assert "422" in responses and "413" in responses, (method, path)


@pytest.mark.parametrize("transport", ["uvicorn"], indirect=True)
def test_access_log_holds_no_names(
    api: httpx.Client, tenant: Tenant, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="cenotaph.http.access")
    _write(
        api,
        tenant,
        tenant.alice,
        "canary-key-7f3a",
        "canary-value-19ce",
        subjects=[f"{tenant.alice}/idp:canary-subject"],
    )
    api.get(
        "/v1/memories",
        params={"scope": tenant.alice, "key": "canary-key-7f3a"},
        headers=tenant.auth(tenant.agent),
    )
    api.get(f"/v1/subjects/{tenant.alice}/export", headers=tenant.auth(tenant.operator))
    deadline = time.monotonic() + 10  # uvicorn's thread logs each line just after it answers
    while True:
        lines = [r.getMessage() for r in caplog.records if r.name == "cenotaph.http.access"]
        if len(lines) >= 3 or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert any("POST /v1/memories 201" in line for line in lines)
    assert any("GET /v1/subjects/{subject:path}/export 200" in line for line in lines)
    text = "\n".join(lines)
    for needle in ("canary", tenant.id, "alice", tenant.agent, tenant.operator, "Bearer"):
        assert needle not in text


def test_the_log_head_and_consistency_routes_and_a_witness_of_the_server(
    api: httpx.Client, tenant: Tenant, world: World, transport: str, tmp_path: Path
) -> None:
    h = tenant.auth(tenant.agent)
    assert api.get("/v1/log/head").status_code == 401
    public = api.get("/v1/public-key").json()["public_key"]
    old = api.get("/v1/log/head", headers=h).json()
    assert cenotaph.verify_consistency(old, old, [], public)[0] == old["tree_size"]
    _write(api, tenant, tenant.alice, "k", "v")
    assert api.post("/v1/forget", json={"scope": tenant.alice, "key": "k"}, headers=h).status_code == 202
    answer = api.get("/v1/log/consistency", params={"from": old["tree_size"]}, headers=h).json()
    sizes = cenotaph.verify_consistency(old, answer["tree_head"], answer["proof"], public)
    assert sizes[0] == old["tree_size"] < sizes[1]
    beyond = api.get("/v1/log/consistency", params={"from": sizes[1] + 1000}, headers=h)
    assert beyond.status_code == 422 and "fewer than the" in beyond.json()["message"]
    assert api.get("/v1/log/consistency", params={"from": -1}, headers=h).status_code == 422
    if transport == "uvicorn":  # the witness command, against the real server
        state = str(tmp_path / "witness.json")
        url = world.base_url(transport)
        for _ in range(2):
            result = CliRunner().invoke(
                cli,
                ["audit", "witness", state, "--url", url, "--api-key", tenant.agent],
                catch_exceptions=False,
            )
            assert result.exit_code == 0, result.stderr
        assert json.loads(result.stdout)["old_size"] >= sizes[1]
        wrong = CliRunner().invoke(
            cli, ["audit", "witness", state, "--url", url, "--api-key", "nope"], catch_exceptions=False
        )
        assert wrong.exit_code == 1 and "answered 401" in wrong.stderr
