"""Downstream consumers over HTTP: an operator registers one and gets its key; what it reads with
that key is recorded; a forget of it gives it an event (long-poll), and the erasure verifies, with
the consumer in its certificate, once it acknowledged."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest
from tests.http._support import Tenant, World, wait_verified

import cenotaph


def _register(api: httpx.Client, t: Tenant, name: str = "summarizer") -> dict[str, Any]:
    r = api.post("/v1/consumers", json={"name": f"{name}-{t.id}"}, headers=t.auth(t.operator))
    assert r.status_code == 201, r.text
    doc: dict[str, Any] = r.json()
    return doc


def test_a_consumer_key_reads_gets_asked_and_acknowledges(
    api: httpx.Client, tenant: Tenant, world: World
) -> None:
    t = tenant
    consumer = _register(api, t)
    ch = t.auth(consumer["api_key"])
    assert api.get("/v1/key", headers=ch).json()["consumer"] == consumer["id"]
    written = api.post(
        "/v1/memories", json={"scope": t.alice, "key": "diet", "value": "vegetarian"}, headers=t.auth(t.agent)
    ).json()
    read = api.get("/v1/memories", params={"scope": t.alice, "key": "diet"}, headers=ch)
    assert read.status_code == 200 and read.json()["id"] == written["id"]
    # a consumer key only reads, exports and answers its events
    assert (
        api.post("/v1/memories", json={"scope": t.alice, "key": "x", "value": 1}, headers=ch).status_code
        == 403
    )
    assert api.post("/v1/forget", json={"scope": t.alice, "key": "diet"}, headers=ch).status_code == 403
    assert api.get("/v1/consumers", headers=ch).status_code == 403
    events_url = f"/v1/consumers/{consumer['id']}/events"
    assert api.get(events_url, headers=ch).json() == {"events": []}

    accepted = api.post("/v1/forget", json={"scope": t.alice, "key": "diet"}, headers=t.auth(t.agent)).json()
    (event,) = api.get(events_url, headers=ch).json()["events"]
    assert event["request_id"] == accepted["request_id"]
    assert event["records"] == [{"record_id": written["id"], "version": written["version"]}]
    assert "vegetarian" not in str(event) and t.alice not in str(event)
    # the operator of its tenant sees its events too; an agent key and another tenant do not
    assert api.get(events_url, headers=t.auth(t.operator)).json()["events"] == [event]
    assert api.get(events_url, headers=t.auth(t.agent)).status_code == 404
    other = world.tenant()
    assert api.get(events_url, headers=other.auth(other.operator)).status_code == 404
    assert api.get("/v1/consumers", headers=other.auth(other.operator)).json()["consumers"] == []

    status = api.get(accepted["status_url"], headers=t.auth(t.agent)).json()["status"]
    assert status["layers"]["consumers"]["state"] == "pending" and status["state"] != "verified"
    cert = api.get(f"/v1/erasures/{accepted['request_id']}/certificate", headers=t.auth(t.operator))
    assert cert.status_code == 409

    ack_url = f"/v1/consumers/{consumer['id']}/acknowledgements"
    bad = api.post(
        ack_url, json={"request_id": accepted["request_id"], "evidence": {"a": {"b": 1}}}, headers=ch
    )
    assert bad.status_code == 422 and "evidence" in bad.text
    assert (
        api.post(ack_url, json={"request_id": accepted["request_id"]}, headers=t.auth(t.operator)).status_code
        == 404
    )
    done = api.post(
        ack_url, json={"request_id": accepted["request_id"], "evidence": {"deleted": 1}}, headers=ch
    )
    assert done.status_code == 200 and done.json()["acknowledged_at"] is not None

    doc = wait_verified(api, accepted["status_url"], t.agent)
    assert doc["status"]["state"] == "verified", doc
    cert = api.get(f"/v1/erasures/{accepted['request_id']}/certificate", headers=t.auth(t.operator)).json()
    cenotaph.verify_certificate(cert, world.store.public_key)
    assert [(c["id"], c["evidence"]) for c in cert["consumers"]] == [(consumer["id"], {"deleted": 1})]


def test_tenants_name_consumers_alike_and_see_only_their_own(api: httpx.Client, world: World) -> None:
    one, two = world.tenant(), world.tenant()
    made = [
        api.post("/v1/consumers", json={"name": "summarizer"}, headers=t.auth(t.operator)) for t in (one, two)
    ]
    assert [r.status_code for r in made] == [201, 201]
    for t, r in zip((one, two), made, strict=True):
        assert [
            c["id"] for c in api.get("/v1/consumers", headers=t.auth(t.operator)).json()["consumers"]
        ] == [r.json()["id"]]


def test_acknowledging_a_request_that_is_not_the_consumers_is_refused(
    api: httpx.Client, tenant: Tenant
) -> None:
    t = tenant
    reader, bystander = _register(api, t, "reader"), _register(api, t, "bystander")
    api.post("/v1/memories", json={"scope": t.alice, "key": "k", "value": "v"}, headers=t.auth(t.agent))
    assert api.get(
        "/v1/memories", params={"scope": t.alice, "key": "k"}, headers=t.auth(reader["api_key"])
    ).is_success
    accepted = api.post("/v1/forget", json={"scope": t.alice, "key": "k"}, headers=t.auth(t.agent)).json()
    # the bystander took nothing of it: it is not asked, and may not answer
    assert api.get(
        f"/v1/consumers/{bystander['id']}/events", headers=t.auth(bystander["api_key"])
    ).json() == {"events": []}
    refused = api.post(
        f"/v1/consumers/{bystander['id']}/acknowledgements",
        json={"request_id": accepted["request_id"]},
        headers=t.auth(bystander["api_key"]),
    )
    assert refused.status_code == 404
    # nor may it answer as the reader
    as_other = api.post(
        f"/v1/consumers/{reader['id']}/acknowledgements",
        json={"request_id": accepted["request_id"]},
        headers=t.auth(bystander["api_key"]),
    )
    assert as_other.status_code == 404


@pytest.mark.parametrize("transport", ["uvicorn"])
def test_a_long_poll_returns_when_an_event_arrives(api: httpx.Client, tenant: Tenant) -> None:
    t = tenant
    consumer = _register(api, t)
    ch = t.auth(consumer["api_key"])
    api.post("/v1/memories", json={"scope": t.alice, "key": "k", "value": "v"}, headers=t.auth(t.agent))
    assert api.get("/v1/memories", params={"scope": t.alice, "key": "k"}, headers=ch).is_success
    url = f"/v1/consumers/{consumer['id']}/events"
    assert api.get(url, params={"wait": 0.3}, headers=ch).json() == {
        "events": []
    }  # nothing: held, then empty

    answers: list[dict[str, Any]] = []
    started = threading.Event()

    def poll() -> None:
        started.set()
        answers.append(api.get(url, params={"wait": 60}, headers=ch).json())

    poller = threading.Thread(target=poll)
    poller.start()
    started.wait()
    accepted = api.post("/v1/forget", json={"scope": t.alice, "key": "k"}, headers=t.auth(t.agent)).json()
    poller.join(90)
    assert not poller.is_alive()
    assert [e["request_id"] for e in answers[0]["events"]] == [accepted["request_id"]]
    assert api.get(url, params={"wait": 61}, headers=ch).status_code == 422  # the wait is bounded
