"""The operator console in a real headless Chromium (Debian's ``chromium``, driven by Playwright):
sign-in, a subject's export, the erasure flow end to end with its confirmation step, the
certificate downloaded and verified by public key, backups and key epochs, CSRF and revocation;
a pending request's page refreshing itself, and "Purge now".

Screenshots go to ``$CENOTAPH_SCREENSHOTS`` when set (``docs/`` holds the ones in the README),
else into the test's temporary directory.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.http._support import UvicornThread

import cenotaph
from cenotaph.service.apikeys import ApiKeyRing
from cenotaph.service.http import create_app

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ALICE = "tenant:acme/user:alice"

sync_api = pytest.importorskip("playwright.sync_api")

if not Path(CHROMIUM).exists():  # pragma: no cover - .ci/run installs it
    if os.environ.get("CENOTAPH_CI"):
        raise RuntimeError("CI must install Debian's chromium (apt-get install -y chromium)")
    pytest.skip("Debian's chromium is not installed (apt-get install -y chromium)", allow_module_level=True)


class Site:
    def __init__(self, base: Path, auto_purge: str = "background") -> None:
        data = base / "data"
        self.store = cenotaph.open(data, auto_purge=auto_purge)
        self.keys = ApiKeyRing(data)
        self.app = create_app(
            self.store, self.keys, backup_dir=base / "backups"
        )  # Secure cookies: the default
        self.server = UvicornThread(self.app).__enter__()
        self.url = self.server.url
        self.operator_key, self.operator = self.keys.create(tenant="acme", role="operator")
        self.agent = self.keys.create(tenant="acme", prefix=ALICE, role="agent")[1]

    def api(self, method: str, path: str, secret: str, **options: Any) -> httpx.Response:
        return httpx.request(
            method, self.url + path, headers={"Authorization": f"Bearer {secret}"}, **options
        )

    def close(self) -> None:
        self.server.__exit__(None, None, None)
        self.store.close()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    s = Site(tmp_path_factory.mktemp("console"))
    s.api("POST", "/v1/memories", s.agent, json={"scope": ALICE, "key": "diet", "value": "vegetarian"})
    s.api(
        "POST",
        "/v1/memories",
        s.agent,
        json={"scope": f"{ALICE}/session:s1", "key": "note", "value": "cardiology tuesday"},
    )
    s.api("POST", "/v1/backups", s.operator)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: object) -> Iterator[object]:
    context = browser.new_context(accept_downloads=True, viewport={"width": 1280, "height": 860})  # type: ignore[attr-defined]
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    target = Path(os.environ.get("CENOTAPH_SCREENSHOTS") or tmp_path)
    target.mkdir(parents=True, exist_ok=True)
    return target


def _sign_in(page: object, site: Site, secret: str) -> None:
    page.goto(site.url + "/console/")  # type: ignore[attr-defined]
    assert page.url.endswith("/console/login")  # type: ignore[attr-defined]
    page.fill("#api_key", secret)  # type: ignore[attr-defined]
    page.click("button[type=submit]")  # type: ignore[attr-defined]


def test_sign_in_refuses_anything_but_a_live_operator_key(page: object, site: Site, shots: Path) -> None:
    p = page
    _sign_in(p, site, "cnk_0000000000000000_" + "A" * 43)
    assert "not a live operator key" in p.text_content("[role=alert]")  # type: ignore[attr-defined]
    p.screenshot(path=str(shots / "console-login.png"))  # type: ignore[attr-defined]
    _sign_in(p, site, site.agent)  # a live key, but an agent's
    assert "not a live operator key" in p.text_content("[role=alert]")  # type: ignore[attr-defined]
    _sign_in(p, site, site.operator)
    assert p.url.endswith("/console/")  # type: ignore[attr-defined]
    assert "Erasure requests" in p.text_content("h1")  # type: ignore[attr-defined]
    cookies = {c["name"]: c for c in p.context.cookies()}  # type: ignore[attr-defined]
    session = cookies["cenotaph_console"]
    assert session["httpOnly"] and session["secure"] and session["sameSite"] == "Strict"
    assert session["path"] == "/console"
    assert site.operator not in json.dumps(list(cookies.values()))
    assert p.locator("script").count() == 0  # type: ignore[attr-defined]


def test_the_erasure_flow_end_to_end(page: object, site: Site, shots: Path, tmp_path: Path) -> None:
    p = page
    _sign_in(p, site, site.operator)
    # an access request first: the export downloads as JSON
    p.click("text=Subjects")  # type: ignore[attr-defined]
    p.fill("#export-subject", ALICE)  # type: ignore[attr-defined]
    with p.expect_download() as info:  # type: ignore[attr-defined]
        p.click("text=Download export")  # type: ignore[attr-defined]
    export = json.loads(Path(info.value.path()).read_text())
    assert sorted(r["key"] for r in export["records"]) == ["diet", "note"]
    # the erasure: review, a wrong confirmation erases nothing, the right one erases
    p.fill("#erase-subject", ALICE)  # type: ignore[attr-defined]
    p.click("text=Review erasure…")  # type: ignore[attr-defined]
    assert "2</strong> record(s)" in p.content()  # type: ignore[attr-defined]
    p.fill("#confirmation", "tenant:acme/user:bob")  # type: ignore[attr-defined]
    p.click("button.danger")  # type: ignore[attr-defined]
    assert "does not match" in p.text_content("[role=alert]")  # type: ignore[attr-defined]
    assert (
        site.api("GET", "/v1/memories", site.agent, params={"scope": ALICE, "key": "diet"}).status_code == 200
    )
    p.screenshot(path=str(shots / "console-confirm.png"))  # type: ignore[attr-defined]
    p.fill("#confirmation", ALICE)  # type: ignore[attr-defined]
    p.click("button.danger")  # type: ignore[attr-defined]
    assert "/console/erasures/er_" in p.url  # type: ignore[attr-defined]
    request_id = p.url.rsplit("/", 1)[1]  # type: ignore[attr-defined]
    # the records are gone, and alice's agent key (bound inside the erased subject) with them
    gone = site.api("GET", "/v1/memories", site.operator, params={"scope": ALICE, "key": "diet"})
    assert gone.status_code == 404
    assert site.api("GET", "/v1/key", site.agent).status_code == 401
    deadline = time.monotonic() + 60
    while p.text_content("#state") != "verified":  # type: ignore[attr-defined]  # the page refreshes itself
        assert time.monotonic() < deadline, "the erasure did not verify"
        time.sleep(0.3)
    assert p.locator("meta[http-equiv=refresh]").count() == 0  # type: ignore[attr-defined]
    assert p.locator("#layers tbody tr").count() >= 6  # type: ignore[attr-defined]
    assert "horizon" in p.text_content("#layers")  # type: ignore[attr-defined]  # held back by the backup
    p.screenshot(path=str(shots / "console-erasure.png"), full_page=True)  # type: ignore[attr-defined]
    with p.expect_download() as info:  # type: ignore[attr-defined]
        p.click("#download-certificate")  # type: ignore[attr-defined]
    certificate = tmp_path / "certificate.json"
    shutil.copy(info.value.path(), certificate)
    assert json.loads(certificate.read_text())["request_id"] == request_id
    cenotaph.verify_certificate(certificate.read_text(), site.store.public_key)
    # verify it by upload, with the public key alone
    p.click("text=Verify a certificate")  # type: ignore[attr-defined]
    p.set_input_files("#upload", str(certificate))  # type: ignore[attr-defined]
    p.click("form.card button[type=submit]")  # type: ignore[attr-defined]
    assert "Valid." in p.text_content("#verdict")  # type: ignore[attr-defined]
    assert request_id in p.text_content("#certificate-fields")  # type: ignore[attr-defined]
    p.screenshot(path=str(shots / "console-verify.png"), full_page=True)  # type: ignore[attr-defined]
    # a pasted copy with one field changed does not verify
    tampered = certificate.read_text().replace('"compliance"', '"operational"')
    p.fill("#certificate", tampered)  # type: ignore[attr-defined]
    p.click("form.card button[type=submit]")  # type: ignore[attr-defined]
    assert "Not valid." in p.text_content("#verdict")  # type: ignore[attr-defined]
    # and the request is listed with its state
    p.click("text=Erasure requests")  # type: ignore[attr-defined]
    assert request_id in p.text_content("table")  # type: ignore[attr-defined]
    p.screenshot(path=str(shots / "console-requests.png"))  # type: ignore[attr-defined]


def test_backups_and_what_holds_each_epoch(page: object, site: Site, shots: Path) -> None:
    p = page
    _sign_in(p, site, site.operator)
    p.click("text=Backups & key epochs")  # type: ignore[attr-defined]
    epochs = p.text_content("#epochs")  # type: ignore[attr-defined]
    assert "current epoch" in epochs and "registered backup" in epochs
    backup_id = next(iter(site.store.backups()))
    assert backup_id in p.text_content("#backups")  # type: ignore[attr-defined]
    p.screenshot(path=str(shots / "console-keys.png"), full_page=True)  # type: ignore[attr-defined]


def test_forms_need_their_csrf_token(page: object, site: Site) -> None:
    p = page
    _sign_in(p, site, site.operator)
    carol = "tenant:acme/user:carol"
    assert (
        site.api(
            "POST", "/v1/memories", site.operator, json={"scope": carol, "key": "k", "value": 1}
        ).status_code
        == 201
    )
    # the browser's cookie, but a request forged without (or with a wrong) token: refused, nothing erased
    for form in (
        {"subject": carol, "confirmation": carol},
        {"subject": carol, "confirmation": carol, "csrf": "x"},
    ):
        r = p.request.post(site.url + "/console/subjects/erase/confirm", form=form)  # type: ignore[attr-defined]
        assert r.status in (403, 422)
    assert (
        site.api("GET", "/v1/memories", site.operator, params={"scope": carol, "key": "k"}).status_code == 200
    )


def test_a_revoked_key_ends_its_console_session(page: object, site: Site) -> None:
    p = page
    key, secret = site.keys.create(tenant="acme", role="operator")
    _sign_in(p, site, secret)
    assert p.url.endswith("/console/")  # type: ignore[attr-defined]
    site.keys.revoke(key.id)
    p.goto(site.url + "/console/keys")  # type: ignore[attr-defined]
    assert p.url.endswith("/console/login")  # type: ignore[attr-defined]


def test_sign_out(page: object, site: Site) -> None:
    p = page
    _sign_in(p, site, site.operator)
    p.click("text=Sign out")  # type: ignore[attr-defined]
    assert p.url.endswith("/console/login")  # type: ignore[attr-defined]
    p.goto(site.url + "/console/")  # type: ignore[attr-defined]
    assert p.url.endswith("/console/login")  # type: ignore[attr-defined]


def test_a_bad_submission_shows_the_page_again_with_what_was_typed(page: object, site: Site) -> None:
    p = page
    _sign_in(p, site, site.operator)
    p.click("text=Subjects")  # type: ignore[attr-defined]
    p.fill("#erase-subject", "tenant:globex/user:bob")  # type: ignore[attr-defined]
    p.click("text=Review erasure…")  # type: ignore[attr-defined]
    assert "no such subject inside tenant:acme" in p.text_content("[role=alert]")  # type: ignore[attr-defined]
    assert p.input_value("#erase-subject") == "tenant:globex/user:bob"  # type: ignore[attr-defined]
    assert "application/json" not in p.content()  # type: ignore[attr-defined]
    p.fill("#export-subject", "tenant:acme//bad")  # type: ignore[attr-defined]
    p.click("text=Download export")  # type: ignore[attr-defined]
    assert p.locator("[role=alert]").count() == 1  # type: ignore[attr-defined]
    assert p.input_value("#export-subject") == "tenant:acme//bad"  # type: ignore[attr-defined]
    # a pasted certificate without its public key: the page again, the paste kept
    p.click("text=Verify a certificate")  # type: ignore[attr-defined]
    p.fill("#public_key", "")  # type: ignore[attr-defined]
    p.fill("#certificate", '{"kept": true}')  # type: ignore[attr-defined]
    p.evaluate("document.querySelector('#public_key').removeAttribute('required')")  # type: ignore[attr-defined]
    p.click("form.card button[type=submit]")  # type: ignore[attr-defined]
    assert "Give the public key" in p.text_content("#verdict")  # type: ignore[attr-defined]
    assert p.input_value("#certificate") == '{"kept": true}'  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def pending_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """A server whose store does not purge in the background: requests wait for a purge."""
    s = Site(tmp_path_factory.mktemp("pending"), auto_purge="off")
    s.api("POST", "/v1/backups", s.operator)
    try:
        yield s
    finally:
        s.close()


def _pending_forget(site: Site, key: str) -> str:
    body = {"scope": ALICE, "key": key, "value": "cardiology tuesday"}
    assert site.api("POST", "/v1/memories", site.agent, json=body).status_code == 201
    r = site.api("POST", "/v1/forget", site.agent, json={"scope": ALICE, "key": key})
    assert r.status_code == 202, r.text
    request_id: str = r.json()["request_id"]
    return request_id


def _wait_for_state(page: object, state: str) -> None:
    deadline = time.monotonic() + 30
    while page.text_content("#state") != state:  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, f"the page never showed {state}"
        time.sleep(0.2)


def test_a_pending_request_refreshes_itself_until_verified(
    page: object, pending_site: Site, shots: Path
) -> None:
    p, site = page, pending_site
    request_id = _pending_forget(site, "refreshed")
    _sign_in(p, site, site.operator)
    p.goto(f"{site.url}/console/erasures/{request_id}")  # type: ignore[attr-defined]
    assert p.text_content("#state") == "shredded"  # type: ignore[attr-defined]
    assert p.locator("meta[http-equiv=refresh]").count() == 1  # type: ignore[attr-defined]
    assert "Purge now" in p.text_content("#next-step")  # type: ignore[attr-defined]
    assert "store." not in p.text_content("main")  # type: ignore[attr-defined]
    p.screenshot(path=str(shots / "console-pending.png"), full_page=True)  # type: ignore[attr-defined]
    assert site.api("POST", "/v1/purge", site.operator).status_code == 200  # purged from elsewhere
    _wait_for_state(p, "verified")  # no reload from here: the page's own refresh shows it
    assert p.locator("meta[http-equiv=refresh]").count() == 0  # type: ignore[attr-defined]
    assert p.locator("#download-certificate").count() == 1  # type: ignore[attr-defined]


def test_purge_now_verifies_a_pending_request(page: object, pending_site: Site) -> None:
    p, site = page, pending_site
    request_id = _pending_forget(site, "purged-here")
    _sign_in(p, site, site.operator)
    p.goto(f"{site.url}/console/erasures/{request_id}")  # type: ignore[attr-defined]
    assert p.text_content("#state") == "shredded"  # type: ignore[attr-defined]
    p.click("#purge")  # type: ignore[attr-defined]
    assert p.url.endswith(f"/console/erasures/{request_id}")  # type: ignore[attr-defined]
    assert p.text_content("#state") == "verified"  # type: ignore[attr-defined]
    assert site.store.erasure(request_id).status().state == "verified"


def test_a_refused_page_keeps_the_navigation(page: object, site: Site, shots: Path) -> None:
    p = page
    _sign_in(p, site, site.operator)
    p.goto(site.url + "/console/erasures/er_000000000000000000000000")  # type: ignore[attr-defined]
    assert p.text_content("h1") == "Refused"  # type: ignore[attr-defined]
    p.click("text=Subjects")  # type: ignore[attr-defined]  # the navigation is there, and works
    assert p.url.endswith("/console/subjects")  # type: ignore[attr-defined]
