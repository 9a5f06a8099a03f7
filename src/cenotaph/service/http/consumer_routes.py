"""The ``/v1/consumers`` routes: an operator registers downstream consumers (each gets a consumer
key), a consumer fetches its erasure events (long-poll) and acknowledges them.

A consumer belongs to the tenants that hold a key for it: an operator key sees the consumers with
a key in its own tenant, a consumer key only itself; anything else is one 404. The long-poll is
the one ``async`` handler: a held request waits on the event loop, so many consumers waiting do not
take the thread pool the other routes run in.
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query
from fastapi.concurrency import run_in_threadpool

from cenotaph import Consumer

from ..apikeys import ApiKey, Role
from . import schemas as s
from .auth import any_key, operator_key
from .context import Service, service_dependency
from .operations import tenant_consumers
from .problems import NotVisible
from .routes import OPERATOR_READ, READ, WRITE, _known_query_only

__all__ = ["MAX_WAIT_S", "router"]

MAX_WAIT_S = 60  # the longest a long-poll for events is held open
_POLL_S = 0.25  # how often a held long-poll looks for a new event (another process may have made it)

router = APIRouter(prefix="/v1", tags=["consumers"], dependencies=[Depends(_known_query_only)])
SvcDep = Annotated[Service, Depends(service_dependency)]
Operator = Annotated[ApiKey, Depends(operator_key)]
AnyKey = Annotated[ApiKey, Depends(any_key)]
ConsumerId = Annotated[str, Path(max_length=64, description="the id POST /v1/consumers returned")]


def _reach(svc: Service, key: ApiKey, consumer_id: str, *, own_only: bool = False) -> Consumer:
    """The consumer if the key may see it (its own consumer key; unless ``own_only``, an operator
    of a tenant holding a key for it), else 404."""
    mine = key.role == Role.CONSUMER and key.consumer == consumer_id
    theirs = not own_only and key.role == Role.OPERATOR and consumer_id in tenant_consumers(svc, key)
    if not (mine or theirs):
        raise NotVisible
    return svc.store.consumer(consumer_id)


def _out(consumer: Consumer) -> dict[str, Any]:
    return consumer.info.to_dict()


@router.post("/consumers", status_code=201, response_model=s.ConsumerCreated, responses=WRITE)
def register_consumer(body: s.ConsumerIn, svc: SvcDep, key: Operator) -> dict[str, Any]:
    """Register a downstream consumer and mint its key (role ``consumer``, this key's tenant and
    prefix): what it reads or exports with it is recorded, and each compliance erasure of what it
    took waits for its acknowledgement."""
    consumer = svc.store.register_consumer(body.name, ack_days=body.ack_days)
    api_key, secret = svc.keys.create(
        tenant=key.tenant, prefix=key.prefix, role=Role.CONSUMER, consumer=consumer.id
    )
    return {**_out(consumer), "api_key": secret, "api_key_id": api_key.id}


@router.get("/consumers", response_model=s.ConsumerList, responses=OPERATOR_READ)
def list_consumers(svc: SvcDep, key: Operator) -> dict[str, Any]:
    """The consumers of this key's tenant, oldest first."""
    mine = tenant_consumers(svc, key)
    return {"consumers": [_out(c) for c in svc.store.consumers() if c.id in mine]}


@router.get("/consumers/{consumer_id}/events", response_model=s.ConsumerEventList, responses=READ)
async def consumer_events(
    consumer_id: ConsumerId,
    svc: SvcDep,
    key: AnyKey,
    wait: Annotated[
        float,
        Query(ge=0, le=MAX_WAIT_S, description="seconds to hold the request open until an event is pending"),
    ] = 0,
    pending_only: bool = True,
) -> dict[str, Any]:
    """The consumer's erasure events (pending ones unless ``pending_only=false``). With ``wait``,
    an empty answer is held until an event arrives or ``wait`` seconds pass (a long-poll)."""
    # async: a held long-poll waits on the event loop, not in one of the thread pool's threads;
    # each look at the store runs in the pool (the store blocks)
    consumer = await run_in_threadpool(_reach, svc, key, consumer_id)
    deadline = time.monotonic() + wait
    while True:
        events = await run_in_threadpool(consumer.events, pending_only=pending_only)
        if events or time.monotonic() >= deadline:
            return {"events": [e.to_dict() for e in events]}
        await asyncio.sleep(min(_POLL_S, max(0.0, deadline - time.monotonic())))


@router.post("/consumers/{consumer_id}/acknowledgements", response_model=s.ConsumerEventOut, responses=WRITE)
def acknowledge(
    consumer_id: ConsumerId, body: s.AcknowledgementIn, svc: SvcDep, key: AnyKey
) -> dict[str, Any]:
    """The consumer's statement that it deleted what an event named (its own key only). A request
    id that is not among its events is 404."""
    consumer = _reach(svc, key, consumer_id, own_only=True)
    return consumer.acknowledge(body.request_id, body.evidence).to_dict()
