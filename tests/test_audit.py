"""The audit hash chain: edits, deletions, reordering, truncation below the anchor: all detected."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cenotaph.audit.chain import (
    GENESIS,
    AuditEntry,
    chain_entry,
    entry_from_dict,
    entry_to_dict,
    verify_chain,
)
from cenotaph.errors import InvalidValueError, StorageError
from cenotaph.model import canonical_json

EVENTS = ("forget", "purge", "verify", "attest", "backup", "restore", "rotate")
TAMPERED = "the audit log was altered; restore it from a trusted copy and investigate"
START = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def _build(count: int) -> list[AuditEntry]:
    entries: list[AuditEntry] = []
    head = GENESIS
    for seq in range(1, count + 1):
        at = (START + timedelta(seconds=seq)).isoformat()
        fields = {"request_id": f"er_{seq:04d}", "token": f"{seq:064x}", "version": seq * 3, "count": seq % 7}
        entry = chain_entry(head, seq, at, EVENTS[seq % len(EVENTS)], fields)
        entries.append(entry)
        head = entry.head
    return entries


def _rechain(entries: list[AuditEntry], start: int = 0) -> list[AuditEntry]:
    """What someone with write access to the database would do: recompute every head from ``start`` on."""
    out = list(entries[:start])
    head = out[-1].head if out else GENESIS
    for seq, entry in enumerate(entries[start:], start=start + 1):
        out.append(chain_entry(head, seq, entry.at, entry.event, entry.fields))
        head = out[-1].head
    return out


@pytest.fixture(scope="module")
def chain() -> list[AuditEntry]:
    return _build(50)


def _fails_at(entries: list[AuditEntry], seq: int, **anchor: Any) -> None:
    with pytest.raises(StorageError, match=f"audit entry {seq} ") as info:
        verify_chain(entries, **anchor)
    assert TAMPERED in str(info.value)


# --- building and verifying --------------------------------------------------------------------


def test_a_chain_of_50_verifies(chain: list[AuditEntry]) -> None:
    assert verify_chain(chain) == chain[-1].head
    assert verify_chain(iter(chain)) == chain[-1].head  # a one-shot iterable (a cursor) is enough


@pytest.mark.parametrize("anchor_seq", [1, 17, 50])
def test_a_matching_anchor_verifies(chain: list[AuditEntry], anchor_seq: int) -> None:
    assert verify_chain(chain, anchor=chain[anchor_seq - 1].head, anchor_seq=anchor_seq) == chain[-1].head


def test_empty_log_has_the_genesis_head() -> None:
    assert verify_chain([]) == GENESIS
    assert verify_chain([], anchor=GENESIS, anchor_seq=0) == GENESIS


def test_head_is_sha256_of_prev_and_canonical_json(chain: list[AuditEntry]) -> None:
    prev = GENESIS
    for entry in chain:
        body = canonical_json(
            {"seq": entry.seq, "at": entry.at, "event": entry.event, "fields": entry.fields}
        )
        assert entry.prev == prev
        assert entry.head == hashlib.sha256((prev + body).encode("utf-8")).hexdigest()
        prev = entry.head


def test_fields_are_detached_from_the_caller() -> None:
    fields: dict[str, Any] = {"request_id": "er_1", "tokens": ["ab" * 32]}
    entry = chain_entry(GENESIS, 1, START.isoformat(), "forget", fields)
    fields["tokens"].append("cd" * 32)
    assert entry.fields == {"request_id": "er_1", "tokens": ["ab" * 32]}
    verify_chain([entry])


def test_tuples_are_stored_as_lists_so_the_hash_survives_storage() -> None:
    entry = chain_entry(GENESIS, 1, START.isoformat(), "rotate", {"destroyed_epochs": (1, 2)})
    stored = entry_from_dict(json.loads(json.dumps(entry_to_dict(entry))))
    assert stored == entry
    assert verify_chain([stored]) == entry.head


# --- tampering ---------------------------------------------------------------------------------


@pytest.mark.parametrize("index", range(50))
def test_altering_any_entrys_fields_is_detected(chain: list[AuditEntry], index: int) -> None:
    tampered = list(chain)
    fields = dict(chain[index].fields)
    fields["count"] += 1
    tampered[index] = dataclasses.replace(chain[index], fields=fields)
    _fails_at(tampered, index + 1)


@pytest.mark.parametrize(
    "change",
    [{"at": "2025-03-01T12:00:00+00:00"}, {"event": "restore"}, {"head": "f" * 64}, {"prev": "e" * 64}],
)
def test_altering_any_other_attribute_is_detected(chain: list[AuditEntry], change: dict[str, str]) -> None:
    tampered = list(chain)
    tampered[20] = dataclasses.replace(chain[20], **change)  # type: ignore[arg-type]
    _fails_at(tampered, 21)


@pytest.mark.parametrize("index", [0, 10, 30, 48])
def test_rehashing_one_entry_breaks_the_next_link(chain: list[AuditEntry], index: int) -> None:
    entry = chain[index]
    tampered = list(chain)
    tampered[index] = chain_entry(entry.prev, entry.seq, entry.at, entry.event, {**entry.fields, "count": 99})
    _fails_at(tampered, index + 2)


@pytest.mark.parametrize("index", range(49))
def test_deleting_any_entry_is_detected(chain: list[AuditEntry], index: int) -> None:
    _fails_at(chain[:index] + chain[index + 1 :], index + 1)


def test_reordering_is_detected(chain: list[AuditEntry]) -> None:
    swapped = list(chain)
    swapped[10], swapped[11] = swapped[11], swapped[10]
    _fails_at(swapped, 11)
    _fails_at(list(reversed(chain)), 1)


def test_renumbering_after_a_swap_is_detected(chain: list[AuditEntry]) -> None:
    swapped = list(chain)
    swapped[10], swapped[11] = (
        dataclasses.replace(chain[11], seq=11),
        dataclasses.replace(chain[10], seq=12),
    )
    _fails_at(swapped, 11)


@pytest.mark.parametrize("keep", [0, 1, 29, 39])
def test_truncating_below_the_anchor_is_detected(chain: list[AuditEntry], keep: int) -> None:
    with pytest.raises(StorageError, match="truncated") as info:
        verify_chain(chain[:keep], anchor=chain[39].head, anchor_seq=40)
    assert f"audit entry {keep + 1} is missing" in str(info.value)
    assert TAMPERED in str(info.value)


def test_truncating_above_the_anchor_is_not_provable(chain: list[AuditEntry]) -> None:
    # The chain alone cannot tell a truncated tail from a log that was never longer; the next anchor will.
    assert verify_chain(chain[:45], anchor=chain[39].head, anchor_seq=40) == chain[44].head


def test_anchor_mismatch_is_detected(chain: list[AuditEntry]) -> None:
    _fails_at(chain, 10, anchor="ab" * 32, anchor_seq=10)
    _fails_at([], 0, anchor="ab" * 32, anchor_seq=0)


@pytest.mark.parametrize("start", [0, 5, 39])
def test_rewriting_before_the_anchor_is_detected_even_when_rehashed(
    chain: list[AuditEntry], start: int
) -> None:
    tampered = list(chain)
    tampered[start] = dataclasses.replace(chain[start], fields={**chain[start].fields, "count": 99})
    rewritten = _rechain(tampered, start)
    assert verify_chain(rewritten) == rewritten[-1].head  # internally consistent...
    _fails_at(rewritten, 40, anchor=chain[39].head, anchor_seq=40)  # ...but not what the ledger saw


def test_rewriting_after_the_anchor_needs_a_later_anchor(chain: list[AuditEntry]) -> None:
    tampered = list(chain)
    tampered[45] = dataclasses.replace(chain[45], event="purge")
    rewritten = _rechain(tampered, 45)
    assert verify_chain(rewritten, anchor=chain[39].head, anchor_seq=40) == rewritten[-1].head
    _fails_at(rewritten, 50, anchor=chain[49].head, anchor_seq=50)


def test_anchor_needs_both_values(chain: list[AuditEntry]) -> None:
    with pytest.raises(InvalidValueError, match="together"):
        verify_chain(chain, anchor=chain[0].head)
    with pytest.raises(InvalidValueError, match="together"):
        verify_chain(chain, anchor_seq=1)
    with pytest.raises(InvalidValueError, match=">= 0"):
        verify_chain(chain, anchor=GENESIS, anchor_seq=-1)


def test_non_json_fields_in_a_stored_entry_are_reported_as_tampering(chain: list[AuditEntry]) -> None:
    tampered = list(chain)
    tampered[3] = dataclasses.replace(chain[3], fields={"count": float("nan")})
    _fails_at(tampered, 4)


# --- storage form ------------------------------------------------------------------------------


def test_storage_round_trip_through_json(chain: list[AuditEntry]) -> None:
    stored = [json.dumps(entry_to_dict(entry)) for entry in chain]
    loaded = [entry_from_dict(json.loads(text)) for text in stored]
    assert loaded == chain
    assert verify_chain(loaded) == chain[-1].head


@given(
    st.dictionaries(
        st.text(max_size=8),
        st.recursive(
            st.none()
            | st.booleans()
            | st.integers()
            | st.floats(allow_nan=False, allow_infinity=False)
            | st.text(max_size=8),
            lambda inner: (
                st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
            ),
            max_leaves=8,
        ),
        max_size=5,
    )
)
def test_any_json_fields_survive_storage(fields: dict[str, Any]) -> None:
    entry = chain_entry(GENESIS, 1, START.isoformat(), "verify", fields)
    loaded = entry_from_dict(json.loads(json.dumps(entry_to_dict(entry))))
    assert verify_chain([loaded]) == entry.head


def _stored(chain: list[AuditEntry], **change: Any) -> dict[str, Any]:
    return {**entry_to_dict(chain[6]), **change}


@pytest.mark.parametrize(
    "change",
    [{"seq": "7"}, {"seq": True}, {"at": None}, {"event": 3}, {"prev": None}, {"head": b"x"}, {"fields": []}],
)
def test_malformed_stored_entry_is_refused(chain: list[AuditEntry], change: dict[str, Any]) -> None:
    with pytest.raises(StorageError, match="wrong type") as info:
        entry_from_dict(_stored(chain, **change))
    assert TAMPERED in str(info.value)


def test_stored_entry_with_missing_or_extra_keys_is_refused(chain: list[AuditEntry]) -> None:
    missing = _stored(chain)
    del missing["head"]
    with pytest.raises(StorageError, match="audit entry 7 does not have exactly the keys"):
        entry_from_dict(missing)
    with pytest.raises(StorageError, match="exactly the keys"):
        entry_from_dict(_stored(chain, note="x"))


# --- argument checks ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("f" * 63, 1, START.isoformat(), "forget", {}), "prev_head"),
        (("F" * 64, 1, START.isoformat(), "forget", {}), "prev_head"),
        ((GENESIS, 0, START.isoformat(), "forget", {}), "seq"),
        ((GENESIS, True, START.isoformat(), "forget", {}), "seq"),
        ((GENESIS, 1, START.isoformat(), "", {}), "event"),
        ((GENESIS, 1, START.isoformat(), "Forget alice@example.com", {}), "event"),
        ((GENESIS, 1, "2025-03-01T12:00:00", "forget", {}), "UTC"),
        ((GENESIS, 1, "2025-03-01T12:00:00+02:00", "forget", {}), "UTC"),
        ((GENESIS, 1, "yesterday", "forget", {}), "UTC"),
        ((GENESIS, 1, START.isoformat(), "forget", {"n": float("inf")}), "plain JSON"),
        ((GENESIS, 1, START.isoformat(), "forget", {"n": object()}), "plain JSON"),
        ((GENESIS, 1, START.isoformat(), "forget", {"s": "\ud800"}), "plain JSON"),
    ],
)
def test_chain_entry_checks_its_arguments(args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(InvalidValueError, match=message):
        chain_entry(*args)


def test_z_suffix_is_utc() -> None:
    entry = chain_entry(GENESIS, 1, "2025-03-01T12:00:00Z", "forget", {})
    assert verify_chain([entry]) == entry.head
