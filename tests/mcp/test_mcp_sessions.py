"""Each MCP connection is a store session (W6, W3), and forgets dominate writes (W1).

The seeds' scenario through MCP: read a session note, write a summary to the user scope, forget
the session with memory_forget -> the summary is gone through every tool and the erasure
verifies. Its other order (forget first, then write the summary) is refused. A connection may
write again what it forgot itself; anyone else's forget, a subject erasure and a stale base are
refused, saying which.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.kit.checks import present
from tests.mcp.mcp_kit import SESSION, USER, find_canary, memory_client

import cenotaph

pytestmark = pytest.mark.anyio

NOTE = "cardiology appointment Tuesday"
SUMMARY = "User mentioned a cardiology appointment"


async def test_the_seeds_scenario_the_summary_dies_with_the_session(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with cenotaph.open(data, auto_purge="sync") as store:  # memory_forget answers verified
        store.write(SESSION, "note", NOTE)
        async with memory_client(store) as tools:
            note = await tools.ok("memory_read", key="note")
            summary = await tools.ok("memory_write", key="summary", value=SUMMARY, scope=USER)
            assert note["record"]["id"] in summary["record"]["derived_from"]  # the session recorded it
            forgotten = await tools.ok("memory_forget", scope=SESSION)
            assert forgotten["state"] == "verified" and forgotten["verified"] and forgotten["gaps"] == []
            # gone through every tool
            assert (await tools.ok("memory_read", key="summary", scope=USER))["found"] is False
            assert (await tools.ok("memory_read", key="note"))["found"] is False
            assert (await tools.ok("memory_search", query="cardiology appointment"))["hits"] == []
            assert (await tools.ok("memory_search", query="cardiology appointment", scope=USER))["hits"] == []
            assert (await tools.ok("memory_list", scope=USER, include_descendants=True))["records"] == []
            status = await tools.ok("erasure_status", request_id=forgotten["request_id"])
            assert status["verified"] and status["layers"]["lineage"]["state"] == "done"
            assert status["layers"]["scan"]["evidence"]["matches"] == 0
        # and through the store: the erasure is provable and attested
        assert store.read(USER, "summary") is None
        assert store.export_subject(USER)["derived_records"] == []
        store.confirm_erasure(forgotten["request_id"])
        certificate = store.attest(forgotten["request_id"])
        cenotaph.verify_certificate(certificate.to_json(), store.public_key)
    assert find_canary(data, "cardiology") == []


async def test_a_summary_written_after_the_forget_is_refused(mcp_store: cenotaph.Store) -> None:
    """The seeds' observed order: forget(session) returned, then the agent wrote the summary."""
    mcp_store.write(SESSION, "note", NOTE)
    async with memory_client(mcp_store) as tools:
        await tools.ok("memory_read", key="note")
        await tools.ok("memory_forget", scope=SESSION)
        text = await tools.refused("memory_write", key="summary", value=SUMMARY, scope=USER)
        assert "read a memory that has since been forgotten" in text and "cardiology" not in text
        # a second summary elsewhere in the session is refused too: the taint is the connection's
        await tools.refused("memory_write", key="other", value=SUMMARY, scope=f"{USER}/session:s2")
    assert mcp_store.read(USER, "summary") is None
    async with memory_client(mcp_store) as fresh:  # a new connection has read nothing
        await fresh.ok("memory_write", key="summary", value="a new conversation", scope=USER)


async def test_a_note_forgotten_by_someone_else_taints_the_connection_that_read_it(
    mcp_store: cenotaph.Store,
) -> None:
    mcp_store.write(SESSION, "note", NOTE)
    async with memory_client(mcp_store) as tools:
        await tools.ok("memory_read", key="note")
        mcp_store.forget(SESSION, "note")  # an operator, meanwhile
        text = await tools.refused("memory_write", key="summary", value=SUMMARY, scope=USER)
        assert "read a memory that has since been forgotten" in text


async def test_a_connection_may_write_again_what_it_forgot(mcp_store: cenotaph.Store) -> None:
    async with memory_client(mcp_store) as tools:
        await tools.ok("memory_write", key="diet", value="vegetarian")
        await tools.ok("memory_forget", key="diet")
        again = await tools.ok("memory_write", key="diet", value="vegan")
        assert again["reauthorized"] is True
        later = await tools.ok("memory_write", key="diet", value="pescetarian")
        assert later["reauthorized"] is False  # the token's lift holds until the next forget
    assert present(mcp_store.read(SESSION, "diet")).value == "pescetarian"


async def test_a_rewrite_after_reading_and_forgetting_replaces_rather_than_derives(
    mcp_store: cenotaph.Store,
) -> None:
    async with memory_client(mcp_store) as tools:
        await tools.ok("memory_write", key="diet", value="vegetarian")
        old = await tools.ok("memory_read", key="diet")
        await tools.ok("memory_forget", key="diet")
        again = await tools.ok("memory_write", key="diet", value="vegan")
        assert again["reauthorized"] and old["record"]["id"] not in again["record"]["derived_from"]
        # the same old copy still taints everything else the connection writes
        assert "since been forgotten" in await tools.refused("memory_write", key="meal", value="salad")


async def test_a_whole_scope_forgotten_by_the_connection_reopens_key_by_key(
    mcp_store: cenotaph.Store,
) -> None:
    async with memory_client(mcp_store) as tools:
        await tools.ok("memory_write", key="a", value=1)
        await tools.ok("memory_write", key="b", value=2, scope=f"{SESSION}/doc:d")
        await tools.ok("memory_forget")  # the whole session scope
        assert (await tools.ok("memory_write", key="a", value=3))["reauthorized"]
        assert (await tools.ok("memory_write", key="b", value=4, scope=f"{SESSION}/doc:d"))["reauthorized"]
        assert (await tools.ok("memory_write", key="new", value=5))["reauthorized"]
    assert present(mcp_store.read(SESSION, "a")).value == 3


