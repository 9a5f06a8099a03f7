"""The consumers' rules that need no store: when an event is overdue, what evidence may be."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cenotaph.consumers.feed import MAX_EVIDENCE_BYTES, ConsumerEvent, check_evidence
from cenotaph.errors import InvalidValueError

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def _event(deadline: datetime, acknowledged_at: datetime | None = None) -> ConsumerEvent:
    return ConsumerEvent("cn_1", "er_1", (), NOW - timedelta(days=30), deadline, acknowledged_at)


def test_an_event_is_overdue_once_its_deadline_passed_unanswered() -> None:
    assert _event(NOW - timedelta(seconds=1)).overdue(NOW)
    assert not _event(NOW + timedelta(seconds=1)).overdue(NOW)
    assert not _event(NOW - timedelta(days=1), acknowledged_at=NOW).overdue(NOW)  # answered late: not owing


def test_evidence_is_stored_as_canonical_json_within_its_bound() -> None:
    assert check_evidence({"b": 1, "a": None, "ok": True, "x": 1.5}) == '{"a":null,"b":1,"ok":true,"x":1.5}'
    big = {f"f{i}": "é" * 200 for i in range(12)}  # within the field limits, over the byte bound
    with pytest.raises(InvalidValueError, match=str(MAX_EVIDENCE_BYTES)):
        check_evidence(big)
    with pytest.raises(InvalidValueError, match="evidence"):
        check_evidence({"": 1})
