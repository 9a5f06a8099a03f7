"""Console forms sent wrong: every refusal is the console's own page (never the API's JSON), with
the error shown and what was typed kept; the CSRF token is checked before any field; and no log
record of a whole sign-in and erasure flow (with bad forms in it) holds the key, the subject or
the scope, whatever level the embedding application logs at."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import cenotaph
from cenotaph.service.apikeys import ApiKeyRing
from cenotaph.service.http import MAX_BODY_BYTES, create_app

SUBJECT = "tenant:acme/user:alice-7f3a9c21"


class Console:
    def __init__(self, data: Path) -> None:
        self.store = cenotaph.open(data)
        self.keys = ApiKeyRing(self.store)
        self.operator = self.keys.create(tenant="acme", role="operator")[1]
        self.store.write(SUBJECT, "diet", "vegetarian")
        self.http = TestClient(create_app(self.store, self.keys, secure_cookies=False))
        self.http.__enter__()

    def csrf(self, path: str) -> str:
        found = re.search(r'name="csrf" value="([^"]+)"', self.http.get(path).text)
        assert found is not None
        return found.group(1)

    def sign_in(self) -> None:
        form = {"api_key": self.operator, "csrf": self.csrf("/console/login")}
        assert self.http.post("/console/login", data=form, follow_redirects=False).status_code == 303

    def close(self) -> None:
        self.http.__exit__(None, None, None)
        self.store.close()


@pytest.fixture
def console(tmp_path: Path) -> Iterator[Console]:
    c = Console(tmp_path / "data")
    try:
        yield c
    finally:
        c.close()


def _page(r: object, status: int, *needles: str) -> str:
    assert r.status_code == status, r.text  # type: ignore[attr-defined]
    assert r.headers["content-type"].startswith("text/html")  # type: ignore[attr-defined]
    text: str = r.text  # type: ignore[attr-defined]
    assert '<html lang="en">' in text and not text.lstrip().startswith("{")
    for needle in needles:
        assert needle in text, needle
    return text


def test_an_unknown_subject_shows_the_subjects_page_with_what_was_typed(console: Console) -> None:
    console.sign_in()
    csrf = console.csrf("/console/subjects")
    for typed in ("tenant:globex/user:bob", "not a scope//", "tenant:acme/user:nobody"):
        r = console.http.post("/console/subjects/erase", data={"subject": typed, "csrf": csrf})
        status = 404 if typed != "tenant:acme/user:nobody" else 200  # inside the prefix: 0 records
        if status == 200:
            _page(r, 200, "0</strong> record(s)")
            continue
        text = _page(r, 404, 'role="alert"', "no such subject inside tenant:acme")
        assert 'id="erase-subject" name="subject" value="' in text and "Subjects" in text
        assert f'value="{typed.replace("/", "/")}"' in text.replace("&#34;", '"')
    r = console.http.post(
        "/console/subjects/export", data={"subject": "tenant:globex/user:bob", "csrf": csrf}
    )
    text = _page(r, 404, "no such subject inside tenant:acme", 'value="tenant:globex/user:bob"')
    assert 'id="export-subject"' in text


def test_missing_fields_show_the_page_again(console: Console) -> None:
    console.sign_in()
    csrf = console.csrf("/console/subjects")
    _page(console.http.post("/console/subjects/erase", data={"csrf": csrf}), 422, "Enter a subject")
    _page(console.http.post("/console/subjects/export", data={"csrf": csrf}), 422, "Enter a subject")
    r = console.http.post("/console/subjects/erase/confirm", data={"subject": SUBJECT, "csrf": csrf})
    _page(r, 422, "does not match", "Erase <code>", "1</strong> record(s)")
    r = console.http.post(
        "/console/subjects/erase/confirm",
        data={"subject": SUBJECT, "confirmation": "tenant:acme/user:alice-7f3a9c2", "csrf": csrf},
    )
    _page(r, 422, "does not match", 'value="tenant:acme/user:alice-7f3a9c2"')
    assert console.store.read(SUBJECT, "diet") is not None  # nothing was erased
    r = console.http.post("/console/verify", data={"csrf": csrf, "certificate": "{pasted}"})
    _page(r, 422, "Give the public key", "{pasted}</textarea>")
    r = console.http.post("/console/verify", data={"csrf": csrf, "public_key": "ab" * 32})
    _page(r, 422, "Give a certificate", "ab" * 32)
    r = console.http.post("/console/verify", data={"csrf": csrf, "public_key": "zz", "certificate": "{}"})
    _page(r, 200, "Not valid.", "{}</textarea>")


def test_the_sign_in_form_sent_wrong(console: Console) -> None:
    csrf = console.csrf("/console/login")
    _page(console.http.post("/console/login", data={"csrf": csrf}), 422, "Enter an operator API key")
    csrf = console.csrf("/console/login")
    r = console.http.post("/console/login", data={"csrf": csrf, "api_key": "nonsense"})
    _page(r, 401, "not a live operator key")


def test_the_csrf_token_is_checked_before_any_field(console: Console) -> None:
    console.sign_in()
    for path, form in (
        ("/console/subjects/erase", {}),
        ("/console/subjects/erase", {"subject": "tenant:globex/user:bob", "csrf": "wrong"}),
        ("/console/subjects/erase/confirm", {"subject": SUBJECT}),
        ("/console/subjects/erase/confirm", {"subject": SUBJECT, "confirmation": SUBJECT, "csrf": "x"}),
        ("/console/verify", {"public_key": "zz"}),
        ("/console/subjects/export", {"subject": SUBJECT}),
        ("/console/logout", {}),
        ("/console/login", {"api_key": console.operator}),
    ):
        r = console.http.post(path, data=form, follow_redirects=False)
        text = _page(r, 403, "This form has expired")
        assert "no such subject" not in text and "Enter a subject" not in text
    assert console.store.read(SUBJECT, "diet") is not None


def test_bodies_the_console_cannot_read_answer_its_pages(console: Console) -> None:
    console.sign_in()
    # JSON instead of a form: no token in it, so refused as a forged form
    _page(console.http.post("/console/subjects/erase", json={"subject": SUBJECT}), 403, "expired")
    # a multipart body that does not parse: nothing is done, the page comes back
    r = console.http.post(
        "/console/verify",
        content=b'--b\r\nContent-Disposition: form-data; name="csrf"\r\n\r\nx\r\n--b\xff\xfe',
        headers={"content-type": "multipart/form-data; boundary=b"},
    )
    assert r.headers["content-type"].startswith("text/html") and r.status_code in (403, 422)
    # too large, declared or streamed
    big = b"x" * (MAX_BODY_BYTES + 1)
    r = console.http.post(
        "/console/subjects/erase", content=big, headers={"content-type": "application/x-www-form-urlencoded"}
    )
    _page(r, 413, "too large")
    # a certificate upload over the console's own limit
    csrf = console.csrf("/console/verify")
    r = console.http.post(
        "/console/verify",
        data={"csrf": csrf, "public_key": "ab" * 32},
        files={"upload": ("c.json", b"{" + b" " * (300 << 10) + b"}", "application/json")},
    )
    _page(r, 413, "too large", "ab" * 32)
    # no such page, wrong method
    _page(console.http.get("/console/nothing-here"), 404, "no such page")
    _page(console.http.get("/console/logout"), 405, "cannot be reached that way")


def test_no_log_record_holds_the_key_the_subject_or_the_scope(
    console: Console, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # the root logger and everything under it, at DEBUG
    for name in logging.root.manager.loggerDict:
        if not name.startswith(("python_multipart", "multipart")):
            logging.getLogger(name).setLevel(logging.DEBUG)
    console.sign_in()
    csrf = console.csrf("/console/subjects")
    console.http.post("/console/subjects/erase", data={"subject": SUBJECT, "csrf": csrf})
    console.http.post(
        "/console/subjects/erase/confirm", data={"subject": SUBJECT, "confirmation": "no", "csrf": csrf}
    )
    console.http.post("/console/subjects/export", data={"subject": SUBJECT, "csrf": csrf})
    r = console.http.post(
        "/console/subjects/erase/confirm", data={"subject": SUBJECT, "confirmation": SUBJECT, "csrf": csrf}
    )
    assert r.status_code == 200 and "/console/erasures/er_" in str(r.url)
    console.store.purge()
    # malformed bodies carrying the secret and the subject: a parser's warnings quote their bytes
    for body in (
        f'--b\r\nContent-Disposition: form-data; name="{console.operator}"\r\n\r\n{SUBJECT}\r\n--bX'.encode(),
        f"--b\r\nContent-Dispo{SUBJECT}: x\r\n\r\n".encode(),
        f"--b\r\n\r\n{console.operator}".encode(),
    ):
        console.http.post(
            "/console/verify", content=body, headers={"content-type": "multipart/form-data; boundary=b"}
        )
    console.http.post(
        "/console/login",
        content=f"api_key={console.operator}&&&csrf=x".encode(),
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert console.store.read(SUBJECT, "diet") is None
    served = [r for r in caplog.records if not r.name.startswith("httpx")]  # not the test's own client
    assert any(r.name == "cenotaph.http.access" for r in served), "the capture is not working"
    # "cnk_<key id>_<secret>": the secret is token_urlsafe, which may itself hold "_"
    secret_part = console.operator.split("_", 2)[2]
    assert len(secret_part) >= 40
    for record in served:
        text = f"{record.getMessage()} {record.args!r} {record.exc_text or ''}"
        for needle in (console.operator, secret_part, SUBJECT, "alice-7f3a9c21", "tenant:acme"):
            assert needle not in text, f"{record.name} logged {needle!r}"
        assert not record.name.startswith(("python_multipart", "multipart")), record.getMessage()
