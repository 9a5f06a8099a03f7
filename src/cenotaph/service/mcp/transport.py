"""Serving a server over stdio or streamable HTTP, and the HTTP API-key gate.

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

import anyio
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from cenotaph.errors import InvalidValueError

from ..apikeys import ApiKeyRing
from .confinement import Confinement
from .server import API_KEY_SCOPE, CenotaphMCPServer

__all__ = ["MCP_PATH", "SESSION_IDLE_SECONDS", "ApiKeyGate", "check_host", "serve_http", "serve_stdio"]

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
        elif self.reach.narrowed(key.scope) is None:
            await _deny(scope, receive, send, 403, "this API key's prefix is outside what this server serves")
        else:
            scope[API_KEY_SCOPE] = key
            await self.app(scope, receive, send)


async def _deny(scope: Scope, receive: Receive, send: Send, status: int, reason: str) -> None:
    headers = {"WWW-Authenticate": 'Bearer realm="cenotaph"'} if status == 401 else {}
    await JSONResponse({"error": reason}, status_code=status, headers=headers)(scope, receive, send)


def serve_stdio(server: CenotaphMCPServer) -> None:
    """Serve one client on stdin/stdout until it closes them."""
    anyio.run(server.run_stdio_async)


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
    config = uvicorn.Config(
        app if gate is None else gate(app), log_level="warning", access_log=False, lifespan="on"
    )
    on_ready(f"http://{shown}:{bound}{MCP_PATH}")
    uvicorn.Server(config).run(sockets=[sock])
