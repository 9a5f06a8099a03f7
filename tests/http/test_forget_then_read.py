"""Forget, then read: nothing of it comes back through any route or through the remote client."""

from __future__ import annotations

import httpx
import pytest
from tests.http._support import Tenant, World, wait_verified

import cenotaph

CANARY = "cardiology appointment canary-5d1e"


def _seed(api: httpx.Client, t: Tenant) -> tuple[str, dict[str, str]]:
    """A note in a session scope, a summary derived from it through a session, and an unrelated record."""
    h = t.auth(t.agent)
    s1 = f"{t.alice}/session:s1"
    note = api.post("/v1/memories", json={"scope": s1, "key": "note", "value": CANARY}, headers=h).json()
    sid = api.post("/v1/sessions", json={"scope": t.alice}, headers=h).json()["session_id"]
    hs = {**h, "Cenotaph-Session": sid}
    assert api.get("/v1/memories", params={"scope": s1, "key": "note"}, headers=hs).status_code == 200
    summary = api.post(
        "/v1/memories", json={"scope": t.alice, "key": "summary", "value": f"said: {CANARY}"}, headers=hs
    ).json()
    api.post("/v1/memories", json={"scope": t.alice, "key": "unrelated", "value": "kept"}, headers=h)
    return s1, {"note": note["id"], "summary": summary["id"]}


def _nothing_of_it(api: httpx.Client, t: Tenant, s1: str, ids: dict[str, str]) -> None:
    for secret in (t.agent, t.operator):
        h = t.auth(secret)
        for scope, key in ((s1, "note"), (t.alice, "summary"), (f"{s1}/deeper:x", "note")):
            assert api.get("/v1/memories", params={"scope": scope, "key": key}, headers=h).status_code == 404
        for record_id in ids.values():
            assert api.get(f"/v1/memories/{record_id}", headers=h).status_code == 404
        listed = api.get(
            "/v1/memories/list", params={"scope": t.alice, "include_descendants": "true"}, headers=h
        )
        assert [r["key"] for r in listed.json()["records"]] == ["unrelated"]
        found = api.post(
            "/v1/search", json={"scope": s1, "query": CANARY, "include_descendants": True}, headers=h
        ).json()
        assert CANARY not in str(found)
        sid = api.post("/v1/sessions", json={"scope": t.alice}, headers=h).json()["session_id"]
        hs = {**h, "Cenotaph-Session": sid}
        assert api.get("/v1/memories", params={"scope": s1, "key": "note"}, headers=hs).status_code == 404
        assert CANARY not in api.post("/v1/search", json={"scope": t.alice, "query": CANARY}, headers=hs).text
    export = api.get(f"/v1/subjects/{t.alice}/export", headers=t.auth(t.operator))
    assert export.status_code == 200 and CANARY not in export.text
    assert [r["key"] for r in export.json()["records"]] == ["unrelated"]


@pytest.mark.parametrize("how", ["scope", "key", "subject"])
def test_forget_then_read_through_every_route(api: httpx.Client, tenant: Tenant, how: str) -> None:
    s1, ids = _seed(api, tenant)
    if how == "subject":  # the subject is alice: everything of hers goes, the unrelated record too
        r = api.post(f"/v1/subjects/{tenant.alice}/forget", headers=tenant.auth(tenant.operator))
    else:
        body = {"scope": s1} if how == "scope" else {"scope": s1, "key": "note"}
        r = api.post("/v1/forget", json=body, headers=tenant.auth(tenant.agent))
    assert r.status_code == 202, r.text
    if how == "subject":
        h = tenant.auth(tenant.operator)
        assert (
            api.get(f"/v1/memories/{ids['summary']}", headers=h).status_code == 404
        )  # at once, before purge
        wait_verified(api, r.json()["status_url"], tenant.operator)
        listed = api.get(
            "/v1/memories/list", params={"scope": tenant.alice, "include_descendants": "true"}, headers=h
        )
        assert listed.status_code == 404
        assert CANARY not in api.get(f"/v1/subjects/{tenant.alice}/export", headers=h).text
        return
    _nothing_of_it(api, tenant, s1, ids)  # right after the 202, before any purge finished
    wait_verified(api, r.json()["status_url"], tenant.agent)
    _nothing_of_it(api, tenant, s1, ids)


@pytest.mark.parametrize("mode", ["compliance", "operational"])
def test_forget_then_read_through_the_remote_client(
    remote: cenotaph.Client, tenant: Tenant, mode: str
) -> None:
    s1 = f"{tenant.alice}/session:s1"
    note = remote.write(s1, "note", CANARY)
    with remote.session(tenant.alice) as session:
        assert session.read(s1, "note") == note
        summary = session.write(tenant.alice, "summary", f"said: {CANARY}")
    assert summary.derived_from == (note.id,)
    request = remote.forget(s1, mode=mode)
    assert isinstance(request, cenotaph.ErasureRequest)
    for scope, key in ((s1, "note"), (f"{s1}/x:y", "note")):
        assert remote.read(scope, key) is None
    assert remote.get(note.id) is None
    assert remote.list(s1, include_descendants=True) == []
    assert remote.search(s1, CANARY, fallthrough=False, include_descendants=True) == []
    if mode == "compliance":
        assert CANARY not in str(
            remote.search(tenant.alice, CANARY, include_descendants=True)
        )  # the derived summary goes with its source
        assert remote.read(tenant.alice, "summary") is None
        assert remote.get(summary.id) is None
        status = request.wait(30)
        assert status.state == "verified"
        assert CANARY not in str(remote.export_subject(tenant.alice))
        certificate = remote.attest(request.id)
        cenotaph.verify_certificate(certificate.to_json(), remote.public_key)
    else:
        assert remote.read(tenant.alice, "summary") is not None  # operational: derived records stay
        with pytest.raises(cenotaph.ErasureNotProvableError):
            remote.attest(request.id)


def test_a_forget_made_with_the_library_is_honoured_by_the_server(
    api: httpx.Client, world: World, tenant: Tenant
) -> None:
    h = tenant.auth(tenant.agent)
    api.post("/v1/memories", json={"scope": tenant.alice, "key": "k", "value": CANARY}, headers=h)
    world.store.forget(tenant.alice, "k")
    assert api.get("/v1/memories", params={"scope": tenant.alice, "key": "k"}, headers=h).status_code == 404
    r = api.post("/v1/memories", json={"scope": tenant.alice, "key": "k", "value": "again"}, headers=h)
    assert r.status_code == 409 and r.json()["error"] == "forgotten"
