"""Keys and reach: every route refuses a missing, wrong or revoked key (401), a weak role (403), and
answers an attempt on another tenant's or another prefix's data exactly like a missing one (404,
same body), leaving that data as it was."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from tests.http._support import Tenant, World, wait_verified

from cenotaph.service.http.problems import NOT_FOUND_MESSAGE

NOT_FOUND = {"error": "not_found", "message": NOT_FOUND_MESSAGE}


@dataclass
class Victim:
    """A tenant with one of everything, made through its own keys."""

    t: Tenant
    record_id: str
    request_id: str
    forgotten_id: str
    backup_id: str
    session_id: str


@pytest.fixture
def victim(api: httpx.Client, world: World, tenant: Tenant) -> Victim:
    h = tenant.auth(tenant.agent)
    rec = api.post(
        "/v1/memories", json={"scope": tenant.alice, "key": "diet", "value": "vegetarian"}, headers=h
    ).json()
    gone = api.post(
        "/v1/memories", json={"scope": tenant.alice, "key": "gone", "value": "x"}, headers=h
    ).json()
    fr = api.post("/v1/forget", json={"scope": tenant.alice, "key": "gone"}, headers=h).json()
    wait_verified(api, fr["status_url"], tenant.agent)
    backup = api.post("/v1/backups", headers=tenant.auth(tenant.operator)).json()
    session = api.post("/v1/sessions", json={"scope": tenant.alice}, headers=h).json()
    return Victim(tenant, rec["id"], fr["request_id"], gone["id"], backup["id"], session["session_id"])


def _routes(v: Victim) -> list[tuple[str, str, dict[str, Any]]]:
    """(method, path, request options) for every authenticated route, aimed at the victim's data."""
    a = v.t.alice
    return [
        ("POST", "/v1/memories", {"json": {"scope": a, "key": "diet", "value": "overwritten"}}),
        (
            "POST",
            "/v1/memories/batch",
            {"json": {"items": [{"scope": a, "key": "diet", "value": "overwritten"}]}},
        ),
        ("GET", "/v1/memories", {"params": {"scope": a, "key": "diet"}}),
        ("GET", "/v1/memories/list", {"params": {"scope": a}}),
        ("GET", f"/v1/memories/{v.record_id}", {}),
        ("POST", "/v1/search", {"json": {"scope": a, "query": "vegetarian"}}),
        ("POST", "/v1/sessions", {"json": {"scope": a}}),
        ("DELETE", f"/v1/sessions/{v.session_id}", {}),
        ("POST", "/v1/forget", {"json": {"scope": a, "key": "diet"}}),
        ("POST", f"/v1/subjects/{a}/forget", {}),
        ("POST", "/v1/reauthorizations", {"json": {"scope": a, "key": "gone"}}),
        ("GET", f"/v1/erasures/{v.request_id}", {}),
        ("GET", f"/v1/erasures/{v.request_id}/certificate", {}),
        ("GET", f"/v1/subjects/{a}/export", {}),
        ("POST", f"/v1/backups/{v.backup_id}/release", {}),
    ]


# routes that reach no particular object: they answer for the caller's own tenant only
UNAIMED: list[tuple[str, str, dict[str, Any]]] = [
    ("GET", "/v1/erasures", {}),
    ("GET", "/v1/backups", {}),
    ("POST", "/v1/backups", {}),
    ("GET", "/v1/keys/epochs", {}),
    ("POST", "/v1/keys/rotate", {}),
    ("POST", "/v1/purge", {}),
    ("GET", "/v1/key", {}),
]
OPERATOR_ONLY = {
    "/v1/subjects/{}/forget",
    "/v1/erasures/{}/certificate",
    "/v1/subjects/{}/export",
    "/v1/backups/{}/release",
    "/v1/backups",
    "/v1/keys/epochs",
    "/v1/keys/rotate",
    "/v1/purge",
}


def _all(v: Victim) -> list[tuple[str, str, dict[str, Any]]]:
    return _routes(v) + UNAIMED


def _unchanged(api: httpx.Client, v: Victim) -> None:
    h = v.t.auth(v.t.agent)
    got = api.get("/v1/memories", params={"scope": v.t.alice, "key": "diet"}, headers=h)
    assert got.status_code == 200 and got.json()["value"] == "vegetarian"
    assert api.get(f"/v1/erasures/{v.request_id}", headers=h).json()["status"]["state"] == "verified"
    assert v.backup_id in {
        b["id"] for b in api.get("/v1/backups", headers=v.t.auth(v.t.operator)).json()["backups"]
    }


