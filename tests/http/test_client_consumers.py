"""cenotaph.Client's consumer methods: register a consumer, read with its key, and answer its
erasure events, with the library's types and errors."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from tests.http._support import Tenant, World

import cenotaph
from cenotaph.errors import AccessDeniedError, InvalidValueError, NotFoundError


@contextmanager
def _client(world: World, transport: str, secret: str) -> Iterator[cenotaph.Client]:
    http = world.client(transport) if transport == "asgi" else None
    with cenotaph.Client(world.base_url(transport), secret, http_client=http) as client:
        yield client


def test_a_consumer_reads_is_asked_and_acknowledges_through_the_client(
    remote: cenotaph.Client, world: World, tenant: Tenant, transport: str
) -> None:
    made = remote.register_consumer("summarizer", ack_days=7)
    assert isinstance(made.info, cenotaph.ConsumerInfo) and made.info.ack_days == 7
    assert made.info.name == "summarizer" and made.id == made.info.id
    assert made.api_key not in repr(made)
    assert remote.consumers() == [made.info]
    written = remote.write(tenant.alice, "diet", "vegetarian")
    with _client(world, transport, made.api_key) as consumer:
        assert consumer.read(tenant.alice, "diet") == written
        assert consumer.consumer_events(made.id) == []
        request = remote.forget(tenant.alice, "diet")
        (event,) = consumer.consumer_events(made.id, wait=5)
        assert isinstance(event, cenotaph.ConsumerEvent) and event.pending
        assert event.request_id == request.id and event.consumer_id == made.id
        assert event.records == (cenotaph.TakenRecord(written.id, written.version),)
        assert remote.consumer_events(made.id) == [event]  # the operator of its tenant sees it too
        with pytest.raises(AccessDeniedError):
            consumer.consumers()  # an operator's route
        done = consumer.acknowledge(made.id, request.id, evidence={"deleted": 1})
    assert done.request_id == request.id and not done.pending and done.evidence == {"deleted": 1}
    assert remote.consumer_events(made.id) == []
    assert remote.consumer_events(made.id, pending_only=False) == [done]
    assert request.wait(30).state == "verified"
    cert = remote.attest(request.id)
    cenotaph.verify_certificate(cert, world.store.public_key)
    assert [(c["id"], c["evidence"]) for c in cert["consumers"]] == [(made.id, {"deleted": 1})]


def test_a_consumer_key_may_not_answer_for_another_consumer(
    remote: cenotaph.Client, world: World, tenant: Tenant, transport: str
) -> None:
    reader, bystander = remote.register_consumer("reader"), remote.register_consumer("bystander")
    remote.write(tenant.alice, "k", "v")
    with _client(world, transport, reader.api_key) as as_reader:
        assert as_reader.read(tenant.alice, "k") is not None
    request = remote.forget(tenant.alice, "k")
    with _client(world, transport, bystander.api_key) as as_bystander:
        assert as_bystander.consumer_events(bystander.id) == []
        with pytest.raises(NotFoundError):
            as_bystander.acknowledge(bystander.id, request.id)  # it took none of the records
        with pytest.raises(NotFoundError):
            as_bystander.acknowledge(reader.id, request.id)  # nor may it answer as the reader
        with pytest.raises(NotFoundError):
            as_bystander.consumer_events(reader.id)
    with pytest.raises(NotFoundError):
        remote.acknowledge(reader.id, request.id)  # an operator does not answer for a consumer
    assert [e.request_id for e in remote.consumer_events(reader.id)] == [request.id]


def test_bad_arguments_are_refused_before_they_are_sent(remote: cenotaph.Client) -> None:
    for wait in (-1, 61, True, "5"):
        with pytest.raises(InvalidValueError, match="wait"):
            remote.consumer_events("cn_00", wait=wait)  # type: ignore[arg-type]
    for consumer_id in ("", "../x", "cn_0/events", 7):
        with pytest.raises(InvalidValueError, match="consumer_id"):
            remote.consumer_events(consumer_id)  # type: ignore[arg-type]
    with pytest.raises(InvalidValueError, match="name"):
        remote.register_consumer(" padded ")


@pytest.mark.parametrize("transport", ["uvicorn"])
def test_a_long_poll_outlasts_a_shorter_read_timeout(world: World, tenant: Tenant, transport: str) -> None:
    with _client(world, transport, tenant.operator) as operator:
        made = operator.register_consumer("patient")
    with cenotaph.Client(world.base_url(transport), made.api_key, timeout=0.5) as consumer:
        assert consumer.consumer_events(made.id, wait=2) == []  # held 2 s by the server, not cut at 0.5 s
