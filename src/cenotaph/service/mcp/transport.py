"""Serving a server over stdio or streamable HTTP, and the HTTP API-key gate.

Over both transports every message is read by :func:`.wire.decode` first, so what the SDK's
parser would drop or answer with pydantic's report (which quotes the request's values) gets a
JSON-RPC error (HTTP 400 with the error as its body): stdio is :mod:`.stdio`, HTTP the
:class:`MessageCheck` middleware.

Streamable HTTP listens on loopback unless every request is bound by a bearer API key
(``cenotaph api-keys create``): a non-loopback ``--host`` requires keys. With keys, each
request must carry ``Authorization: Bearer <secret>`` of a live key whose prefix overlaps the
server's; the key rides that request's ASGI scope to the tools, where its prefix narrows the
connection's reach (:meth:`.confinement.Confinement.narrowed`). It is checked on every request,
so a revoked key stops at its next call, and a legacy session started under one key cannot be
used with another (each key is its own connection). On loopback the SDK's DNS-rebinding
protection is on (only ``127.0.0.1``, ``localhost`` and ``[::1]`` hosts and origins are
answered).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from typing import Any

from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from starlette.datastructures import Headers
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cenotaph.errors import InvalidValueError

from ..apikeys import ApiKeyRing, Role
from .confinement import Confinement
from .stdio import serve_stdio
from .toolserver import API_KEY_SCOPE, CenotaphMCPServer
from .wire import Refusal, decode

__all__ = [
    "MCP_PATH",
    "SESSION_IDLE_SECONDS",
    "ApiKeyGate",
    "MessageCheck",
    "check_host",
    "serve_http",
    "serve_stdio",
]

MCP_PATH = "/mcp"
SESSION_IDLE_SECONDS = 30 * 60  # a legacy HTTP session idle this long is closed (the SDK's default)
LOOPBACK_NAMES = {"localhost": "127.0.0.1"}


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(LOOPBACK_NAMES.get(host.lower(), host).strip("[]")).is_loopback
    except ValueError:
        return False


def check_host(host: str, *, api_keys: bool) -> str:
    """The address to bind for ``host``: loopback, or any address when API keys bind every request."""
    address = LOOPBACK_NAMES.get(host.lower(), host).strip("[]")
    if is_loopback(address):
        return address
    if not api_keys:
        raise InvalidValueError(
            "a non-loopback --host needs --api-keys: every request must then carry a bearer API key "
            "whose prefix bounds its connection; or serve 127.0.0.1"
        )
    try:
        ipaddress.ip_address(address)
    except ValueError:
        raise InvalidValueError(
            "--host must be an IP address to listen on, e.g. 0.0.0.0 or 127.0.0.1"
        ) from None
    return address


class ApiKeyGate:
    """ASGI middleware: only requests with a live API key overlapping ``reach`` get through."""

    def __init__(self, app: ASGIApp, ring: ApiKeyRing, reach: Confinement) -> None:
        self.app = app
        self.ring = ring
        self.reach = reach

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header = Headers(scope=scope).get("authorization", "")
        scheme, _, secret = header.partition(" ")
        key = self.ring.authenticate(secret.strip()) if scheme.lower() == "bearer" else None
        if key is None:
            await _deny(
                scope, receive, send, 401, "a valid API key is required: send Authorization: Bearer <key>"
            )
        elif key.role == Role.CONSUMER:
            # a downstream consumer's key reads and answers its erasure events over HTTP (/v1);
            # MCP's tools write and forget, which it may never do
            await _deny(
                scope, receive, send, 403, "a consumer key cannot use the MCP server; use the HTTP API"
            )
        elif self.reach.narrowed(key.scope) is None:
            await _deny(scope, receive, send, 403, "this API key's prefix is outside what this server serves")
        else:
            scope[API_KEY_SCOPE] = key
            await self.app(scope, receive, send)


async def _deny(scope: Scope, receive: Receive, send: Send, status: int, reason: str) -> None:
    headers = {"WWW-Authenticate": 'Bearer realm="cenotaph"'} if status == 401 else {}
    await JSONResponse({"error": reason}, status_code=status, headers=headers)(scope, receive, send)


class MessageCheck:
    """ASGI middleware: a POSTed body that is no message the server can handle is answered here
    (HTTP 400, the JSON-RPC error as the body), as stdio answers such a line."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != MCP_PATH:
            await self.app(scope, receive, send)
            return
        body, complete = await _read_body(receive, DEFAULT_MAX_REQUEST_BODY_SIZE)
        if complete and len(body) <= DEFAULT_MAX_REQUEST_BODY_SIZE:
            decoded = decode(body)
            if isinstance(decoded, Refusal):
                await Response(decoded.to_json(), 400, media_type="application/json")(scope, receive, send)
                return
        # a body over the SDK's limit goes on as it came, for the SDK's own answer (413)
        await self.app(scope, _replayed(body, complete, receive), send)


async def _read_body(receive: Receive, limit: int) -> tuple[bytes, bool]:
    """The request's body, or its first part once it is past ``limit`` bytes; whether that is
    all of it."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), False  # the client went away; the app will see it too
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), True
        if size > limit:
            return b"".join(chunks), False


def _replayed(body: bytes, complete: bool, receive: Receive) -> Receive:
    """``receive`` as if nothing had been read: ``body`` first, then the rest (if any)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": not complete}

    return replay


def serve_http(
    server: CenotaphMCPServer,
    host: str,
    port: int,
    on_ready: Callable[[str], None],
    *,
    gate: Callable[[ASGIApp], ASGIApp] | None = None,
) -> None:
    """Serve streamable HTTP at ``http://host:port/mcp`` (port 0: any free port) until stopped;
    ``gate`` wraps the app (the API-key gate); ``on_ready`` gets the URL once the socket listens."""
    import uvicorn  # comes with the mcp extra

    address = check_host(host, api_keys=gate is not None)
    app: Any = server.streamable_http_app(
        streamable_http_path=MCP_PATH, session_idle_timeout=SESSION_IDLE_SECONDS, host=address
    )
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    # IPPROTO_TCP named, or asyncio does not set TCP_NODELAY on accepted connections (40 ms a response)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((address, port))
        sock.listen(128)  # a client may connect as soon as on_ready has printed the URL
    except OSError as exc:
        sock.close()
        raise InvalidValueError(
            f"cannot listen on {address} port {port} ({exc.strerror}); choose another --port"
        ) from None
    bound = sock.getsockname()[1]
    shown = f"[{address}]" if family == socket.AF_INET6 else address
    checked = MessageCheck(app)
    config = uvicorn.Config(
        checked if gate is None else gate(checked), log_level="warning", access_log=False, lifespan="on"
    )
    on_ready(f"http://{shown}:{bound}{MCP_PATH}")
    uvicorn.Server(config).run(sockets=[sock])
