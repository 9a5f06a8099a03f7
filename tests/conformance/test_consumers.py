"""Downstream consumers: what they took is recorded, a compliance forget of it asks them to delete
it, and the request is verified (and certified) only once each of them acknowledged."""

from __future__ import annotations

import json

import pytest
from tests.kit.stores import StoreFactory

import cenotaph
from cenotaph.errors import ErasureNotProvableError, InvalidValueError, NotFoundError, StorageError
from cenotaph.model import Layer

ALICE = "tenant:acme/user:alice"
BOB = "tenant:acme/user:bob"


def test_an_erasure_waits_for_the_consumer_that_took_its_record(store_factory: StoreFactory) -> None:
    store = store_factory(purge=True)
    record = store.write(ALICE, "diet", "vegetarian")
    summarizer = store.register_consumer("summarizer")
    took = summarizer.read(ALICE, "diet")
    assert took is not None and took.value == "vegetarian"

    request = store.forget(ALICE, "diet")
    status = request.status()
    assert status.state != "verified"
    assert status.layers[Layer.CONSUMERS].state == "pending"
    assert any("summarizer" in gap and summarizer.id in gap for gap in status.gaps)
    with pytest.raises(ErasureNotProvableError, match="summarizer"):
        store.confirm_erasure(request.id)
    with pytest.raises(ErasureNotProvableError):
        store.attest(request.id)

    (event,) = summarizer.events()
    assert event.request_id == request.id
    assert [(r.record_id, r.version) for r in event.records] == [(record.id, record.version)]
    assert event.deadline > event.created_at

    summarizer.acknowledge(request.id, evidence={"method": "dropped from the summary index", "deleted": 1})
    assert summarizer.events() == []
    assert store.confirm_erasure(request.id).state == "verified"
    certificate = store.attest(request.id)
    cenotaph.verify_certificate(certificate.to_json(), store.public_key)
    (listed,) = certificate["consumers"]
    assert listed["id"] == summarizer.id and listed["name"] == "summarizer"
    assert listed["acknowledged_at"] is not None
    assert listed["evidence"] == {"method": "dropped from the summary index", "deleted": 1}


def test_a_consumer_that_took_nothing_affected_is_not_asked(store_factory: StoreFactory) -> None:
    store = store_factory(purge=True)
    store.write(ALICE, "diet", "vegetarian")
    store.write(BOB, "diet", "vegan")
    builder = store.register_consumer("dataset-builder")
    assert builder.read(BOB, "diet") is not None

    request = store.forget(ALICE, "diet")
    assert builder.events() == []
    status = store.confirm_erasure(request.id)
    assert status.state == "verified" and Layer.CONSUMERS not in status.layers
    assert store.attest(request.id)["consumers"] == []


def test_an_export_is_taken_and_a_subject_forget_asks_for_it(store_factory: StoreFactory) -> None:
    store = store_factory(purge=True)
    first = store.write(ALICE, "diet", "vegetarian", subjects=["idp:alice"])
    second = store.write(BOB, "note", "met alice", subjects=["idp:alice"])
    cache = store.register_consumer("cache", ack_days=7)
    export = cache.export_subject("idp:alice")
    assert len(export["records"]) == 2

    request = store.forget_subject("idp:alice")
    (event,) = cache.events()
    assert {r.record_id for r in event.records} == {first.id, second.id}
    assert (event.deadline - event.created_at).days == 7
    cache.acknowledge(request.id)
    assert store.confirm_erasure(request.id).layers[Layer.CONSUMERS].state == "done"


def test_acknowledging_another_consumers_request_is_refused(store_factory: StoreFactory) -> None:
    store = store_factory(purge=True)
    store.write(ALICE, "diet", "vegetarian")
    store.write(BOB, "diet", "vegan")
    one = store.register_consumer("one")
    other = store.register_consumer("other")
    one.read(ALICE, "diet")
    other.read(BOB, "diet")
    request = store.forget(ALICE, "diet")

    with pytest.raises(NotFoundError, match="no event"):
        other.acknowledge(request.id, evidence={"deleted": 1})
    with pytest.raises(ErasureNotProvableError):
        store.confirm_erasure(request.id)  # other's word does not count for one
    (event,) = one.events(pending_only=True)
    assert event.pending


@pytest.mark.parametrize(
    "evidence",
    [
        ["a list"],
        {"nested": {"a": 1}},
        {"text": "x" * 600},
        {"n": float("nan")},
        {str(i): i for i in range(40)},
    ],
)
def test_evidence_is_a_small_flat_json_object(store_factory: StoreFactory, evidence: object) -> None:
    store = store_factory(purge=True)
    store.write(ALICE, "diet", "vegetarian")
    consumer = store.register_consumer("summarizer")
    consumer.read(ALICE, "diet")
    request = store.forget(ALICE, "diet")
    with pytest.raises(InvalidValueError, match="evidence"):
        consumer.acknowledge(request.id, evidence=evidence)  # type: ignore[arg-type]
    assert consumer.events()[0].pending


def test_names_are_checked_labels(store_factory: StoreFactory) -> None:
    store = store_factory()
    first, second = store.register_consumer("summarizer"), store.register_consumer("summarizer")
    assert first.id != second.id  # a name labels; the id tells them apart
    assert {c.id for c in store.consumers()} == {first.id, second.id}
    for bad in ("", " padded", "x" * 65, "line\nbreak", 3):
        with pytest.raises(InvalidValueError, match="consumer name"):
            store.register_consumer(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidValueError, match="ack_days"):
        store.register_consumer("late", ack_days=0)
    with pytest.raises(NotFoundError):
        store.consumer("cn_nope")