@pytest.mark.parametrize(
    "credentials",
    [
        None,
        "",
        "Bearer",
        "Bearer  x",
        "Basic dXNlcjpwYXNz",
        "Bearer cnk_0000000000000000_" + "A" * 43,
        "bearer x" * 50,
    ],
)
def test_a_missing_or_wrong_key_is_401_on_every_route(
    api: httpx.Client, victim: Victim, credentials: str | None
) -> None:
    headers = {} if credentials is None else {"Authorization": credentials}
    for method, path, options in _all(victim):
        r = api.request(method, path, headers=headers, **options)
        assert r.status_code == 401, (method, path, r.text)
        assert r.json()["error"] == "unauthorized" and r.headers["www-authenticate"] == "Bearer"
    _unchanged(api, victim)


def test_a_forged_secret_for_a_real_key_is_401(api: httpx.Client, victim: Victim) -> None:
    real = victim.t.operator
    for forged in (real[:-1] + ("A" if real[-1] != "A" else "B"), real[:-5], real + "x", real.upper()):
        for method, path, options in _all(victim):
            r = api.request(method, path, headers={"Authorization": f"Bearer {forged}"}, **options)
            assert r.status_code == 401, (method, path)
    _unchanged(api, victim)


def test_a_revoked_key_is_refused_from_the_next_request(
    api: httpx.Client, world: World, victim: Victim
) -> None:
    key, secret = world.keys.create(tenant=victim.t.id, role="operator")
    h = {"Authorization": f"Bearer {secret}"}
    assert api.get("/v1/key", headers=h).status_code == 200
    world.keys.revoke(key.id)
    for method, path, options in _all(victim):
        r = api.request(method, path, headers=h, **options)
        assert r.status_code == 401, (method, path, r.text)
    _unchanged(api, victim)


def test_an_agent_key_is_403_on_operator_routes(api: httpx.Client, victim: Victim) -> None:
    h = victim.t.auth(victim.t.agent)
    for method, path, options in _all(victim):
        template = (
            path.replace(victim.t.alice, "{}")
            .replace(victim.request_id, "{}")
            .replace(victim.backup_id, "{}")
        )
        r = api.request(method, path, headers=h, **options)
        if template in OPERATOR_ONLY:
            assert r.status_code == 403 and r.json()["error"] == "forbidden", (method, path)
        else:
            assert r.status_code != 403, (method, path)


@pytest.mark.parametrize("attacker", ["other_operator", "other_agent", "bob_agent"])
def test_reaching_into_another_tenant_or_prefix_answers_one_404_and_changes_nothing(
    api: httpx.Client, victim: Victim, other: Tenant, attacker: str
) -> None:
    secret = {"other_operator": other.operator, "other_agent": other.agent, "bob_agent": victim.t.bob_agent}[
        attacker
    ]
    h = {"Authorization": f"Bearer {secret}"}
    agent = attacker != "other_operator"
    for method, path, options in _routes(victim):
        template = (
            path.replace(victim.t.alice, "{}")
            .replace(victim.request_id, "{}")
            .replace(victim.backup_id, "{}")
        )
        r = api.request(method, path, headers=h, **options)
        if agent and template in OPERATOR_ONLY:
            assert r.status_code == 403, (method, path)  # the role is checked before any lookup
            continue
        assert r.status_code == 404, (method, path, r.status_code, r.text)
        assert r.json() == NOT_FOUND, (method, path)
    _unchanged(api, victim)


