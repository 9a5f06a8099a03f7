"""Whoever can write ``api-keys/`` (and read its pepper) forges nothing there.

``owners.jsonl`` says which API key made each erasure request and backup, and so which keys see
them: a forged line naming the agent as the maker of an operator's request would show it that
request. Who may lift a forget is not that file's to say: the store's ledger names each forget's
owner, so no line -- forged or genuine -- turns an agent's 403 into a token. ``keys.json`` binds each key to a
tenant, a prefix and a role: a forged entry would be a key. The attacker here can write the whole
directory and read its pepper, but not the keyring. They plant an owner line MAC'd under the
pepper, edit the operator's own line to name the agent, copy in a line minted by a store of their
own (another keyring), and put in a key file of the unsealed kind older versions wrote (bindings in
clear, MAC'd under the pepper) naming a secret of their own as an operator: the server ignores
all of it, in-process and as a real ``cenotaph serve`` process. Each owner attack is paired with a
control (the same line MAC'd under the right key is honoured: the request becomes visible, and
still lifts nothing), so a test that passes because the line was never read cannot pass.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx
import pytest
from tests.http._support import Tenant, World
from tests.http.test_serve import Server, _cli, _create

import cenotaph
from cenotaph.errors import StorageError
from cenotaph.service.apikeys import ApiKey, ApiKeyRing
from cenotaph.service.http.ownership import Ownership


def _pepper_line(keys_dir: Path, request_id: str, key_id: str) -> dict[str, object]:
    """An owner line MAC'd the way it once was: under the pepper stored beside it."""
    pepper = (keys_dir / "pepper").read_bytes()
    body = f"erasure\0{request_id}\0{key_id}".encode()
    mac = hmac.new(pepper, b"owner\0" + body, hashlib.sha256).hexdigest()
    return {"kind": "erasure", "id": request_id, "key": key_id, "mac": mac}


def _append(keys_dir: Path, *lines: dict[str, object] | str) -> None:
    with (keys_dir / "owners.jsonl").open("a") as handle:
        for line in lines:
            handle.write((line if isinstance(line, str) else json.dumps(line)) + "\n")


def _edit_owner(keys_dir: Path, request_id: str, key_id: str) -> None:
    """Rewrite the line of ``request_id`` to name ``key_id``, re-MAC'd under the pepper."""
    owners = keys_dir / "owners.jsonl"
    lines = []
    for raw in owners.read_text().splitlines():
        line = json.loads(raw)
        if line["id"] == request_id:
            line = _pepper_line(keys_dir, request_id, key_id)
        lines.append(json.dumps(line))
    owners.write_text("\n".join(lines) + "\n")


def _minted_elsewhere(tmp: Path, request_id: str, key: ApiKey) -> str:
    """A line naming ``key`` as the request's maker, MAC'd by another store's server (its own
    keyring), as an attacker running their own cenotaph would make it."""
    theirs = ApiKeyRing(tmp)  # a fresh data directory: its own keyring, its own derived key
    Ownership(theirs).record("erasure", request_id, key)
    return (theirs.path / "owners.jsonl").read_text().splitlines()[-1]


def _minted_here(keys: ApiKeyRing, request_id: str, key: ApiKey) -> None:
    """The control: the same line, MAC'd under this store's own derived key (what the server
    itself writes, and what only the keyring's holder can make)."""
    Ownership(keys).record("erasure", request_id, key)


def _sees(http: httpx.Client, secret: str, request_id: str) -> bool:
    r = http.get(f"/v1/erasures/{request_id}", headers={"Authorization": f"Bearer {secret}"})
    assert r.status_code in (200, 404), r.text
    return r.status_code == 200


def _call(http: httpx.Client, path: str, secret: str, body: Mapping[str, object]) -> httpx.Response:
    return http.post(path, json=body, headers={"Authorization": f"Bearer {secret}"})


def _refused_without_token(r: httpx.Response) -> None:
    assert r.status_code == 403, r.text
    assert r.json()["error"] == "forbidden" and "token" not in r.json()


