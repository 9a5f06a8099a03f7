"""Serving a server over stdio or streamable HTTP.

Streamable HTTP listens on loopback only: a server reachable from other hosts would need every
connection bound by a bearer API key (a tenant and a scope prefix per key), and this version
does not have them yet, so a non-loopback ``--host`` is refused before anything is opened. On
loopback the SDK's DNS-rebinding protection is on (only ``127.0.0.1``, ``localhost`` and
``[::1]`` hosts and origins are answered).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable

import anyio

from cenotaph.errors import InvalidValueError

from .server import CenotaphMCPServer

__all__ = ["MCP_PATH", "SESSION_IDLE_SECONDS", "check_host", "serve_http", "serve_stdio"]

MCP_PATH = "/mcp"
SESSION_IDLE_SECONDS = 30 * 60  # a legacy HTTP session idle this long is closed (the SDK's default)
LOOPBACK_NAMES = {"localhost": "127.0.0.1"}


def check_host(host: str) -> str:
    """The loopback address to bind for ``host``; anything else is refused (see the module doc)."""
    address = LOOPBACK_NAMES.get(host.lower(), host)
    try:
        loopback = ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise InvalidValueError(
            "--host must be a loopback address (127.0.0.1, ::1 or localhost): serving other hosts needs "
            "bearer API keys that bound each connection to a prefix, which this version does not have"
        )
    return address.strip("[]")


def serve_stdio(server: CenotaphMCPServer) -> None:
    """Serve one client on stdin/stdout until it closes them."""
    anyio.run(server.run_stdio_async)


def serve_http(server: CenotaphMCPServer, host: str, port: int, on_ready: Callable[[str], None]) -> None:
    """Serve streamable HTTP at ``http://host:port/mcp`` (port 0: any free port) until stopped;
    ``on_ready`` gets the URL once the socket listens."""
    import uvicorn  # comes with the mcp extra

    address = check_host(host)
    app = server.streamable_http_app(
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
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    on_ready(f"http://{shown}:{bound}{MCP_PATH}")
    uvicorn.Server(config).run(sockets=[sock])