def test_events_hold_no_value_and_no_subject_id(store_factory: StoreFactory) -> None:
    store = store_factory(purge=True)
    secret, subject = "allergic-to-peanuts-7f3a", "idp:subject-9c41"
    store.write(ALICE, "health", secret, subjects=[subject])
    consumer = store.register_consumer("summarizer")
    consumer.export_subject(subject)
    request = store.forget_subject(subject)
    consumer.acknowledge(request.id, evidence={"deleted": 1})

    with store_factory.raw(store) as conn:
        rows = [
            *conn.execute("SELECT * FROM consumer_events").fetchall(),
            *conn.execute("SELECT * FROM consumer_takes").fetchall(),
            *conn.execute("SELECT * FROM consumers").fetchall(),
        ]
    text = repr(rows)
    assert request.id in text  # the rows were read
    for needle in (secret, subject, "alice", "acme", "health"):
        assert needle not in text
    for event in consumer.events(pending_only=False):
        dumped = json.dumps(event.to_dict())
        assert secret not in dumped and subject not in dumped
    if store_factory.backend == "sqlite":
        store.close()
        for path in store_factory.files(store):
            data = path.read_bytes()
            assert subject.encode() not in data and secret.encode() not in data, path


def test_a_restart_keeps_consumers_takes_events_and_acknowledgements(store_factory: StoreFactory) -> None:
    store = store_factory(purge=True)
    store.write(ALICE, "diet", "vegetarian")
    store.write(BOB, "diet", "vegan")
    consumer = store.register_consumer("summarizer")
    consumer.read(ALICE, "diet")
    consumer.read(BOB, "diet")
    first = store.forget(ALICE, "diet")

    store = store_factory.reopen(store)
    consumer = store.consumer(consumer.id)
    assert [c.name for c in store.consumers()] == ["summarizer"]
    (event,) = consumer.events()
    assert event.request_id == first.id
    consumer.acknowledge(first.id, evidence={"deleted": 1})
    second = store.forget(BOB, "diet")  # what it took before the restart is still known

    store = store_factory.reopen(store)
    consumer = store.consumer(consumer.id)
    assert [e.request_id for e in consumer.events()] == [second.id]
    acknowledged = [e for e in consumer.events(pending_only=False) if not e.pending]
    assert [(e.request_id, dict(e.evidence or {})) for e in acknowledged] == [(first.id, {"deleted": 1})]
    assert store.confirm_erasure(first.id).state == "verified"


def test_a_take_recorded_after_the_forget_still_asks_the_consumer(store_factory: StoreFactory) -> None:
    """A consumer read a record, and a forget of it committed before the take was recorded (the
    read and the record of it are two transactions): recording it asks the consumer then."""
    store = store_factory(purge=True)
    store.write(ALICE, "diet", "vegetarian")
    store.write(BOB, "diet", "vegan")
    consumer = store.register_consumer("summarizer")
    early = store.read(ALICE, "diet")
    kept = store.read(BOB, "diet")
    assert early is not None and kept is not None
    request = store.forget(ALICE, "diet")
    operational = store.forget(BOB, "diet", mode="operational")
    assert consumer.events() == []

    consumer.took([early, kept])
    (event,) = consumer.events()
    assert event.request_id == request.id and operational.id != request.id
    assert [r.record_id for r in event.records] == [early.id]
    consumer.took([early])  # again: no second event
    assert len(consumer.events()) == 1


@pytest.mark.parametrize("how", ["forged", "evidence edited"])
def test_an_acknowledgement_the_audit_log_does_not_hold_mints_no_certificate(
    store_factory: StoreFactory, how: str
) -> None:
    """Someone who can write the database sets an event acknowledged, or rewrites what a consumer
    said: the certificate is refused, since every acknowledgement is in the audit log too."""
    store = store_factory(purge=True)
    store.write(ALICE, "diet", "vegetarian")
    consumer = store.register_consumer("summarizer")
    consumer.read(ALICE, "diet")
    request = store.forget(ALICE, "diet")
    if how == "evidence edited":
        consumer.acknowledge(request.id, evidence={"deleted": 1})
    store.close()

    with store_factory.raw(store) as conn:
        conn.execute(
            "UPDATE consumer_events SET acknowledged_at = ?, evidence = ? WHERE request_id = ?",
            ("2026-01-01T00:00:00+00:00", '{"deleted":2}', request.id),
        )
    store = store_factory.reopen(store)
    assert store.erasure(request.id).status().state == "verified"  # the row says so...
    with pytest.raises(StorageError, match="acknowledgement of this request is not in the audit log"):
        store.attest(request.id)  # ...but the log does not


def test_a_chunked_forget_asks_for_every_record_taken(
    store_factory: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A forget large enough to be applied in chunks still names every record taken in its
    event: the event is made with the plan, which lists them all."""
    from cenotaph.erasure.purge import chunks
    from cenotaph.ledger import journal

    monkeypatch.setattr(journal, "CHUNK_RECORDS", 3)
    reached: list[str] = []
    monkeypatch.setattr(chunks, "fault_point", reached.append)
    store = store_factory(purge=True)
    written = [store.write(ALICE, f"note{i}", f"text {i}") for i in range(10)]
    consumer = store.register_consumer("summarizer")
    taken = consumer.list(ALICE)
    assert len(taken) == 10
    request = store.forget(ALICE)
    assert len(reached) > 1  # it was applied in chunks
    (event,) = consumer.events()
    assert event.request_id == request.id
    assert sorted(r.record_id for r in event.records) == sorted(r.id for r in written)
    consumer.acknowledge(request.id, evidence={"deleted": 10})
    assert store.confirm_erasure(request.id).state == "verified"
