"""A request row set to ``verified`` in the database must not make the request *report* verified:
``status()``, ``wait()`` and everything built on them (the HTTP status route, the remote client's
``wait``, the console) say what the audit log, checked against the ledger, backs."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from tests.kit.checks import present

from cenotaph.errors import ErasureNotProvableError
from cenotaph.service.apikeys import ApiKeyRing
from cenotaph.service.http import create_app

from .conftest import SCOPE, Setup, edit, reopened, rows


def _set_verified(setup: Setup, request_id: str) -> None:
    ((layers,),) = rows(setup.db, "SELECT layers FROM erasures WHERE id=?", (request_id,))
    done = {name: {"state": "done", "evidence": {}} for name in json.loads(layers)}
    edit(
        setup.db,
        [
            (
                "UPDATE erasures SET state='verified', layers=?, verified_at='2025-01-01T00:00:00+00:00' "
                "WHERE id=?",
                (json.dumps(done), request_id),
            )
        ],
    )


def test_a_request_row_set_to_verified_does_not_report_verified(setup: Setup) -> None:
    with reopened(setup, auto_purge="off") as store:
        store.write(SCOPE, "k", "the secret value")
        request_id = store.forget(SCOPE, "k").id
        assert store.erasure(request_id).status().state == "shredded"
    _set_verified(setup, request_id)
    with reopened(setup, auto_purge="off") as store:
        status = store.erasure(request_id).status()
        assert status.state != "verified" and status.gaps, status
        assert any("audit log" in gap for gap in status.gaps), status.gaps
        assert status.stuck and "check_integrity" in present(status.next_step), status
        # no purge can make the row true: wait() says so at once instead of purging forever
        with pytest.raises(ErasureNotProvableError) as refused:
            store.erasure(request_id).wait(None)
        assert any("audit log" in gap for gap in refused.value.gaps), refused.value.gaps
    with reopened(setup, auto_purge="off") as store:  # an honest request still reports verified
        store.write(SCOPE, "k2", "another value")
        honest = store.forget(SCOPE, "k2").id
        assert store.erasure(honest).wait(30).state == "verified"
        assert store.erasure(honest).status().gaps == ()
        assert store.confirm_erasure(honest).state == "verified"


def test_over_http_an_edited_request_row_is_not_reported_verified(setup: Setup) -> None:
    ring = ApiKeyRing(setup.data)
    _, secret = ring.create(tenant="acme", role="agent")
    auth = {"Authorization": f"Bearer {secret}"}
    with reopened(setup, auto_purge="off") as store:
        api = TestClient(create_app(store, ring))  # no lifespan: no background purge verifies it for real
        store.write(SCOPE, "k", "the secret value")
        r = api.post("/v1/forget", json={"scope": SCOPE, "key": "k"}, headers=auth)
        assert r.status_code == 202
        status_url = r.json()["status_url"]
    _set_verified(setup, r.json()["request_id"])
    with reopened(setup, auto_purge="off") as store:
        doc = TestClient(create_app(store, ring)).get(status_url, headers=auth).json()
        assert doc["status"]["state"] != "verified" and doc["status"]["gaps"], doc