def test_foreign_missing_and_forgotten_answer_the_same_bytes(
    api: httpx.Client, victim: Victim, other: Tenant
) -> None:
    foreign = other.auth(other.operator)
    own = victim.t.auth(victim.t.operator)
    answers = {
        "foreign record": api.get(f"/v1/memories/{victim.record_id}", headers=foreign),
        "missing record": api.get(f"/v1/memories/{secrets.token_hex(16)}", headers=own),
        "forgotten record": api.get(f"/v1/memories/{victim.forgotten_id}", headers=own),
        "foreign read": api.get(
            "/v1/memories", params={"scope": victim.t.alice, "key": "diet"}, headers=foreign
        ),
        "missing read": api.get(
            "/v1/memories", params={"scope": victim.t.alice, "key": "nothing"}, headers=own
        ),
        "forgotten read": api.get(
            "/v1/memories", params={"scope": victim.t.alice, "key": "gone"}, headers=own
        ),
        "foreign list": api.get("/v1/memories/list", params={"scope": victim.t.alice}, headers=foreign),
        "missing list": api.get(
            "/v1/memories/list", params={"scope": f"{victim.t.root}/user:nobody"}, headers=own
        ),
        "foreign request": api.get(f"/v1/erasures/{victim.request_id}", headers=foreign),
        "missing request": api.get("/v1/erasures/er_000000000000000000000000", headers=own),
        "foreign export": api.get(f"/v1/subjects/{victim.t.alice}/export", headers=foreign),
        "foreign session": api.get(
            "/v1/memories",
            params={"scope": other.alice, "key": "x"},
            headers={**foreign, "Cenotaph-Session": victim.session_id},
        ),
        "missing session": api.get(
            "/v1/memories",
            params={"scope": victim.t.alice, "key": "diet"},
            headers={**own, "Cenotaph-Session": "ses_nope"},
        ),
    }
    bodies = {
        name: (r.status_code, r.content, r.headers.get("content-length")) for name, r in answers.items()
    }
    assert len(set(bodies.values())) == 1, bodies
    assert answers["foreign record"].json() == NOT_FOUND


def test_foreign_ids_in_a_write_are_not_found_and_foreign_subjects_refused(
    api: httpx.Client, victim: Victim, other: Tenant
) -> None:
    h = other.auth(other.agent)
    r = api.post(
        "/v1/memories",
        json={"scope": other.alice, "key": "k", "value": 1, "derived_from": [victim.record_id]},
        headers=h,
    )
    assert r.status_code == 404 and r.json() == NOT_FOUND
    r = api.post(
        "/v1/memories",
        json={"scope": other.alice, "key": "k", "value": 1, "derived_from": [victim.forgotten_id]},
        headers=h,
    )
    assert (
        r.status_code == 404 and r.json() == NOT_FOUND
    )  # a forgotten id from elsewhere looks like any other
    r = api.post(
        "/v1/memories",
        json={"scope": other.alice, "key": "k", "value": 1, "subjects": [victim.t.alice]},
        headers=h,
    )
    assert r.status_code == 422 and victim.t.alice not in r.text
    assert (
        api.get("/v1/memories", params={"scope": other.alice, "key": "k"}, headers=h).status_code == 404
    )  # nothing written


def test_listings_show_only_what_the_key_reaches(api: httpx.Client, victim: Victim, other: Tenant) -> None:
    foreign = other.auth(other.operator)
    assert api.get("/v1/erasures", headers=foreign).json()["erasures"] == []
    assert victim.request_id in {
        e["id"] for e in api.get("/v1/erasures", headers=victim.t.auth(victim.t.operator)).json()["erasures"]
    }
    # bob's agent sees none of alice's requests; alice's operator (prefix alice) does
    assert api.get("/v1/erasures", headers=victim.t.auth(victim.t.bob_agent)).json()["erasures"] == []
    assert api.get("/v1/erasures", headers=victim.t.auth(victim.t.alice_operator)).json()["erasures"]
    backups = {b["id"]: b for b in api.get("/v1/backups", headers=foreign).json()["backups"]}
    assert backups[victim.backup_id]["created_here"] is False
    purged = api.post("/v1/purge", headers=foreign).json()
    assert victim.request_id not in purged["requests"]
    for epoch in api.get("/v1/keys/epochs", headers=foreign).json()["epochs"]:
        assert victim.request_id not in epoch["pending_erasures"]


def test_an_operator_with_a_narrow_prefix_cannot_erase_a_wider_subject(
    api: httpx.Client, victim: Victim
) -> None:
    narrow = victim.t.auth(victim.t.alice_operator)
    r = api.post(f"/v1/subjects/{victim.t.root}/user:bob/forget", headers=narrow)
    assert r.status_code == 404 and r.json() == NOT_FOUND
    r = api.post("/v1/subjects/idp:12345/forget", headers=narrow)  # not a scope path: no tenant's own
    assert r.status_code == 404 and r.json() == NOT_FOUND
