"""Who may lift a forget over HTTP: an agent key only the forgets its own key made (one key at a
time), an operator key any forget inside its prefix. Attacks: an agent lifting an operator's
forget, another agent key's forget, a library forget, a subject erasure, a whole scope; a token
for its own forget spent on another target; the same through the remote client."""

from __future__ import annotations

import json

import httpx
import pytest
from tests.http._support import Tenant, World

import cenotaph
from cenotaph.errors import AccessDeniedError, ForgottenError
from cenotaph.service.http.ownership import Ownership


def _write(api: httpx.Client, secret: str, scope: str, key: str, **extra: object) -> httpx.Response:
    body = {"scope": scope, "key": key, "value": "v", **extra}
    return api.post("/v1/memories", json=body, headers={"Authorization": f"Bearer {secret}"})


def _forget(api: httpx.Client, secret: str, scope: str, key: str | None = None) -> dict[str, object]:
    body = {"scope": scope, "key": key, "mode": "operational"}
    r = api.post("/v1/forget", json=body, headers={"Authorization": f"Bearer {secret}"})
    assert r.status_code == 202, r.text
    doc: dict[str, object] = r.json()
    return doc


def _reauthorize(api: httpx.Client, secret: str, scope: str, key: str | None = None) -> httpx.Response:
    body = {"scope": scope} if key is None else {"scope": scope, "key": key}
    return api.post("/v1/reauthorizations", json=body, headers={"Authorization": f"Bearer {secret}"})


def _refused(r: httpx.Response) -> None:
    assert r.status_code == 403, r.text
    assert r.json()["error"] == "forbidden" and "operator key" in r.json()["message"]
    assert "token" not in r.json()


def test_an_agent_lifts_its_own_forget(api: httpx.Client, tenant: Tenant) -> None:
    assert _write(api, tenant.agent, tenant.alice, "diet").status_code == 201
    _forget(api, tenant.agent, tenant.alice, "diet")
    assert _write(api, tenant.agent, tenant.alice, "diet").status_code == 409
    r = _reauthorize(api, tenant.agent, tenant.alice, "diet")
    assert r.status_code == 201, r.text
    assert (
        _write(api, tenant.agent, tenant.alice, "diet", reauthorization=r.json()["token"]).status_code == 201
    )


def test_an_agent_lifts_its_own_scope_forget_key_by_key(api: httpx.Client, tenant: Tenant) -> None:
    scope = f"{tenant.alice}/session:s1"
    assert _write(api, tenant.agent, scope, "a").status_code == 201
    _forget(api, tenant.agent, scope)
    token = _reauthorize(api, tenant.agent, scope, "a").json()["token"]
    assert _write(api, tenant.agent, scope, "a", reauthorization=token).status_code == 201
    assert _write(api, tenant.agent, scope, "b").status_code == 409  # a key token lifts that key only


def test_an_agent_cannot_lift_an_operators_forget(api: httpx.Client, tenant: Tenant) -> None:
    assert _write(api, tenant.agent, tenant.alice, "diet").status_code == 201
    _forget(api, tenant.operator, tenant.alice, "diet")
    _refused(_reauthorize(api, tenant.agent, tenant.alice, "diet"))
    assert _write(api, tenant.agent, tenant.alice, "diet").status_code == 409
    # the operator lifts it, and hands the token to the agent
    token = _reauthorize(api, tenant.operator, tenant.alice, "diet").json()["token"]
    assert _write(api, tenant.agent, tenant.alice, "diet", reauthorization=token).status_code == 201


def test_an_agent_cannot_lift_an_operators_scope_forget(api: httpx.Client, tenant: Tenant) -> None:
    assert _write(api, tenant.agent, tenant.alice, "diet").status_code == 201
    _forget(api, tenant.operator, tenant.alice)  # the whole of alice's scope
    _refused(_reauthorize(api, tenant.agent, tenant.alice, "diet"))
    _refused(_reauthorize(api, tenant.agent, f"{tenant.alice}/session:s9", "other"))


def test_an_agent_cannot_lift_another_agent_keys_forget(
    api: httpx.Client, tenant: Tenant, world: World
) -> None:
    twin = world.keys.create(tenant=tenant.id, prefix=tenant.alice, role="agent")[1]  # same prefix
    assert _write(api, tenant.agent, tenant.alice, "diet").status_code == 201
    _forget(api, twin, tenant.alice, "diet")
    _refused(_reauthorize(api, tenant.agent, tenant.alice, "diet"))
    assert _reauthorize(api, twin, tenant.alice, "diet").status_code == 201


def test_an_agent_cannot_lift_a_forget_made_outside_the_server(
    api: httpx.Client, tenant: Tenant, world: World
) -> None:
    assert _write(api, tenant.agent, tenant.alice, "diet").status_code == 201
    world.store.forget(tenant.alice, "diet", mode="operational")  # the library: no API key made it
    _refused(_reauthorize(api, tenant.agent, tenant.alice, "diet"))


def test_an_agent_cannot_lift_its_own_forget_once_an_operator_forgot_too(
    api: httpx.Client, tenant: Tenant
) -> None:
    assert _write(api, tenant.agent, tenant.alice, "diet").status_code == 201
    _forget(api, tenant.agent, tenant.alice, "diet")
    _forget(api, tenant.operator, tenant.alice)
    _refused(_reauthorize(api, tenant.agent, tenant.alice, "diet"))


