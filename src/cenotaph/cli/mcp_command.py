"""``cenotaph mcp``: serve the store to an MCP client (stdio by default, or streamable HTTP).

Nothing is printed on stdout: over stdio it carries the protocol. The root-of-trust warning and
the HTTP address go to stderr. The store runs its background erasure worker, so a compliance
forget goes on to ``verified`` with nobody calling purge. SIGTERM or Ctrl-C stops taking
requests, answers those in flight, stops the worker at a step boundary and closes the store;
the command then exits 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

import cenotaph

from .options import DataLocation, api_key_ring, data_option, open_existing_store, root_of_trust_warning
from .stopping import stopped_by_signals

if TYPE_CHECKING:
    from cenotaph.service.apikeys import ApiKeyRing
    from cenotaph.service.mcp.confinement import Confinement

__all__ = ["mcp", "require_mcp_extra"]

PROFILES = ("memory", "knowledge-graph")


def require_mcp_extra() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise click.ClickException(
            "the MCP server needs the mcp extra: pip install 'cenotaph[mcp]'"
        ) from None


@click.command("mcp")
@click.option(
    "--scope",
    metavar="SCOPE",
    help="Where the agent's memory lives, e.g. tenant:acme/user:alice/session:s1 (default: --prefix).",
)
@click.option(
    "--prefix",
    metavar="SCOPE",
    help="The widest scope the tools may touch: --scope or one of its ancestors (default: --scope). "
    "The knowledge-graph profile keeps its graph here.",
)
@click.option(
    "--profile",
    type=click.Choice(PROFILES),
    default="memory",
    show_default=True,
    help="memory: memory_write/read/search/list/forget, erasure_status and erasure_certificate; "
    "knowledge-graph: the reference MCP memory server's nine tools.",
)
@click.option(
    "--transport",
    type=click.Choice(["stdio", "streamable-http"]),
    default="stdio",
    show_default=True,
    help="stdio for a desktop client that starts the server; streamable-http to listen on --host/--port.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Loopback address to listen on (HTTP).")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8000,
    show_default=True,
    help="Port to listen on (HTTP); 0 picks a free one. The URL is printed on stderr.",
)
@click.option(
    "--api-keys/--no-api-keys",
    "api_keys",
    default=None,
    help="Require a bearer API key (`cenotaph api-keys create`) on every HTTP request; each key's prefix "
    "bounds its connection. On by default for a non-loopback --host, which cannot turn it off.",
)
@data_option
def mcp(
    scope: str | None,
    prefix: str | None,
    profile: str,
    transport: str,
    host: str,
    port: int,
    api_keys: bool | None,
    data: DataLocation,
) -> None:
    """Serve the store to an MCP client.

    Every tool is confined to --prefix: a scope outside it answers as if it did not exist. Each
    connection is a session: what the agent writes after reading is recorded as derived from what
    it read. Failures are tool errors with a one-line reason. The store must exist
    (`cenotaph init`).
    """
    require_mcp_extra()
    from cenotaph.service.mcp.confinement import Confinement
    from cenotaph.service.mcp.transport import check_host, is_loopback

    confinement = Confinement.of(scope, prefix)
    keyed = transport == "streamable-http" and (api_keys if api_keys is not None else not is_loopback(host))
    if transport == "streamable-http":
        check_host(host, api_keys=keyed)
    elif api_keys:
        raise click.UsageError("--api-keys applies to --transport streamable-http (stdio has one client)")
    warning = root_of_trust_warning(data)
    if warning:
        click.echo(f"warning: {warning}", err=True)
    with stopped_by_signals(), open_existing_store(data, auto_purge="background") as store:
        ring = api_key_ring(data, store) if keyed else None
        _serve(store, confinement, profile, transport, host, port, ring)


def _serve(
    store: cenotaph.Store,
    confinement: Confinement,
    profile: str,
    transport: str,
    host: str,
    port: int,
    ring: ApiKeyRing | None,
) -> None:
    from cenotaph.service.mcp.knowledge_graph import knowledge_graph_server
    from cenotaph.service.mcp.memory import memory_server
    from cenotaph.service.mcp.transport import SESSION_IDLE_SECONDS, ApiKeyGate, serve_http, serve_stdio

    keyed = ring is not None  # every request needs a key of the store's ring (a PostgreSQL store's too)
    if profile == "knowledge-graph":
        store.auto_purge = "off"  # a delete forgets several targets, then purges and verifies once
        server = knowledge_graph_server(store, confinement, keyed=keyed)
    else:
        server = memory_server(
            store, confinement, session_idle_seconds=SESSION_IDLE_SECONDS + 60, keyed=keyed
        )
    if transport == "stdio":
        serve_stdio(
            server,
            on_stop=lambda in_flight: click.echo(
                f"cenotaph mcp: stopping; answering {in_flight} request(s) in flight, then closing the store",
                err=True,
            ),
        )
        return
    serve_http(
        server,
        host,
        port,
        lambda url: click.echo(
            f"cenotaph mcp: serving {url}" + (" (API keys required)" if ring else ""), err=True
        ),
        gate=None if ring is None else (lambda app: ApiKeyGate(app, ring, confinement)),
    )
