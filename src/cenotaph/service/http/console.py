"""The operator console at ``/console``: server-rendered pages, no JavaScript at all.

Sign-in takes an operator API key once; the browser then holds only a random console session id
in an ``HttpOnly``, ``SameSite=Strict`` cookie (``Secure`` unless the server was started with
``--insecure-cookies``), scoped to ``/console``. The key's secret is never kept: the session
remembers the key id, and every page checks that key again, so a revoked key's sessions end at
their next page. Every form carries a CSRF token bound to the session (the sign-in form one bound
to a cookie of its own), compared in constant time. Pages are sent with a CSP that forbids
scripts and framing, and are never cached. A pending request's page refreshes itself (a
``<meta http-equiv="refresh">``) until nothing is left to wait for, and offers "Purge now". The
store's words are said the console's way (:data:`.spelling.speak_console`): its actions where it
has one, the API's routes elsewhere.
"""

from __future__ import annotations

import hmac
import json
import re
import secrets
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from markupsafe import Markup, escape
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException

from cenotaph import certificate_pdf, verify_certificate

from ...errors import CenotaphError
from ..apikeys import ApiKey, Role
from .context import Service, service_of
from .operations import (
    backups_for,
    consumers_for,
    epochs_for,
    erasure_doc,
    erasure_docs,
    erasures_for,
    export_for,
    forget_subject_for,
    purge_for,
    visible_erasure,
)
from .problems import ApiError, problem_for
from .spelling import speak_console

__all__ = ["install_console"]

HERE = Path(__file__).parent
COOKIE = "cenotaph_console"
LOGIN_CSRF_COOKIE = "cenotaph_console_login"
SESSION_SECONDS = 8 * 3600
MAX_CERTIFICATE_BYTES = 256 << 10
MAX_FORM_FIELDS = 16
REFRESH_SECONDS = 3  # how often a pending request's page reloads itself
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

templates = Jinja2Templates(directory=HERE / "templates")
HEX_TOKEN = re.compile(r"[0-9a-f]{32,}")  # keys, hashes, tokens: one word a person compares by its ends


def _short_token(token: str) -> str:
    return f"{token[:12]}…{token[-8:]}"


def _wrap_token(token: str) -> Markup:
    """The whole token, allowed to wrap only every 16 characters (copying it copies no spaces)."""
    return Markup("<wbr>").join(escape(token[i : i + 16]) for i in range(0, len(token), 16))


def _prose(text: str) -> Markup:
    """A message as HTML: escaped, with its `backticked` commands and routes set as code."""
    parts = text.split("`")
    if len(parts) % 2 == 0:  # a lone backtick: nothing to pair it with
        return escape(text)
    code = Markup("<code>%s</code>")
    return Markup("").join(escape(part) if n % 2 == 0 else code % part for n, part in enumerate(parts))


templates.env.tests["hex_token"] = lambda value: isinstance(value, str) and bool(HEX_TOKEN.fullmatch(value))
templates.env.filters["short_token"] = _short_token
templates.env.filters["wrap_token"] = _wrap_token
templates.env.filters["prose"] = _prose


@dataclass
class _Login:
    key_id: str
    csrf: str
    expires: float = field(default_factory=lambda: time.monotonic() + SESSION_SECONDS)


class ConsoleSessions:
    """Signed-in browsers: a random id -> the operator key id and the session's CSRF token."""

    def __init__(self) -> None:
        self._logins: dict[str, _Login] = {}
        self._lock = threading.Lock()

    def open(self, key: ApiKey) -> tuple[str, str]:
        sid, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        now = time.monotonic()
        with self._lock:
            self._logins = {k: v for k, v in self._logins.items() if v.expires > now}
            self._logins[sid] = _Login(key.id, csrf)
        return sid, csrf

    def get(self, sid: str | None) -> _Login | None:
        with self._lock:
            login = self._logins.get(sid or "")
            return login if login is not None and login.expires > time.monotonic() else None

    def close(self, sid: str | None) -> None:
        with self._lock:
            self._logins.pop(sid or "", None)