def test_an_agent_may_not_reauthorize_a_whole_scope_or_a_subject(api: httpx.Client, tenant: Tenant) -> None:
    assert _write(api, tenant.agent, tenant.alice, "diet").status_code == 201
    _forget(api, tenant.agent, tenant.alice)  # even its own scope forget
    _refused(_reauthorize(api, tenant.agent, tenant.alice))
    h = {"Authorization": f"Bearer {tenant.agent}"}
    body = {"scope": tenant.alice, "key": "diet", "subject": tenant.alice}
    _refused(api.post("/v1/reauthorizations", json=body, headers=h))
    assert _reauthorize(api, tenant.operator, tenant.alice).status_code == 201  # an operator may


def test_a_token_for_its_own_forget_does_not_open_an_operators(api: httpx.Client, tenant: Tenant) -> None:
    for key in ("mine", "theirs"):
        assert _write(api, tenant.agent, tenant.alice, key).status_code == 201
    _forget(api, tenant.agent, tenant.alice, "mine")
    _forget(api, tenant.operator, tenant.alice, "theirs")
    token = _reauthorize(api, tenant.agent, tenant.alice, "mine").json()["token"]
    r = _write(api, tenant.agent, tenant.alice, "theirs", reauthorization=token)
    assert r.status_code == 409 and r.json()["error"] == "forgotten"
    batch = {
        "items": [
            {"scope": tenant.alice, "key": "mine", "value": "v", "reauthorization": token},
            {"scope": tenant.alice, "key": "theirs", "value": "v", "reauthorization": token},
        ]
    }
    r = api.post("/v1/memories/batch", json=batch, headers={"Authorization": f"Bearer {tenant.agent}"})
    assert r.status_code == 409
    assert _write(api, tenant.agent, tenant.alice, "theirs").status_code == 409  # still forgotten
    # an operator forget after the token was issued refuses the token's write
    _forget(api, tenant.operator, tenant.alice, "mine")
    assert _write(api, tenant.agent, tenant.alice, "mine", reauthorization=token).status_code == 409


def test_forgets_recorded_before_versions_were_kept_still_count(
    api: httpx.Client, tenant: Tenant, world: World
) -> None:
    """An owner line written without its forget's version (an older server) learns it from the
    store's request: the agent still lifts its own forget, and still not the operator's."""
    assert _write(api, tenant.agent, tenant.alice, "old").status_code == 201
    agent_id = world.keys.authenticate(tenant.agent).id  # type: ignore[union-attr]
    operator_id = world.keys.authenticate(tenant.operator).id  # type: ignore[union-attr]
    mine = world.store.forget(tenant.alice, "old", mode="operational")
    theirs = world.store.forget(tenant.alice, "older", mode="operational")
    owners = Ownership(world.keys, lambda _: None)  # what a server writes, without the version
    for request, key_id in ((mine, agent_id), (theirs, operator_id)):
        key = world.keys.get(key_id)
        assert key is not None
        owners.record("erasure", request.id, key, None)
    assert _reauthorize(api, tenant.agent, tenant.alice, "old").status_code == 201
    _refused(_reauthorize(api, tenant.agent, tenant.alice, "older"))


def test_a_planted_owner_line_lifts_nothing(api: httpx.Client, tenant: Tenant, world: World) -> None:
    assert _write(api, tenant.agent, tenant.alice, "diet").status_code == 201
    agent_id = world.keys.authenticate(tenant.agent).id  # type: ignore[union-attr]
    forgotten = _forget(api, tenant.operator, tenant.alice, "diet")
    line = {
        "kind": "erasure",
        "id": "er_planted",
        "key": agent_id,
        "version": forgotten["version"],
        "mac": "0" * 64,
    }
    with (world.keys.path / "owners.jsonl").open("a") as handle:
        handle.write(json.dumps(line) + "\n")
    _refused(_reauthorize(api, tenant.agent, tenant.alice, "diet"))


@pytest.fixture
def agent_client(world: World, tenant: Tenant, transport: str) -> cenotaph.Client:
    http = world.client(transport) if transport == "asgi" else None
    return cenotaph.Client(world.base_url(transport), tenant.agent, http_client=http)


def test_the_remote_client_follows_the_same_rule(
    agent_client: cenotaph.Client, remote: cenotaph.Client, tenant: Tenant
) -> None:
    with agent_client as agent:
        agent.write(tenant.alice, "mine", "v")
        agent.write(tenant.alice, "theirs", "v")
        agent.forget(tenant.alice, "mine", mode="operational")
        remote.forget(tenant.alice, "theirs", mode="operational")  # the operator
        agent.write(tenant.alice, "mine", "again", reauthorization=agent.reauthorize(tenant.alice, "mine"))
        with pytest.raises(AccessDeniedError) as denied:
            agent.reauthorize(tenant.alice, "theirs")
        assert denied.value.status == 403 and "operator key" in str(denied.value)
        with pytest.raises(ForgottenError):
            agent.write(tenant.alice, "theirs", "again")
        token = remote.reauthorize(tenant.alice, "theirs")
        assert agent.write(tenant.alice, "theirs", "again", reauthorization=token).value == "again"
