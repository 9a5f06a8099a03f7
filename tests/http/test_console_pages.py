"""What the console's pages say and offer, read as HTML through the app: a pending request's page
refreshes itself until it is verified and offers "Purge now" (CSRF-checked, the same purge as
``POST /v1/purge``); every page says the store's remedies the console's way (never
``store.purge()``); evidence reads as fields, not raw JSON; a refusal keeps the navigation; and
the sign-in page's command for making a key works as printed.

The store here does not purge in the background, so a request stays pending until something
purges it.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.test_messages import API_SPELLING

import cenotaph
from cenotaph.service.apikeys import ApiKeyRing
from cenotaph.service.http import create_app
from cenotaph.service.http.console import templates

ALICE = "tenant:acme/user:alice"
REFRESH = re.compile(r'<meta http-equiv="refresh" content="(\d+)">')
NAV = '<a href="/console/subjects">Subjects</a>'


class Console:
    def __init__(self, base: Path) -> None:
        self.data = base / "data"
        self.store = cenotaph.open(self.data, auto_purge="off")
        self.keys = ApiKeyRing(self.store)
        self.operator = self.keys.create(tenant="acme", role="operator")[1]
        self.app = create_app(self.store, self.keys, backup_dir=base / "backups", secure_cookies=False)
        self.http = TestClient(self.app)
        self.http.__enter__()

    def csrf(self, path: str) -> str:
        found = re.search(r'name="csrf" value="([^"]+)"', self.http.get(path).text)
        assert found is not None
        return found.group(1)

    def sign_in(self, secret: str | None = None) -> None:
        form = {"api_key": secret or self.operator, "csrf": self.csrf("/console/login")}
        assert self.http.post("/console/login", data=form, follow_redirects=False).status_code == 303

    def api(self, method: str, path: str, **options: object) -> dict[str, object]:
        headers = {"Authorization": f"Bearer {self.operator}"}
        r = self.http.request(method, path, headers=headers, **options)  # type: ignore[arg-type]
        assert r.is_success, r.text
        doc: dict[str, object] = r.json() if r.content else {}
        return doc

    def pending_erasure(self, key: str) -> str:
        self.api("POST", "/v1/memories", json={"scope": ALICE, "key": key, "value": "vegetarian"})
        return str(self.api("POST", "/v1/forget", json={"scope": ALICE, "key": key})["request_id"])

    def close(self) -> None:
        self.http.__exit__(None, None, None)
        self.store.close()


@pytest.fixture
def console(tmp_path: Path) -> Iterator[Console]:
    c = Console(tmp_path)
    try:
        c.api("POST", "/v1/backups")  # a registered backup: the horizon waits for its release
        yield c
    finally:
        c.close()


def _visible_text(page: str) -> str:
    """What a person reads on the page: the text between tags, unescaped."""
    body = page[page.index("<body>") :]
    return html.unescape(re.sub(r"<[^>]+>", " ", body))


def _speaks_console(page: str) -> None:
    text = _visible_text(page)
    assert "store." not in text, text
    assert not API_SPELLING.search(text), API_SPELLING.search(text)


def test_a_pending_request_refreshes_itself_until_verified(console: Console) -> None:
    request_id = console.pending_erasure("diet")
    console.sign_in()
    page = console.http.get(f"/console/erasures/{request_id}").text
    assert 'id="state">shredded<' in page
    found = REFRESH.search(page)
    assert found is not None and 1 <= int(found.group(1)) <= 10
    assert page.index("<meta http-equiv") < page.index("</head>")
    assert 'id="purge"' in page and "<script" not in page
    console.api("POST", "/v1/purge")  # whoever purges: the next refresh shows it
    page = console.http.get(f"/console/erasures/{request_id}").text
    assert 'id="state">verified<' in page
    assert REFRESH.search(page) is None and 'id="purge"' not in page
    assert 'id="download-certificate"' in page
    assert f'href="/console/erasures/{request_id}/certificate.pdf"' in page
    pdf = console.http.get(f"/console/erasures/{request_id}/certificate.pdf")
    assert pdf.status_code == 200 and pdf.headers["content-type"] == "application/pdf"
    assert (
        pdf.content.startswith(b"%PDF-")
        and f"certificate-{request_id}.pdf" in pdf.headers["content-disposition"]
    )


def test_purge_now_purges_like_the_api_and_needs_the_csrf_token(console: Console) -> None:
    request_id = console.pending_erasure("diet")
    console.sign_in()
    page = console.http.get(f"/console/erasures/{request_id}").text
    action = f'action="/console/erasures/{request_id}/purge"'
    assert action in page
    for form in ({}, {"csrf": "wrong"}):  # a forged form purges nothing
        r = console.http.post(f"/console/erasures/{request_id}/purge", data=form, follow_redirects=False)
        assert r.status_code == 403 and "This form has expired" in r.text
        assert NAV in r.text  # the refusal keeps the navigation
    assert console.store.erasure(request_id).status().state == "shredded"
    csrf = console.csrf(f"/console/erasures/{request_id}")
    r = console.http.post(
        f"/console/erasures/{request_id}/purge", data={"csrf": csrf}, follow_redirects=False
    )
    assert r.status_code == 303 and r.headers["location"] == f"/console/erasures/{request_id}"
    assert console.store.erasure(request_id).status().state == "verified"
    # a request outside the key's reach (made with the library): the console's 404, nothing purged
    other = console.store.forget(ALICE, "unknown-to-the-server")
    r = console.http.post(f"/console/erasures/{other.id}/purge", data={"csrf": csrf}, follow_redirects=False)
    assert r.status_code == 404 and NAV in r.text


def test_pages_say_the_consoles_actions_and_the_apis_routes(console: Console) -> None:
    request_id = console.pending_erasure("diet")
    operational = str(
        console.api("POST", "/v1/forget", json={"scope": ALICE, "key": "x", "mode": "operational"})[
            "request_id"
        ]
    )
    console.sign_in()
    page = console.http.get(f"/console/erasures/{request_id}").text
    _speaks_console(page)
    next_step = re.search(r'id="next-step">([^<]+)<', page)
    assert next_step is not None and "Purge now" in html.unescape(next_step.group(1))
    assert "POST /v1/backups/{id}/release" in html.unescape(page)  # what holds the horizon back
    assert "POST /v1/keys/rotate" in html.unescape(page)
    page = console.http.get(f"/console/erasures/{operational}").text
    _speaks_console(page)
    assert '"mode": "compliance"' in html.unescape(page)  # not mode='compliance'
    _speaks_console(console.http.get("/console/").text)
    # a certificate asked for before it exists: the refusal names the gaps the console's way
    r = console.http.get(f"/console/erasures/{request_id}/certificate")
    assert r.status_code == 409 and '<ul class="gaps">' in r.text and NAV in r.text
    _speaks_console(r.text)


def test_evidence_reads_as_fields_not_json(console: Console) -> None:
    request_id = console.pending_erasure("diet")
    console.api("POST", "/v1/purge")
    console.sign_in()
    page = console.http.get(f"/console/erasures/{request_id}").text
    layers = page[page.index('<table id="layers">') : page.index("</table>", page.index('id="layers"'))]
    assert '<dl class="kv">' in layers
    assert "<dt>positive control</dt><dd>yes</dd>" in layers
    assert "<dt>matches</dt><dd>0</dd>" in layers
    assert '<dt>matched files</dt><dd><span class="muted">none</span></dd>' in layers
    assert "{&#34;" not in layers and '{"' not in layers  # no raw JSON objects left


def test_long_tokens_are_shortened_or_wrap_at_their_breaks(console: Console) -> None:
    macro = templates.env.get_template("_values.html").module.value  # type: ignore[attr-defined]
    token = "ab12" * 16
    short = str(macro({"target": token}))
    assert f'title="{token}"' in short and "ab12ab12ab12…" in short and token not in short.split('"')[2]
    wrapped = str(macro({"target": token}, short=False))
    assert wrapped.count("<wbr>") == 3 and wrapped.replace("<wbr>", "").count(token) == 1
    assert str(macro({"id": "er_0123"})).count("er_0123") == 1  # not a long hex token: as it is


def test_a_verified_certificate_shows_fields_with_whole_tokens(console: Console) -> None:
    request_id = console.pending_erasure("diet")
    console.api("POST", "/v1/purge")
    certificate = console.store.attest(request_id)
    console.sign_in()
    csrf = console.csrf("/console/verify")
    form = {"csrf": csrf, "public_key": console.store.public_key, "certificate": certificate.to_json()}
    page = console.http.post("/console/verify", data=form).text
    assert "Valid." in page
    start = page.index('id="certificate-fields"')
    fields = page[start : page.index("</table>", start)]
    target = str(certificate["target"])
    assert target in fields.replace("<wbr>", "")  # whole, breakable every 16 characters
    assert "<dt>positive control</dt><dd>yes</dd>" in fields
    assert '{"' not in fields and "{&#34;" not in fields


def test_a_refusal_keeps_the_navigation(console: Console) -> None:
    console.sign_in()
    for path in ("/console/erasures/er_000000000000000000000000", "/console/nothing-here"):
        r = console.http.get(path)
        assert r.status_code == 404 and "<h1>Refused</h1>" in r.text
        assert NAV in r.text and "Sign out" in r.text
    signed_out = TestClient(console.app)
    r = signed_out.get("/console/nothing-here")
    assert r.status_code == 404 and NAV not in r.text  # no session: no navigation to offer


def test_the_sign_in_hint_makes_a_key_as_printed(console: Console) -> None:
    page = console.http.get("/console/login").text
    found = re.search(r'<code id="create-key">([^<]+)</code>', page)
    assert found is not None
    command = html.unescape(found.group(1)).split()
    assert command[:3] == ["cenotaph", "api-keys", "create"] and "--tenant" in command
    filled = [{"DIR": str(console.data), "T": "acme"}.get(word, word) for word in command[1:]]
    result = subprocess.run(
        [sys.executable, "-m", "cenotaph.cli.main", *filled],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    made = json.loads(result.stdout)
    assert made["role"] == "operator" and made["tenant"] == "acme"
    console.sign_in(made["key"])  # the key it printed signs in
    assert "Erasure requests" in console.http.get("/console/").text


def test_messages_set_routes_as_code_and_escape_everything_else() -> None:
    prose = templates.env.filters["prose"]
    assert str(prose("run `POST /v1/purge` now")) == "run <code>POST /v1/purge</code> now"
    assert str(prose("held by 'tenant:<b>`x`'")) == "held by &#39;tenant:&lt;b&gt;<code>x</code>&#39;"
    assert str(prose("a lone ` <i>")) == "a lone ` &lt;i&gt;"
    assert str(prose("`<script>`")) == "<code>&lt;script&gt;</code>"


def test_the_consumers_page_lists_pending_and_overdue_erasures(console: Console) -> None:
    made = console.api("POST", "/v1/consumers", json={"name": "summarizer", "ack_days": 1})
    consumer_key = {"Authorization": f"Bearer {made['api_key']}"}
    console.api("POST", "/v1/memories", json={"scope": ALICE, "key": "diet", "value": "vegetarian"})
    assert console.http.get(
        "/v1/memories", params={"scope": ALICE, "key": "diet"}, headers=consumer_key
    ).is_success
    request_id = console.api("POST", "/v1/forget", json={"scope": ALICE, "key": "diet"})["request_id"]
    console.sign_in()
    page = console.http.get("/console/consumers").text
    _speaks_console(page)
    text = _visible_text(page)
    assert "summarizer" in text and str(made["id"]) in text and str(request_id) in text
    assert 'class="overdue"' not in page  # due in a day
    erasure_page = _visible_text(console.http.get(f"/console/erasures/{request_id}").text)
    assert "summarizer" in erasure_page and "acknowledge" in erasure_page
