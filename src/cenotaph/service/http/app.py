"""The ASGI application: routes, error shapes, body limits, the access log and the lifespan.

>>> import cenotaph, tempfile
>>> from cenotaph.service.apikeys import ApiKeyRing
>>> data = tempfile.mkdtemp()
>>> app = create_app(cenotaph.open(data), ApiKeyRing(data))
>>> sorted(r for r in app.openapi()["paths"] if r.startswith("/v1/memories"))
['/v1/memories', '/v1/memories/batch', '/v1/memories/list', '/v1/memories/{record_id}']
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cenotaph import Store
from cenotaph.limits import MAX_METADATA_BYTES, MAX_VALUE_BYTES

from ... import __version__
from ...errors import CenotaphError
from ..apikeys import ApiKeyRing
from .consumer_routes import router as consumer_router
from .context import Service
from .problems import ApiError, problem_for
from .routes import router
from .spelling import speak_console, speak_http

__all__ = ["MAX_BODY_BYTES", "create_app"]

# a value and its metadata at the store's limits, with room for the other fields
MAX_BODY_BYTES = MAX_VALUE_BYTES + MAX_METADATA_BYTES + (256 << 10)

TOO_LARGE = (
    f"the request body is larger than {MAX_BODY_BYTES} bytes; a value may be at most 1 MiB as compact "
    "JSON and metadata 64 KiB: store large content elsewhere and keep a reference"
)
UNREADABLE = (
    "the body could not be read as JSON (nested too deeply, or a number with more than 4,300 digits?); "
    "send a JSON object of the shape at /docs"
)

access_log = logging.getLogger("cenotaph.http.access")
log = logging.getLogger("cenotaph.http")

# Loggers of libraries the server runs that put request bytes in their messages: python-multipart
# (the form parser) logs a byte of a malformed body in its warnings, and debug lines as it parses.
# They are silenced outright, whatever the embedding application configures for the root logger.
QUIET_LOGGERS = ("python_multipart", "multipart")

DESCRIPTION = """\
cenotaph over HTTP: write, read, search and forget memories inside the scope prefix your API key
is bound to. Send `Authorization: Bearer <key>` (keys come from `cenotaph api-keys create`).

* Anything outside your prefix, missing, or forgotten answers the same 404 with the same body.
* Forgets answer 202 with a `status_url`; poll it until `state` is `verified`.
* The certificate of a request answers 409 with its `gaps` until it is verified.
* Sessions (`POST /v1/sessions`, then the `Cenotaph-Session` header) record what you read as the
  sources of what you write, so forgetting a source forgets what you derived from it.
"""


def create_app(
    store: Store,
    keys: ApiKeyRing,
    *,
    backup_dir: Path | None = None,
    console: bool = True,
    secure_cookies: bool = True,
) -> FastAPI:
    """The HTTP API (and the operator console at ``/console``) over an open ``store``. The caller
    keeps ownership of the store. Forgets answer as soon as they are durable; the store's own
    background purge (its default ``auto_purge``) carries them to ``verified``. A store opened
    with ``auto_purge="off"`` leaves that to its owner (``POST /v1/purge`` runs one)."""
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)
    service = Service(store, keys, backup_dir)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        service.start()
        try:
            yield
        finally:
            service.stop()

    app = FastAPI(
        title="cenotaph",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.service = service
    app.include_router(router)
    app.include_router(consumer_router)
    if console:
        from .console import install_console

        install_console(app, secure_cookies=secure_cookies)
    _install_error_handlers(app)
    app.add_middleware(BodyLimit)
    app.add_middleware(NoTracebacks)
    app.add_middleware(AccessLog)
    return app


def _json(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(body, status_code=status, headers=headers)


def _console_page(request: Request) -> Any:
    """The console's error page maker, if the console is on and the request is for one of its pages."""
    page = getattr(request.app.state, "console_error_page", None)
    path = request.url.path
    return page if page is not None and (path == "/console" or path.startswith("/console/")) else None


def _answer(
    request: Request, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> Response:
    """JSON for the API; an error page for the console's pages."""
    page = _console_page(request)
    if page is not None:
        response: Response = page(request, status, body["message"], body.get("gaps"))
        return response
    return _json(status, body, headers)


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> Response:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return _answer(
            request, exc.status, {"error": exc.code, "message": exc.message, **exc.details}, headers
        )

    @app.exception_handler(CenotaphError)
    async def cenotaph_error(request: Request, exc: CenotaphError) -> Response:
        status, body = problem_for(exc, speak_console if _console_page(request) else speak_http)
        return _answer(request, status, body)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        return _answer(request, 422, {"error": "invalid_input", "message": validation_message(exc)})

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        status, code, message = {
            404: (404, "not_found", "no such route; the routes are listed at /docs"),
            405: (405, "method_not_allowed", "this route does not take that method; see /docs"),
            413: (413, "too_large", TOO_LARGE),
        }.get(exc.status_code, (422, "invalid_input", UNREADABLE))
        if _console_page(request) is not None:
            return request.app.state.console_http_error(request, status)  # type: ignore[no-any-return]
        return _json(status, {"error": code, "message": message}, dict(exc.headers or {}))

    @app.exception_handler(Exception)
    async def internal(_: Request, exc: Exception) -> JSONResponse:
        log.error("internal error: %s", type(exc).__name__)  # the type only: messages may hold data
        return _json(
            500, {"error": "internal", "message": f"internal error ({type(exc).__name__}); please report it"}
        )


def validation_message(exc: RequestValidationError) -> str:
    """Which fields are wrong and why, without echoing what was sent."""
    parts = []
    for error in exc.errors()[:8]:
        if error.get("type") == "json_invalid":
            return "the body is not valid JSON; send a JSON object of the shape at /docs"
        where = ".".join(str(p) for p in error.get("loc", ()) if p not in ("body",)) or "body"
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return "the request is malformed: " + "; ".join(parts) + " (the shapes are at /docs)"


class AccessLog:
    """One line per request: method, route template, status and time. Never the path or query
    string as sent (they hold scopes, keys and subjects), never a header or a body."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = getattr(scope.get("route"), "path", "-")
            millis = (time.perf_counter() - started) * 1000
            access_log.info("%s %s %d %.1fms", scope["method"], route, status, millis)


class NoTracebacks:
    """An unexpected exception answers a JSON 500 and logs its type only: Starlette's own handler
    would hand uvicorn a traceback to log, and exception messages may hold values or names."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except Exception as exc:  # noqa: BLE001 - answered and logged (by type) here, on purpose
            log.error("internal error: %s", type(exc).__name__)
            if scope["type"] == "http" and not started:
                body = {
                    "error": "internal",
                    "message": f"internal error ({type(exc).__name__}); please report it",
                }
                await _json(500, body)(scope, receive, send)


class BodyLimit:
    """Refuse a body over ``MAX_BODY_BYTES`` with a JSON 413: at once when Content-Length says
    so, else as soon as the streamed body passes the limit (before any of it is used)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > MAX_BODY_BYTES:
            request = Request(scope, receive)
            response: Response
            if _console_page(request) is not None:
                response = request.app.state.console_http_error(request, 413)
            else:
                response = _json(413, {"error": "too_large", "message": TOO_LARGE})
            response.headers["Connection"] = "close"
            await response(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > MAX_BODY_BYTES:
                raise HTTPException(413)  # FastAPI passes an HTTPException from the body read through
            return message

        await self.app(scope, counted, send)