# -- in-process -------------------------------------------------------------------------------------
def _operator_forgot(api: httpx.Client, tenant: Tenant, key: str) -> str:
    assert _call(
        api, "/v1/memories", tenant.agent, {"scope": tenant.alice, "key": key, "value": 1}
    ).is_success
    r = _call(api, "/v1/forget", tenant.operator, {"scope": tenant.alice, "key": key, "mode": "operational"})
    assert r.status_code == 202, r.text
    request_id: str = r.json()["request_id"]
    return request_id


def test_a_pepper_macd_line_planted_or_edited_shows_and_lifts_nothing(
    api: httpx.Client, tenant: Tenant, world: World
) -> None:
    agent = world.keys.authenticate(tenant.agent)
    assert agent is not None
    request_id = _operator_forgot(api, tenant, "diet")
    _append(world.keys.path, _pepper_line(world.keys.path, request_id, agent.id))
    ask = {"scope": tenant.alice, "key": "diet"}
    assert not _sees(api, tenant.agent, request_id)
    _refused_without_token(_call(api, "/v1/reauthorizations", tenant.agent, ask))
    _edit_owner(world.keys.path, request_id, agent.id)  # the operator's own line, now naming the agent
    assert not _sees(api, tenant.agent, request_id)
    _refused_without_token(_call(api, "/v1/reauthorizations", tenant.agent, ask))
    written = _call(api, "/v1/memories", tenant.agent, {**ask, "value": 2})
    assert written.status_code == 409 and written.json()["error"] == "forgotten"
    _minted_here(world.keys, request_id, agent)  # control: a line that verifies is read ...
    assert _sees(api, tenant.agent, request_id)
    _refused_without_token(_call(api, "/v1/reauthorizations", tenant.agent, ask))  # ... and lifts nothing


def test_a_line_minted_by_another_store_shows_nothing(
    api: httpx.Client, tenant: Tenant, world: World, tmp_path: Path
) -> None:
    agent = world.keys.authenticate(tenant.agent)
    assert agent is not None
    request_id = _operator_forgot(api, tenant, "allergy")
    _append(world.keys.path, _minted_elsewhere(tmp_path / "theirs", request_id, agent))
    assert not _sees(api, tenant.agent, request_id)
    _minted_here(world.keys, request_id, agent)  # control
    assert _sees(api, tenant.agent, request_id)


def test_a_forged_backup_line_gives_no_release(api: httpx.Client, tenant: Tenant, world: World) -> None:
    """A backup made by another tenant, claimed for this one with a pepper MAC, stays not ours."""
    other = world.tenant()
    made = _call(api, "/v1/backups", other.operator, {})
    assert made.status_code == 201, made.text
    backup_id = made.json()["id"]
    me = world.keys.authenticate(tenant.operator)
    assert me is not None
    pepper = (world.keys.path / "pepper").read_bytes()
    mac = hmac.new(pepper, b"owner\0" + f"backup\0{backup_id}\0{me.id}".encode(), hashlib.sha256)
    _append(world.keys.path, {"kind": "backup", "id": backup_id, "key": me.id, "mac": mac.hexdigest()})
    r = _call(api, f"/v1/backups/{backup_id}/release", tenant.operator, {})
    assert r.status_code == 404, r.text
    assert backup_id in world.store.backups()


# -- a real `cenotaph serve` ------------------------------------------------------------------------
@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Server]]:
    monkeypatch.delenv("CENOTAPH_KEYRING", raising=False)
    monkeypatch.delenv("CENOTAPH_MASTER_KEY", raising=False)
    data = tmp_path / "data"
    assert _cli("init", "--data", str(data)).returncode == 0
    server = Server(data, "--quiet")
    try:
        yield data, server
    finally:
        if server.proc.poll() is None:
            server.stop()