class SignInRequired(Exception):
    """No live console session: send the browser to the sign-in page."""


@dataclass
class Operator:
    key: ApiKey
    csrf: str
    svc: Service


def _operator(request: Request) -> Operator:
    svc = service_of(request)
    login = request.app.state.console_sessions.get(request.cookies.get(COOKIE))
    key = svc.keys.get(login.key_id) if login is not None else None
    if login is None or key is None or key.revoked_at is not None or key.role != Role.OPERATOR:
        raise SignInRequired
    return Operator(key, login.csrf, svc)


OperatorDep = Annotated[Operator, Depends(_operator)]


def _check_csrf(expected: str, sent: str) -> None:
    if not expected or not hmac.compare_digest(expected.encode(), sent.encode()):
        raise CsrfError


class CsrfError(Exception):
    """A form came back without the token of the page that showed it."""


FORM_UNREADABLE = (
    "The form could not be read (is the page out of date?); nothing was done. Check the fields and "
    "send it again."
)
FORM_TOO_LARGE = (
    f"The form is too large (a certificate may be at most {MAX_CERTIFICATE_BYTES >> 10} KiB); "
    "nothing was done."
)


@dataclass
class Submitted:
    """A console form as it came: its text fields and files, or why it could not be read.

    Handlers read fields from here rather than declaring them, so that a bad submission (a field
    missing or malformed, a body that does not parse) answers the console's own page with the error
    shown and what was typed kept, never the API's JSON 422; and the CSRF token is checked before
    any field is looked at."""

    fields: dict[str, str]
    files: dict[str, UploadFile]
    unreadable: str | None = None

    def text(self, name: str) -> str:
        return self.fields.get(name, "")

    def check(self, expected: str) -> None:
        """Refuse the form unless it carries ``expected`` (a form that could not be read carries
        nothing: its handler does nothing and only shows the page again)."""
        if self.unreadable is None:
            _check_csrf(expected, self.text("csrf"))


async def _submitted(request: Request) -> AsyncIterator[Submitted]:
    try:
        form = await request.form(max_files=1, max_fields=MAX_FORM_FIELDS)
    except StarletteHTTPException as exc:  # unparseable, too many parts, or over the body limit
        yield Submitted({}, {}, FORM_TOO_LARGE if exc.status_code == 413 else FORM_UNREADABLE)
        return
    fields: dict[str, str] = {}
    files: dict[str, UploadFile] = {}
    for name, value in form.multi_items():
        if isinstance(value, str):
            fields.setdefault(name, value)
        else:
            files.setdefault(name, value)
    try:
        yield Submitted(fields, files)
    finally:
        await form.close()  # uploads spooled to temporary files


FormDep = Annotated[Submitted, Depends(_submitted)]


