"""The seeds' scenario, end to end through the public API (seeds/000: "the forget had succeeded; the
erasure had not"), and its two secondary observations.

A session note (medical) lives in ``tenant:acme/user:alice/session:s1``; an agent session reads it and
writes "User mentioned a cardiology appointment" into the user scope; the session scope is forgotten for
compliance. Here the summary must go with it (W3, W6), nothing may resurrect it (W1, W3), the access
request must not surface it (R2), and the certificate must verify (S6).
"""

from __future__ import annotations

import contextlib
import json

import pytest
from tests.kit.checks import present
from tests.kit.stores import StoreFactory

import cenotaph
from cenotaph.errors import CertificateError, DerivedFromForgottenError, ForgottenError

from ._helpers import assert_unreadable, visible_ids

USER = "tenant:acme/user:alice"
SESSION = f"{USER}/session:s1"
NOTE = "Medical note: cardiology appointment on Tuesday, bring the ECG results"
SUMMARY = "User mentioned a cardiology appointment"
QUERY = "cardiology appointment"


def test_seeds_scenario_end_to_end(store_factory: StoreFactory) -> None:
    store = store_factory(purge=True)  # the default: every compliance forget purges and verifies
    note = store.write(SESSION, "medical", NOTE, metadata={"kind": "medical"})
    diet = store.write(USER, "diet", "vegetarian")  # alice's own, unrelated memory: must survive
    bob = store.write("tenant:acme/user:bob", "summary", "Bob mentioned a cardiology conference")

    # The agent's session reads the note and writes a summary into the user scope (W6).
    with store.session(SESSION) as agent:
        assert present(agent.read(SESSION, "medical")).id == note.id
        summary = agent.write(USER, "summary", SUMMARY)
    assert summary.derived_from == (note.id,)
    assert USER in summary.subjects
    # A second agent session reads the note now and will try to write its summary late.
    stack = contextlib.ExitStack()
    late = stack.enter_context(store.session(SESSION))
    assert [h.record.id for h in late.search(SESSION, QUERY, fallthrough=False)] == [note.id]

    # Positive controls: before the forget everything is visible, and the access request shows it.
    assert visible_ids(store, USER, QUERY) == {note.id, summary.id}
    assert "cardiology" in json.dumps(store.export_subject(USER))

    request = store.forget(SESSION, reason="data-subject deletion request")  # compliance by default
    assert request.mode == "compliance"

    # The summary is gone with the note: read / get / list / search / session / export are all clean.
    for record in (note, summary):
        assert_unreadable(store, record, QUERY)
    assert store.read(SESSION, "summary") is None  # would fall through from the session to the user
    assert store.read(USER, "summary") is None
    assert store.list(SESSION) == []
    assert [r.id for r in store.list(USER, include_descendants=True)] == [diet.id]
    assert visible_ids(store, USER, QUERY) == set()
    assert present(store.read(USER, "diet")).id == diet.id
    assert visible_ids(store, "tenant:acme", QUERY) == {bob.id}  # another user's record is untouched

    # A late summary derived from the note is refused, explicitly and through the session that read it.
    with pytest.raises(DerivedFromForgottenError) as explicit:
        store.write(USER, "summary", SUMMARY, derived_from=[note.id])
    assert explicit.value.version == request.version
    with pytest.raises(DerivedFromForgottenError):
        late.write(USER, "summary", SUMMARY)
    # ... and so is a plain rewrite of the note into the forgotten session (or anything under it).
    for scope, key in ((SESSION, "medical"), (SESSION, "other"), (f"{SESSION}/doc:d1", "medical")):
        with pytest.raises(ForgottenError) as plain:
            store.write(scope, key, NOTE)
        assert not isinstance(plain.value, DerivedFromForgottenError)
        assert plain.value.version == request.version
    assert store.read(USER, "summary") is None
    stack.close()

    # The access request contains neither the note nor the summary text.
    export = store.export_subject(USER)
    dumped = json.dumps(export)
    assert "cardiology" not in dumped.lower()
    assert note.id not in dumped and summary.id not in dumped
    assert [r["id"] for r in export["records"]] == [diet.id]
    assert export["derived_records"] == []

    # The certificate for the forget verifies, and holds nothing of what was forgotten.
    assert store.confirm_erasure(request.id).state == "verified"
    certificate = store.attest(request.id)
    verified = cenotaph.verify_certificate(certificate.to_json(), store.public_key)
    assert verified["request_id"] == request.id
    assert certificate["target_kind"] == "scope"
    assert certificate["mode"] == "compliance"
    assert certificate["forget_version"] == request.version
    assert certificate["layers"]["lineage"]["evidence"]["cascaded"] == 2  # the note and its summary
    text = certificate.to_json().lower()
    for word in ("cardiology", "alice", "acme", "s1", "medical", note.id, summary.id):
        assert word not in text.replace(certificate["request_id"], "")
    tampered = certificate.to_dict()
    tampered["forget_version"] += 1
    with pytest.raises(CertificateError):
        cenotaph.verify_certificate(tampered, store.public_key)

    # After a restart nothing comes back either.
    store = store_factory.reopen(store)
    for record in (note, summary):
        assert_unreadable(store, record, QUERY)
    assert "cardiology" not in json.dumps(store.export_subject(USER)).lower()
    with pytest.raises(DerivedFromForgottenError):
        store.write(USER, "summary", SUMMARY, derived_from=[note.id])


