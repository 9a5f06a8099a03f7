"""``cenotaph consumers add|list|events``: register a consumer, see what it owes after a forget."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.test_cli import _clean_env, assert_one_line_error, data, ok_json, run

import cenotaph

__all__ = ["_clean_env", "data"]  # the fixtures, used by name


def test_add_list_and_events(data: Path) -> None:
    added = ok_json(
        "consumers", "add", "summarizer", "--ack-days", "7", "--tenant", "acme", "--data", str(data)
    )
    assert added["name"] == "summarizer" and added["api_key"].startswith("cnk_")
    with cenotaph.open(data) as store:
        store.write("tenant:acme/user:alice", "diet", "vegetarian")
        assert store.consumer(added["id"]).read("tenant:acme/user:alice", "diet") is not None
        request = store.forget("tenant:acme/user:alice", "diet")
    (listed,) = ok_json("consumers", "list", "--data", str(data))
    assert (listed["id"], listed["ack_days"], listed["pending"], listed["overdue"]) == (added["id"], 7, 1, 0)
    (event,) = ok_json("consumers", "events", added["id"], "--data", str(data))
    assert event["request_id"] == request.id and "vegetarian" not in str(event)
    with cenotaph.open(data) as store:
        store.consumer(added["id"]).acknowledge(request.id, evidence={"deleted": 1})
    assert ok_json("consumers", "events", added["id"], "--data", str(data)) == []
    (acknowledged,) = ok_json("consumers", "events", added["id"], "--all", "--data", str(data))
    assert acknowledged["evidence"] == {"deleted": 1}


@pytest.mark.parametrize(
    ("args", "says", "code"),
    [
        (("add", "x" * 65), "consumer name", 2),
        (("add", "x", "--ack-days", "0"), "ack_days", 2),
        (("events", "cn_nope"), "no consumer", 1),
    ],
)
def test_mistakes_are_one_line(data: Path, args: tuple[str, ...], says: str, code: int) -> None:
    """Bad input: one line saying what to do (no traceback)."""
    ok_json("consumers", "add", "summarizer", "--data", str(data))
    assert says in assert_one_line_error(run("consumers", *args, "--data", str(data)), code)
