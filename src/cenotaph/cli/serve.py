"""``cenotaph serve``: the HTTP API and the operator console (needs the ``server`` extra)."""

from __future__ import annotations

import json
import logging
import socket
import sys
from pathlib import Path

import click

from .options import DataLocation, api_key_ring, data_option, open_existing_store
from .stopping import stopped_by_signals

__all__ = ["serve"]


@click.command()
@data_option
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="0 picks a free port."
)
@click.option(
    "--backup-dir",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="Where POST /v1/backups puts backups (without it, the server takes none).",
)
@click.option("--no-console", is_flag=True, help="Do not serve the operator console at /console.")
@click.option(
    "--insecure-cookies",
    is_flag=True,
    help="Send the console's cookie over plain HTTP to non-local hosts too (behind a TLS proxy only).",
)
@click.option("--quiet", is_flag=True, help="No access log on stderr.")
def serve(
    data: DataLocation,
    host: str,
    port: int,
    backup_dir: Path | None,
    no_console: bool,
    insecure_cookies: bool,
    quiet: bool,
) -> None:
    """Serve the HTTP API under /v1 (OpenAPI at /openapi.json, docs at /docs) and the console.

    Callers authenticate with keys from `cenotaph api-keys create`. Prints one JSON line,
    {"listening": URL}, once the socket listens. The store's background erasure worker takes
    every compliance forget on to verified, with nobody calling purge. SIGTERM or Ctrl-C stops
    accepting requests, lets those in flight finish, stops the worker at a step boundary (what
    it left resumes at the next open), closes the store and exits 0.
    """
    try:
        import uvicorn

        from cenotaph.service.http import create_app
    except ImportError as exc:
        raise click.UsageError(
            f"the server needs the 'server' extra ({exc.name} is missing): pip install 'cenotaph[server]'"
        ) from None
    with stopped_by_signals(), open_existing_store(data, auto_purge="background") as store:
        sock = _bind(host, port)
        _configure_logging(quiet)
        app = create_app(
            store,
            api_key_ring(data, store),
            backup_dir=backup_dir.resolve() if backup_dir else None,
            console=not no_console,
            secure_cookies=not insecure_cookies,
        )
        config = uvicorn.Config(app, access_log=False, log_config=None, lifespan="on", server_header=False)
        address = sock.getsockname()
        shown = f"[{address[0]}]" if sock.family == socket.AF_INET6 else address[0]
        click.echo(json.dumps({"listening": f"http://{shown}:{address[1]}"}))
        sys.stdout.flush()
        # uvicorn handles SIGTERM/SIGINT (stop accepting, finish in-flight requests, lifespan
        # shutdown) and then raises the signal again with the handlers it found: ours exits 0
        uvicorn.Server(config).run(sockets=[sock])


def _bind(host: str, port: int) -> socket.socket:
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say so, and without it
        # a response's headers and body wait on the client's delayed ACK (~40 ms a request)
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)  # a client may connect as soon as the address is printed (uvicorn's backlog)
    except OSError as exc:
        raise click.BadParameter(
            f"cannot listen on {host}:{port} ({exc.strerror}); pick another --host or --port",
            param_hint="--port",
        ) from None
    sock.set_inheritable(True)
    return sock


def _configure_logging(quiet: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    for name, level in (("cenotaph.http", logging.INFO), ("uvicorn.error", logging.INFO)):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(logging.WARNING if quiet else level)