def _page(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
    response = templates.TemplateResponse(request, name, context, status_code=status)
    response.headers.update(HEADERS)
    return response


def _see(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303, headers={"Cache-Control": "no-store"})


def _download(doc: Any, filename: str) -> Response:
    body = json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    headers = {**HEADERS, "Content-Disposition": f'attachment; filename="{filename}"'}
    return Response(body, media_type="application/json", headers=headers)


router = APIRouter(prefix="/console", include_in_schema=False)


# -- signing in ---------------------------------------------------------------------------------
@router.get("/login")
def login_form(request: Request) -> HTMLResponse:
    token = secrets.token_urlsafe(32)
    response = _page(request, "login.html", csrf=token, error=None)
    _set_cookie(request, response, LOGIN_CSRF_COOKIE, token, SESSION_SECONDS)
    return response


@router.post("/login")
def login(request: Request, form: FormDep) -> Response:
    form.check(request.cookies.get(LOGIN_CSRF_COOKIE, ""))
    secret = form.text("api_key").strip()
    error = form.unreadable or (None if secret else "Enter an operator API key.")
    key = None if error else service_of(request).keys.authenticate(secret)
    if key is None or key.role != Role.OPERATOR:
        token = secrets.token_urlsafe(32)
        status = 401 if error is None else 422
        response: Response = _page(
            request, "login.html", status, csrf=token, error=error or "That is not a live operator key."
        )
        _set_cookie(request, response, LOGIN_CSRF_COOKIE, token, SESSION_SECONDS)
        return response
    sid, _ = request.app.state.console_sessions.open(key)
    response = _see("/console/")
    _set_cookie(request, response, COOKIE, sid, SESSION_SECONDS)
    response.delete_cookie(LOGIN_CSRF_COOKIE, path="/console")
    return response


@router.post("/logout")
def logout(request: Request, op: OperatorDep, form: FormDep) -> Response:
    _check_csrf(op.csrf, form.text("csrf"))
    request.app.state.console_sessions.close(request.cookies.get(COOKIE))
    response = _see("/console/login")
    response.delete_cookie(COOKIE, path="/console")
    return response


def _set_cookie(request: Request, response: Response, name: str, value: str, seconds: int) -> None:
    response.set_cookie(
        name,
        value,
        max_age=seconds,
        path="/console",
        httponly=True,
        samesite="strict",
        secure=request.app.state.console_secure_cookies,
    )


# -- erasure requests ---------------------------------------------------------------------------
@router.get("/")
def erasures(request: Request, op: OperatorDep) -> HTMLResponse:
    docs = erasure_docs(op.svc, list(reversed(erasures_for(op.svc, op.key))), speak_console)
    return _page(request, "erasures.html", op=op, erasures=docs)


@router.get("/erasures/{request_id}")
def erasure(request: Request, op: OperatorDep, request_id: str) -> HTMLResponse:
    doc = erasure_doc(visible_erasure(op.svc, op.key, request_id), speak_console)
    status = doc["status"]
    waiting = status["state"] != "verified" and status["next_step"] is not None and not status["stuck"]
    return _page(request, "erasure.html", op=op, erasure=doc, refresh=REFRESH_SECONDS if waiting else None)


@router.post("/erasures/{request_id}/purge")
def purge(op: OperatorDep, form: FormDep, request_id: str) -> Response:
    """ "Purge now" on a request's page: what ``POST /v1/purge`` does, then the page again."""
    form.check(op.csrf)
    handle = visible_erasure(op.svc, op.key, request_id)
    if form.unreadable is None:
        purge_for(op.svc, op.key)
    return _see(f"/console/erasures/{handle.id}")


@router.get("/erasures/{request_id}/certificate")
def certificate(op: OperatorDep, request_id: str) -> Response:
    handle = visible_erasure(op.svc, op.key, request_id)
    certificate = op.svc.store.attest(handle.id, requester_key_id=op.svc.owners.owner("erasure", handle.id))
    body = certificate.to_json() + "\n"
    headers = {**HEADERS, "Content-Disposition": f'attachment; filename="certificate-{handle.id}.json"'}
    return Response(body, media_type="application/json", headers=headers)


@router.get("/erasures/{request_id}/certificate.pdf")
def certificate_as_pdf(op: OperatorDep, request_id: str) -> Response:
    """The certificate as a one-page PDF for people to file (the JSON is what verifies)."""
    handle = visible_erasure(op.svc, op.key, request_id)
    certificate = op.svc.store.attest(handle.id, requester_key_id=op.svc.owners.owner("erasure", handle.id))
    body = certificate_pdf(certificate, json_name=f"certificate-{handle.id}.json")
    headers = {**HEADERS, "Content-Disposition": f'attachment; filename="certificate-{handle.id}.pdf"'}
    return Response(body, media_type="application/pdf", headers=headers)


# -- subjects -----------------------------------------------------------------------------------
NO_SUBJECT = "Enter a subject: a scope path inside {prefix}, e.g. {prefix}/user:alice."
NOT_VISIBLE = (
    "There is no such subject inside {prefix}: a subject is a scope path inside it, e.g. {prefix}/user:alice."
)


@router.get("/subjects")
def subjects(request: Request, op: OperatorDep) -> HTMLResponse:
    return _subjects(request, op)


def _subjects(
    request: Request, op: Operator, status: int = 200, error: str | None = None, **typed: str
) -> HTMLResponse:
    """The subjects page; after a bad submission, with the error and what was typed."""
    values = {"export": "", "erase": "", **typed}
    return _page(request, "subjects.html", status, op=op, error=error, values=values)


def _refusal(request: Request, op: Operator, exc: CenotaphError | ApiError, **typed: str) -> HTMLResponse:
    """A subject the store or the key's reach refused, on the subjects page."""
    status, message = (exc.status, exc.message) if isinstance(exc, ApiError) else _problem(exc)
    message = NOT_VISIBLE if status == 404 else message.replace("{", "{{").replace("}", "}}")
    return _subjects(request, op, status, message.format(prefix=op.key.prefix), **typed)


def _problem(exc: CenotaphError) -> tuple[int, str]:
    status, body = problem_for(exc, speak_console)
    return status, str(body["message"])


@router.post("/subjects/export")
def export(request: Request, op: OperatorDep, form: FormDep) -> Response:
    """A subject access export, as a download (a POST: the subject never sits in a URL, where
    browser history and proxies would keep it)."""
    form.check(op.csrf)
    subject = form.text("subject")
    if form.unreadable or not subject.strip():
        error = form.unreadable or NO_SUBJECT.format(prefix=op.key.prefix)
        return _subjects(request, op, 422, error, export=subject)
    try:
        doc = export_for(op.svc, op.key, subject.strip())
    except (CenotaphError, ApiError) as exc:
        return _refusal(request, op, exc, export=subject)
    return _download(doc, "subject-export.json")


@router.post("/subjects/erase")
def erase_confirm(request: Request, op: OperatorDep, form: FormDep) -> HTMLResponse:
    """Step one: show what will be erased and ask for the subject again."""
    form.check(op.csrf)
    subject = form.text("subject").strip()
    if form.unreadable or not subject:
        error = form.unreadable or NO_SUBJECT.format(prefix=op.key.prefix)
        return _subjects(request, op, 413 if error == FORM_TOO_LARGE else 422, error, erase=subject)
    try:
        return _confirmation(request, op, subject, 200, None)
    except (CenotaphError, ApiError) as exc:
        return _refusal(request, op, exc, erase=subject)


def _confirmation(
    request: Request, op: Operator, subject: str, status: int, error: str | None, typed: str = ""
) -> HTMLResponse:
    """The confirmation page: what erasing ``subject`` removes (what its export holds)."""
    doc = export_for(op.svc, op.key, subject)
    counts = {"records": len(doc["records"]), "derived": len(doc["derived_records"])}
    return _page(
        request,
        "confirm.html",
        status,
        op=op,
        subject=doc["subject"],
        counts=counts,
        error=error,
        typed=typed,
    )


@router.post("/subjects/erase/confirm")
def erase(request: Request, op: OperatorDep, form: FormDep) -> Response:
    """Step two: the subject typed again matches; erase it and show the request."""
    form.check(op.csrf)
    subject, typed = form.text("subject").strip(), form.text("confirmation")
    try:
        if form.unreadable or not subject:
            error = form.unreadable or NO_SUBJECT.format(prefix=op.key.prefix)
            return _subjects(request, op, 422, error, erase=subject)
        if typed.strip() != subject:
            message = "The confirmation does not match the subject; nothing was erased."
            return _confirmation(request, op, subject, 422, message, typed)
        handle = forget_subject_for(op.svc, op.key, subject)
    except (CenotaphError, ApiError) as exc:
        return _refusal(request, op, exc, erase=subject)
    return _see(f"/console/erasures/{handle.id}")


# -- certificates -------------------------------------------------------------------------------
@router.get("/verify")
def verify_form(request: Request, op: OperatorDep) -> HTMLResponse:
    return _page(request, "verify.html", op=op, result=None, public_key=op.svc.store.public_key, pasted="")


@router.post("/verify")
def verify(request: Request, op: OperatorDep, form: FormDep) -> HTMLResponse:
    """Check a certificate (pasted or uploaded) against a public key alone."""
    form.check(op.csrf)
    public_key, text = form.text("public_key").strip(), form.text("certificate")
    upload = form.files.get("upload")
    result: dict[str, Any]
    if form.unreadable:
        result = {"valid": False, "reason": form.unreadable}
        return _page(request, "verify.html", 422, op=op, result=result, public_key=public_key, pasted=text)
    if upload is not None and upload.filename:
        raw = upload.file.read(MAX_CERTIFICATE_BYTES + 1)
        if len(raw) > MAX_CERTIFICATE_BYTES:
            result = {"valid": False, "reason": FORM_TOO_LARGE}
            return _page(
                request, "verify.html", 413, op=op, result=result, public_key=public_key, pasted=text
            )
        text = raw.decode("utf-8", errors="replace")
    if not text.strip() or not public_key:
        missing = "a certificate (paste it or upload its file)" if not text.strip() else "the public key"
        result = {"valid": False, "reason": f"Give {missing}; nothing was checked."}
        return _page(request, "verify.html", 422, op=op, result=result, public_key=public_key, pasted=text)
    try:
        checked = verify_certificate(text.strip(), public_key)
        result = {"valid": True, "fields": {k: v for k, v in checked.fields.items() if k != "signature"}}
    except CenotaphError as exc:  # CertificateError, or a malformed public key
        result = {"valid": False, "reason": speak_console(str(exc))}
    return _page(request, "verify.html", op=op, result=result, public_key=public_key, pasted=text)


# -- keys and backups ---------------------------------------------------------------------------
@router.get("/keys")
def keys(request: Request, op: OperatorDep) -> HTMLResponse:
    return _page(
        request, "keys.html", op=op, backups=backups_for(op.svc, op.key), epochs=epochs_for(op.svc, op.key)
    )


# -- downstream consumers -------------------------------------------------------------------------
@router.get("/consumers")
def consumers(request: Request, op: OperatorDep) -> HTMLResponse:
    return _page(request, "consumers.html", op=op, consumers=consumers_for(op.svc, op.key))


def install_console(app: FastAPI, *, secure_cookies: bool = True) -> None:
    """Mount the console on ``app``: its pages, its stylesheet, and its error pages."""
    app.state.console_sessions = ConsoleSessions()
    app.state.console_secure_cookies = secure_cookies
    app.include_router(router)
    app.mount("/console/static", StaticFiles(directory=HERE / "static"), name="console-static")

    @app.exception_handler(SignInRequired)
    async def sign_in(request: Request, _: SignInRequired) -> Response:
        return _see("/console/login")

    @app.exception_handler(CsrfError)
    async def csrf_refused(request: Request, _: CsrfError) -> Response:
        return error_page(request, 403, "This form has expired; reload the page and try again.")

    app.state.console_error_page = error_page
    app.state.console_http_error = http_error_page


def error_page(request: Request, status: int, message: str, gaps: list[str] | None = None) -> HTMLResponse:
    """A refusal on a console page, as a page (the API answers the same refusal as JSON), with
    the console's navigation when the browser is signed in."""
    return _page(request, "error.html", status, op=_signed_in(request), message=message, gaps=gaps)


def _signed_in(request: Request) -> Operator | None:
    try:
        return _operator(request)
    except (SignInRequired, CenotaphError):  # no session, or the key file cannot be read now
        return None


HTTP_ERRORS = {
    404: "There is no such page in the console.",
    405: "This page cannot be reached that way; use the console's own links and forms.",
    413: FORM_TOO_LARGE,
}


def http_error_page(request: Request, status: int) -> HTMLResponse:
    """A request the router or the body limit refused, as a console page (never the API's JSON)."""
    return error_page(request, status, HTTP_ERRORS.get(status, FORM_UNREADABLE))