async def test_another_connections_forget_is_refused(mcp_store: cenotaph.Store) -> None:
    async with memory_client(mcp_store) as first:
        await first.ok("memory_write", key="diet", value="vegetarian")
        await first.ok("memory_forget", key="diet")
    async with memory_client(mcp_store) as second:
        text = await second.refused("memory_write", key="diet", value="vegan")
        assert "another connection or an operator" in text and "reauthorization from an operator" in text
    assert mcp_store.read(SESSION, "diet") is None


async def test_an_operators_forget_is_refused(mcp_store: cenotaph.Store) -> None:
    mcp_store.write(SESSION, "diet", "vegetarian")
    async with memory_client(mcp_store) as tools:
        mcp_store.forget(SESSION, "diet")
        assert "another connection or an operator" in await tools.refused(
            "memory_write", key="diet", value="v"
        )


async def test_a_subject_erasure_is_refused_even_after_the_connections_own_forget(
    mcp_store: cenotaph.Store,
) -> None:
    async with memory_client(mcp_store) as tools:
        await tools.ok("memory_write", key="diet", value="vegetarian")
        mcp_store.forget_subject(USER)
        await tools.ok("memory_forget", key="diet")  # newer than the subject erasure
        text = await tools.refused("memory_write", key="diet", value="vegan")
        assert "subject erasure" in text
        assert "subject erasure" in await tools.refused("memory_write", key="other", value=1)
    assert mcp_store.read(SESSION, "diet") is None


async def test_an_own_forget_cannot_launder_an_older_foreign_forget(mcp_store: cenotaph.Store) -> None:
    """An operator forgot the user's scope; the agent forgets the key itself, then writes it: a
    token would lift every older forget of the target, so the server must refuse."""
    mcp_store.write(SESSION, "diet", "vegetarian")
    operator = mcp_store.forget(USER)
    async with memory_client(mcp_store) as tools:
        await tools.ok("memory_forget", key="diet")
        text = await tools.refused("memory_write", key="diet", value="resurrected")
        assert "another connection or an operator" in text
    assert mcp_store.read(SESSION, "diet") is None
    assert operator.version in mcp_store.forgets_blocking(SESSION, "diet")  # still in force


async def test_forgetting_an_operators_forgotten_key_again_does_not_reopen_it(
    mcp_store: cenotaph.Store,
) -> None:
    """The same target forgotten twice: first by an operator, then by the connection. The newest
    forget is the connection's, the older one still blocks, and it is not the connection's."""
    mcp_store.write(SESSION, "diet", "vegetarian")
    operator = mcp_store.forget(SESSION, "diet")
    async with memory_client(mcp_store) as tools:
        await tools.ok("memory_forget", key="diet")  # the same key, again
        text = await tools.refused("memory_write", key="diet", value="resurrected")
        assert "another connection or an operator" in text
    assert mcp_store.read(SESSION, "diet") is None
    assert operator.version in mcp_store.forgets_blocking(SESSION, "diet")


async def test_a_forget_after_the_connections_own_reauthorization_still_wins(
    mcp_store: cenotaph.Store,
) -> None:
    async with memory_client(mcp_store) as tools:
        await tools.ok("memory_write", key="diet", value="vegetarian")
        await tools.ok("memory_forget", key="diet")
        await tools.ok("memory_write", key="diet", value="vegan")
        mcp_store.forget(SESSION, "diet")  # someone else, after the rewrite
        assert "another connection or an operator" in await tools.refused(
            "memory_write", key="diet", value="x"
        )


async def test_a_stale_base_is_refused_even_for_the_connections_own_rewrite(
    mcp_store: cenotaph.Store,
) -> None:
    async with memory_client(mcp_store) as tools:
        first = (await tools.ok("memory_write", key="diet", value="vegetarian"))["record"]
        await tools.ok("memory_forget", key="diet")
        text = await tools.refused("memory_write", key="diet", value="vegan", base_version=first["version"])
        assert "predates a forget" in text
        assert (await tools.ok("memory_read", key="diet"))["found"] is False


async def test_two_connections_have_separate_read_sets(mcp_store: cenotaph.Store) -> None:
    mcp_store.write(SESSION, "note", NOTE)
    async with memory_client(mcp_store) as reader, memory_client(mcp_store) as writer:
        await reader.ok("memory_read", key="note")
        unrelated = await writer.ok("memory_write", key="weather", value="sunny", scope=USER)
        derived = await reader.ok("memory_write", key="summary", value=SUMMARY, scope=USER)
    assert unrelated["record"]["derived_from"] == [] and derived["record"]["derived_from"]
    mcp_store.forget(SESSION)
    assert mcp_store.read(USER, "weather") is not None and mcp_store.read(USER, "summary") is None


async def test_what_the_agent_searched_and_listed_is_recorded_too(mcp_store: cenotaph.Store) -> None:
    mcp_store.write(SESSION, "note", NOTE)
    mcp_store.write(f"{USER}/session:s2", "other", "tennis on sundays")
    async with memory_client(mcp_store) as tools:
        await tools.ok("memory_search", query="cardiology")
        await tools.ok("memory_list", scope=f"{USER}/session:s2")
        summary = await tools.ok("memory_write", key="summary", value=SUMMARY, scope=USER)
    assert len(summary["record"]["derived_from"]) == 2
    mcp_store.forget(f"{USER}/session:s2")
    assert mcp_store.read(USER, "summary") is None
