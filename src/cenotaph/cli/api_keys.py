"""``cenotaph api-keys create|list|revoke``: the bearer keys of the HTTP server (and MCP)."""

from __future__ import annotations

import click

from cenotaph.operations import holds_store
from cenotaph.service.apikeys import ApiKeyRing

from .options import DataLocation, api_key_ring, data_option, open_existing_store
from .output import emit, table_option

__all__ = ["api_keys", "key_ring"]


def key_ring(data: DataLocation) -> ApiKeyRing:
    """The store's key ring; a mistyped --data must not grow a key file of its own."""
    if data.url is not None:
        with open_existing_store(data):  # the schema holds a store, and the keyring is its own
            pass
    elif not holds_store(data.path or data.api_keys_home()):
        raise click.BadParameter(
            f"no cenotaph store in {data.given!r}; create one with `cenotaph init --data {data.given}`",
            param_hint="--data",
        )
    return api_key_ring(data)


@click.group("api-keys")
def api_keys() -> None:
    """Create, list and revoke API keys (each bound to a tenant, a scope prefix and a role).

    The secret is printed once, by `create`, and kept only as a keyed hash. A revoked key is
    refused from the server's next request on. They live in the data directory's api-keys/; a
    PostgreSQL store's, in api-keys/ of its keyring directory (CENOTAPH_KEYRING).
    """


@api_keys.command()
@data_option
@click.option("--tenant", required=True, metavar="T", help="The tenant id (scopes under tenant:T).")
@click.option("--prefix", metavar="SCOPE", help="The scope prefix the key reaches (default tenant:T).")
@click.option(
    "--role",
    type=click.Choice(["agent", "operator"]),
    default="agent",
    show_default=True,
    help="agent: read/write/search/forget; operator: also subject erasure, certificates, export, backups.",
)
@table_option
def create(data: DataLocation, tenant: str, prefix: str | None, role: str, table: bool) -> None:
    """Create a key. Prints {"id", "key", ...}: store "key" now, it is never shown again."""
    ring = key_ring(data)
    key, secret = ring.create(tenant=tenant, prefix=prefix, role=role)
    emit({"id": key.id, "key": secret, **{k: v for k, v in key.to_dict().items() if k != "id"}}, table=table)


@api_keys.command("list")
@data_option
@table_option
def list_keys(data: DataLocation, table: bool) -> None:
    """List every key (never its secret), revoked ones included."""
    ring = key_ring(data)
    emit([k.to_dict() for k in ring.list()], table=table)


@api_keys.command()
@click.argument("key_id")
@data_option
def revoke(key_id: str, data: DataLocation) -> None:
    """Revoke KEY_ID: the server refuses it from its next request on."""
    ring = key_ring(data)
    ring.revoke(key_id)
    emit({"id": key_id, "revoked": True}, table=False)
