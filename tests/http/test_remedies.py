"""The HTTP API says the store's remedies in its own words: a caller over the wire is told the
route (``POST /v1/purge``, ``POST /v1/reauthorizations``), never a library call it cannot make
(``store.purge()``). One mechanism for every surface (``cenotaph.remedies``): the tables are
pinned against the remedies the store names, and real answers are read for library spellings.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from fastapi.testclient import TestClient
from tests.http._support import Tenant
from tests.test_messages import API_SPELLING

import cenotaph
from cenotaph.errors import InvalidValueError
from cenotaph.remedies import REMEDIES, Spelling
from cenotaph.service.apikeys import ApiKeyRing
from cenotaph.service.http import create_app
from cenotaph.service.http.spelling import API_TO_CONSOLE, API_TO_HTTP, NOT_OVER_HTTP, speak_http


def _library_phrases(doc: object) -> list[str]:
    text = json.dumps(doc, ensure_ascii=False)
    return [m.group(0) for m in API_SPELLING.finditer(text)] + (["store."] if "store." in text else [])


# -- the tables -----------------------------------------------------------------------------------
def test_every_remedy_has_http_words_or_never_reaches_a_caller() -> None:
    assert set(API_TO_HTTP) | NOT_OVER_HTTP == REMEDIES
    assert not set(API_TO_HTTP) & NOT_OVER_HTTP
    assert set(API_TO_CONSOLE) == set(API_TO_HTTP)


@pytest.mark.parametrize("table", [API_TO_HTTP, API_TO_CONSOLE], ids=["http", "console"])
def test_no_word_of_a_table_is_a_library_call(table: dict[str, str]) -> None:
    for remedy, words in table.items():
        if words != remedy:  # base_version, derived_from: the same name in a body
            assert not _library_phrases(words), (remedy, words)


def test_a_spelling_replaces_whole_remedies_once_and_never_a_callers_name() -> None:
    assert speak_http("run store.purge(), then rotate_keys()") == (
        "run `POST /v1/purge`, then `POST /v1/keys/rotate`"
    )
    assert speak_http("held by 'tenant:store.purge()'") == "held by 'tenant:store.purge()'"
    assert speak_http.document({"gaps": ["run store.purge()"], "store.purge()": 1}) == {
        "gaps": ["run `POST /v1/purge`"],
        "store.purge()": 1,  # a key is a name, not a message
    }
    with pytest.raises(InvalidValueError):
        Spelling({"store.nothing()": "x"})  # a table cannot name what no message says


# -- real answers ---------------------------------------------------------------------------------
def _call(api: httpx.Client, method: str, path: str, secret: str, **options: Any) -> httpx.Response:
    return api.request(method, path, headers={"Authorization": f"Bearer {secret}"}, **options)


def test_a_forgotten_keys_409_and_403_name_the_route(api: httpx.Client, tenant: Tenant) -> None:
    body = {"scope": tenant.alice, "key": "diet", "value": "v"}
    assert _call(api, "POST", "/v1/memories", tenant.agent, json=body).status_code == 201
    forget = {"scope": tenant.alice, "key": "diet", "mode": "operational"}
    assert _call(api, "POST", "/v1/forget", tenant.operator, json=forget).status_code == 202
    refused = _call(api, "POST", "/v1/memories", tenant.agent, json=body)
    assert refused.status_code == 409 and refused.json()["error"] == "forgotten"
    assert "POST /v1/reauthorizations" in refused.json()["message"]
    assert not _library_phrases(refused.json())
    denied = _call(
        api, "POST", "/v1/reauthorizations", tenant.agent, json={"scope": tenant.alice, "key": "diet"}
    )
    assert denied.status_code == 403 and not _library_phrases(denied.json())
    bad_token = _call(api, "POST", "/v1/memories", tenant.agent, json={**body, "reauthorization": "crt_x"})
    assert bad_token.status_code == 422 and "POST /v1/reauthorizations" in bad_token.json()["message"]
    assert not _library_phrases(bad_token.json())


def test_scope_closure_names_the_body_field(api: httpx.Client, tenant: Tenant) -> None:
    session = f"{tenant.alice}/session:s1"
    for scope in (tenant.alice, session):
        assert (
            _call(api, "POST", "/v1/memories", tenant.agent, json={"scope": scope, "key": "k", "value": 1})
        ).status_code == 201
    r = _call(api, "POST", "/v1/forget", tenant.agent, json={"scope": session, "key": "k"})
    assert r.status_code == 409 and r.json()["error"] == "scope_closure"
    assert '"include_ancestors": true' in r.json()["message"] and not _library_phrases(r.json())


class Pending:
    """A server whose store does not purge in the background: requests stay pending."""

    def __init__(self, base: Path) -> None:
        self.store = cenotaph.open(base / "data", auto_purge="off")
        keys = ApiKeyRing(self.store)
        self.operator = keys.create(tenant="acme", role="operator")[1]
        self.client = TestClient(create_app(self.store, keys, backup_dir=base / "backups"))
        self.client.__enter__()
        self.http = cast(httpx.Client, self.client)  # TestClient subclasses httpx's Client under another name

    def close(self) -> None:
        self.client.__exit__(None, None, None)
        self.store.close()


@pytest.fixture
def pending(tmp_path: Path) -> Iterator[Pending]:
    p = Pending(tmp_path)
    try:
        yield p
    finally:
        p.close()


def test_a_pending_erasures_status_and_certificate_name_the_routes(pending: Pending) -> None:
    api, secret = pending.http, pending.operator
    alice = "tenant:acme/user:alice"
    assert _call(api, "POST", "/v1/backups", secret).status_code == 201
    assert _call(
        api, "POST", "/v1/memories", secret, json={"scope": alice, "key": "k", "value": 1}
    ).is_success
    made = _call(api, "POST", "/v1/forget", secret, json={"scope": alice, "key": "k"}).json()
    operational = _call(
        api, "POST", "/v1/forget", secret, json={"scope": alice, "key": "x", "mode": "operational"}
    ).json()
    doc = _call(api, "GET", made["status_url"], secret).json()
    assert doc["status"]["state"] == "shredded"
    reason = doc["status"]["layers"]["horizon"]["evidence"]["reason"]
    assert "`POST /v1/backups/{id}/release`" in reason and "`POST /v1/keys/rotate`" in reason
    assert not _library_phrases(doc)
    listed = _call(api, "GET", "/v1/erasures", secret).json()
    assert len(listed["erasures"]) == 2 and not _library_phrases(listed)
    doc = _call(api, "GET", operational["status_url"], secret).json()
    assert any('"mode": "compliance"' in gap for gap in doc["status"]["gaps"]) and not _library_phrases(doc)
    r = _call(api, "GET", f"{made['status_url']}/certificate", secret)
    assert r.status_code == 409 and r.json()["gaps"] and not _library_phrases(r.json())
    # the remote client reads the same words; the library, asked directly, still says its own
    with cenotaph.Client("http://testserver", secret, http_client=api) as client:
        remote = client.erasure(made["request_id"]).status().layers["horizon"].evidence["reason"]
    assert remote == reason
    local = pending.store.erasure(made["request_id"]).status().layers["horizon"].evidence["reason"]
    assert "release_backup()" in local and "rotate_keys()" in local
