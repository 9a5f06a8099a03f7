"""``cenotaph consumers add|list|events``: the store's downstream consumers and what they owe."""

from __future__ import annotations

from datetime import UTC, datetime

import click

from .api_keys import key_ring
from .options import DataLocation, data_option, open_existing_store
from .output import emit, table_option

__all__ = ["consumers"]


@click.group("consumers")
def consumers() -> None:
    """Register downstream consumers (a summarizer, a dataset builder, a cache) and list the
    erasures each must carry out.

    What a consumer reads or exports through its handle or its API key is recorded (record ids and
    versions, never values); a compliance forget of a record it took asks it to delete it, and the
    erasure verifies only once it acknowledged.
    """


@consumers.command()
@click.argument("name")
@click.option(
    "--ack-days", type=int, default=30, show_default=True, help="Days it has to acknowledge an erasure."
)
@click.option("--tenant", metavar="T", help="Also create its API key (role consumer) in tenant T.")
@click.option("--prefix", metavar="SCOPE", help="The scope prefix its key reaches (default tenant:T).")
@data_option
@table_option
def add(
    name: str, ack_days: int, tenant: str | None, prefix: str | None, data: DataLocation, table: bool
) -> None:
    """Register consumer NAME. With --tenant, prints its API key once: store it now."""
    if prefix is not None and tenant is None:
        raise click.BadParameter("--prefix needs --tenant (the key's tenant)", param_hint="--prefix")
    with open_existing_store(data) as store:
        consumer = store.register_consumer(name, ack_days=ack_days)
    doc = consumer.info.to_dict()
    if tenant is not None:
        key, secret = key_ring(data).create(
            tenant=tenant, prefix=prefix, role="consumer", consumer=consumer.id
        )
        doc |= {"api_key": secret, "api_key_id": key.id}
    emit(doc, table=table)


@consumers.command("list")
@data_option
@table_option
def list_consumers(data: DataLocation, table: bool) -> None:
    """List every consumer, with how many erasure events it has pending and overdue."""
    now = datetime.now(UTC)
    with open_existing_store(data) as store:
        rows = []
        for consumer in store.consumers():
            pending = consumer.events()
            rows.append(
                {
                    **consumer.info.to_dict(),
                    "pending": len(pending),
                    "overdue": sum(1 for e in pending if e.overdue(now)),
                }
            )
    emit(rows, table=table)


@consumers.command()
@click.argument("consumer_id")
@click.option("--all", "everything", is_flag=True, help="Acknowledged events too.")
@data_option
@table_option
def events(consumer_id: str, everything: bool, data: DataLocation, table: bool) -> None:
    """List CONSUMER_ID's erasure events: what to delete (record ids, versions) and by when."""
    with open_existing_store(data) as store:
        found = store.consumer(consumer_id).events(pending_only=not everything)
    emit([e.to_dict() for e in found], table=table)