@pytest.mark.parametrize("mode", ["compliance", "operational"])
def test_forget_on_user_scope_cascades_to_child_sessions(store_factory: StoreFactory, mode: str) -> None:
    """Secondary observation 1: a parent's tombstone covers every child scope (W2)."""
    store = store_factory()
    children = [
        store.write(f"{USER}/session:s1", "note", "session one cardiology note"),
        store.write(f"{USER}/session:s2", "note", "session two cardiology note"),
        store.write(f"{USER}/session:s2/doc:d1", "page", "a cardiology page in a document"),
        store.write(USER, "profile", "alice cardiology profile"),
    ]
    bob = store.write("tenant:acme/user:bob/session:s1", "note", "bob cardiology note")
    tenant = store.write("tenant:acme", "policy", "tenant cardiology policy")

    store.forget(USER, mode=mode)

    for record in children:
        assert_unreadable(store, record, "cardiology")
        assert store.read(record.scope, record.key, fallthrough=False) is None
    assert store.list(USER, include_descendants=True) == []
    assert visible_ids(store, "tenant:acme", "cardiology") == {bob.id, tenant.id}
    # the child session still falls through to the tenant, which was not forgotten
    assert present(store.read(f"{USER}/session:s2", "policy")).id == tenant.id
    with pytest.raises(ForgottenError):
        store.write(f"{USER}/session:s3", "note", "a new session under the forgotten user")
    store = store_factory.reopen(store)
    for record in children:
        assert_unreadable(store, record, "cardiology")


@pytest.mark.parametrize("mode", ["compliance", "operational"])
def test_vector_candidate_of_forgotten_record_is_never_returned(
    store_factory: StoreFactory, mode: str
) -> None:
    """Secondary observation 2: an index candidate of a forgotten record is re-checked at the final
    materialization step, and a "reranker" that fetches candidates by id gets nothing (R2)."""
    store = store_factory()
    note = store.write(SESSION, "medical", NOTE)
    other = store.write(SESSION, "todo", "book a dentist appointment")
    hits = store.search(SESSION, QUERY)
    candidate_ids = [h.record.id for h in hits]  # what a reranker would hold on to
    assert candidate_ids[0] == note.id

    store.forget(SESSION, "medical", mode=mode)

    assert note.id in candidate_ids and store.get(note.id) is None
    assert store.get(other.id) is not None
    with store.session(SESSION) as session:
        assert session.get(note.id) is None
        assert session.read_set == ()
    assert note.id not in visible_ids(store, SESSION, QUERY)

    # Simulate an index that missed the removal (the seeds' stale ANN structure): put the forgotten
    # record's vector back as a candidate. It must still never be returned, nor be fetchable.
    vector = store._search.embed_records([note])
    store._search.add([note.id], vector, [store._tokens.scope(cenotaph.Scope.parse(note.scope))])
    assert note.id in store._search._vectors  # the stale candidate really is in the index
    hits = store.search(SESSION, QUERY, k=1000, include_descendants=True)
    assert note.id not in {h.record.id for h in hits}
    assert [h.record.id for h in hits] == [other.id]
    assert store.get(note.id) is None
    assert_unreadable(store, note, QUERY)


def test_an_undeclared_copy_is_reached_by_the_subject_forget_only(store_factory: StoreFactory) -> None:
    """The limit the README states: a summary written with a plain write, no ``derived_from`` and
    no session, carries no lineage. Forgetting the session scope does not reach it (nothing links
    them), and the certificate covers what it names -- the session's records. Forgetting the
    subject does reach it, through the user subject every record in the user's scopes carries."""
    store = store_factory(purge=True)
    note = store.write(SESSION, "note", NOTE)
    assert store.read(SESSION, "note") == note
    summary = store.write(USER, "summary", SUMMARY)  # the agent copied it by hand
    assert summary.derived_from == () and USER in summary.subjects

    request = store.forget(SESSION, mode="compliance")
    assert request.status().state == "verified"
    assert_unreadable(store, note, QUERY)
    assert store.read(USER, "summary") == summary  # undeclared: not covered by the scope forget

    subject_request = store.forget_subject(USER)
    assert subject_request.status().state == "verified"
    assert_unreadable(store, summary, QUERY)
    assert store.export_subject(USER)["records"] == []