def test_a_running_server_ignores_forged_owner_lines(served: tuple[Path, Server], tmp_path: Path) -> None:
    data, server = served
    agent = _create(data, "--tenant", "acme", "--prefix", "tenant:acme/user:alice", "--role", "agent")
    operator = _create(data, "--tenant", "acme", "--role", "operator")["key"]
    alice = "tenant:acme/user:alice"
    with httpx.Client(base_url=server.url, timeout=30) as http:
        assert _call(
            http, "/v1/memories", agent["key"], {"scope": alice, "key": "diet", "value": 1}
        ).is_success
        r = _call(http, "/v1/forget", operator, {"scope": alice, "key": "diet", "mode": "operational"})
        assert r.status_code == 202, r.text
        request_id = r.json()["request_id"]
        ring = ApiKeyRing(data)  # the attacker writes api-keys/ (and reads its pepper) from outside
        agent_key = ring.get(agent["id"])
        assert agent_key is not None
        ask = {"scope": alice, "key": "diet"}
        _append(ring.path, _pepper_line(ring.path, request_id, agent["id"]))
        assert not _sees(http, agent["key"], request_id)
        _edit_owner(ring.path, request_id, agent["id"])
        assert not _sees(http, agent["key"], request_id)
        _append(ring.path, _minted_elsewhere(tmp_path / "theirs", request_id, agent_key))
        assert not _sees(http, agent["key"], request_id)
        _refused_without_token(_call(http, "/v1/reauthorizations", agent["key"], ask))
        assert _call(http, "/v1/memories", agent["key"], {**ask, "value": 2}).status_code == 409
        _minted_here(ring, request_id, agent_key)  # control: the server does read the file
        assert _sees(http, agent["key"], request_id)
        _refused_without_token(_call(http, "/v1/reauthorizations", agent["key"], ask))


# -- keys.json ------------------------------------------------------------------------------------
def _unsealed_key_file(keys_dir: Path, tenant: str) -> str:
    """Replace ``keys.json`` with one in the unsealed format (tenant, prefix and role in clear, an
    HMAC under the pepper per entry) naming a fresh operator secret; return that secret."""
    pepper = (keys_dir / "pepper").read_bytes()
    key_hex = secrets.token_hex(8)
    secret = f"cnk_{key_hex}_{secrets.token_urlsafe(32)}"
    entry: dict[str, object] = {
        "id": f"ak_{key_hex}",
        "created_at": "2026-01-01T00:00:00+00:00",
        "revoked_at": None,
        "erased_at": None,
        "hash": hmac.new(pepper, b"cenotaph-api-key\0" + secret.encode(), hashlib.sha256).hexdigest(),
        "tenant": tenant,
        "prefix": f"tenant:{tenant}",
        "role": "operator",
    }
    body = json.dumps(entry, sort_keys=True, separators=(",", ":")).encode()
    entry["mac"] = hmac.new(pepper, b"cenotaph-api-key-entry\0" + body, hashlib.sha256).hexdigest()
    doc = {"format": "cenotaph-api-keys/1", "keys": [entry]}
    (keys_dir / "keys.json").write_text(json.dumps(doc))
    return secret


def test_an_unsealed_key_file_makes_no_key(tmp_path: Path) -> None:
    with cenotaph.open(tmp_path / "data") as store:
        ring = ApiKeyRing(store)
        ring.create(tenant="acme", role="agent")
        forged = _unsealed_key_file(ring.path, "acme")
        with pytest.raises(StorageError, match="API key file"):
            ring.authenticate(forged)  # the file is refused whole: no key, and no key from it
        with pytest.raises(StorageError, match="API key file"):
            ApiKeyRing(store).authenticate(forged)  # nor by a ring opened after it was put there
        assert b"cenotaph-api-keys/1" in (ring.path / "keys.json").read_bytes()  # never rewritten


def test_a_running_server_takes_no_key_from_an_unsealed_key_file(served: tuple[Path, Server]) -> None:
    data, server = served
    operator = _create(data, "--tenant", "acme", "--role", "operator")["key"]
    with httpx.Client(base_url=server.url, timeout=30) as http:
        assert http.get("/v1/key", headers={"Authorization": f"Bearer {operator}"}).status_code == 200
        forged = _unsealed_key_file(ApiKeyRing(data).path, "acme")
        r = http.get("/v1/key", headers={"Authorization": f"Bearer {forged}"})
        assert r.status_code == 503 and r.json()["error"] == "unavailable", r.text
        r = _call(http, "/v1/forget", forged, {"scope": "tenant:acme/user:alice"})
        assert r.status_code == 503, r.text
