"""AsyncCenotaphStore: LangGraph's async API batched per event-loop tick as LangGraph's async stores
batch it, without ever folding a delete away; each caller's own answer when a batch's puts are
refused; lineage blocks; sync calls from inside and outside the loop; inside a compiled graph."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore
from tests.integrations import bag_of_words

from cenotaph.errors import StorageError
from cenotaph.faults import FAIL_ENV
from cenotaph.integrations.langgraph import AsyncCenotaphStore, CenotaphStore, ForgottenItemError

USERS = [("memories", "{user_id}")]
DIMS = 64
ITEMS = "app:langgraph/ns:docs/items:_"


def embed(texts: Sequence[str]) -> list[list[float]]:
    return bag_of_words.embed(texts, DIMS)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[AsyncCenotaphStore]:
    index = {"dims": DIMS, "embed": embed, "fields": ["text"]}
    async with AsyncCenotaphStore(tmp_path / "data", index=index, users=USERS) as s:  # type: ignore[arg-type]
        yield s


async def test_the_calls_of_one_tick_run_as_one_batch_in_order(store: AsyncCenotaphStore) -> None:
    await asyncio.gather(*(store.aput(("docs",), f"k{i}", {"text": f"word{i}"}) for i in range(20)))
    found = await asyncio.gather(*(store.aget(("docs",), f"k{i}") for i in range(20)))
    assert [item.value["text"] for item in found if item is not None] == [f"word{i}" for i in range(20)]
    hits = await store.asearch(("docs",), query="word7")
    assert hits[0].key == "k7"
    assert await store.alist_namespaces() == [("docs",)]


async def test_a_delete_then_a_put_in_one_tick_erases_and_then_recreates(tmp_path: Path) -> None:
    """LangGraph's batcher keeps only the put: the delete would return having erased nothing."""
    async with AsyncCenotaphStore(tmp_path / "erasing", delete_mode="compliance") as store:
        await _delete_then_put(store)


async def _delete_then_put(store: AsyncCenotaphStore) -> None:
    await store.aput(("docs",), "plan", {"text": "the old plan"})
    before = len(store.cenotaph.erasures())
    await asyncio.gather(store.adelete(("docs",), "plan"), store.aput(("docs",), "plan", {"text": "new"}))
    (request,) = store.cenotaph.erasures()[before:]  # the delete ran: one compliance forget
    assert request.mode == "compliance"
    assert (await store.aget(("docs",), "plan")).value == {"text": "new"}  # type: ignore[union-attr]
    assert request.wait(timeout=60).state == "verified"


async def test_a_tick_whose_delete_failed_runs_none_of_its_later_puts(
    store: AsyncCenotaphStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.aput(("docs",), "plan", {"text": "the old plan"})
    monkeypatch.setenv(FAIL_ENV, "forget.planned")  # the forget fails before it commits anything
    results = await asyncio.gather(
        store.adelete(("docs",), "plan"),
        store.aput(("docs",), "plan", {"text": "new"}),
        return_exceptions=True,
    )
    assert all(isinstance(r, StorageError) for r in results), results
    monkeypatch.delenv(FAIL_ENV)
    assert (await store.aget(("docs",), "plan")).value == {"text": "the old plan"}  # type: ignore[union-attr]


async def test_a_put_then_a_delete_in_one_tick_leaves_nothing(store: AsyncCenotaphStore) -> None:
    await asyncio.gather(
        store.aput(("docs",), "draft", {"text": "never kept"}), store.adelete(("docs",), "draft")
    )
    assert await store.aget(("docs",), "draft") is None


async def test_a_refused_put_does_not_fail_the_calls_batched_with_it(store: AsyncCenotaphStore) -> None:
    await store.aput(("memories", "alice"), "diet", {"text": "vegetarian"})
    await store.aforget_user("alice")
    results = await asyncio.gather(
        store.aput(("memories", "alice"), "diet", {"text": "vegetarian"}),
        store.aput(("memories", "bob"), "diet", {"text": "omnivore"}),
        store.aget(("memories", "bob"), "diet"),
        store.adelete(("memories", "bob"), "old"),
        return_exceptions=True,
    )
    assert isinstance(results[0], ForgottenItemError) and "data subject" in str(results[0])
    assert results[1] is None and results[3] is None
    assert (await store.aget(("memories", "bob"), "diet")).value == {"text": "omnivore"}  # type: ignore[union-attr]
    assert await store.aget(("memories", "alice"), "diet") is None


async def test_lineage_blocks_record_what_the_task_read(store: AsyncCenotaphStore) -> None:
    await store.aput(("memories", "alice"), "diet", {"text": "vegetarian"})
    with store.lineage():
        read = await store.aget(("memories", "alice"), "diet")
        assert read is not None
        await store.aput(("digest",), "alice", {"text": f"summary: {read.value['text']}"})
    await store.aforget_user("alice")  # the digest derives from her item: erased with it
    assert await store.aget(("digest",), "alice") is None


async def test_sync_calls_raise_inside_the_loop_and_work_from_other_threads(
    store: AsyncCenotaphStore,
) -> None:
    with pytest.raises(asyncio.InvalidStateError, match="aput"):
        store.put(("docs",), "k", {"text": "v"})
    with pytest.raises(asyncio.InvalidStateError, match="aforget_user"):
        store.forget_user("alice")
    with pytest.raises(asyncio.InvalidStateError, match="aclose"):
        store.close()
    await asyncio.to_thread(store.put, ("docs",), "k", {"text": "from a thread"})
    assert (await store.aget(("docs",), "k")).value == {"text": "from a thread"}  # type: ignore[union-attr]


async def test_it_is_a_langgraph_base_store_but_not_the_sync_one(store: AsyncCenotaphStore) -> None:
    assert isinstance(store, BaseStore) and not isinstance(store, CenotaphStore)
    assert store.supports_ttl


class State(TypedDict):
    user: str
    summary: str


async def summarize(state: State, config: RunnableConfig, *, store: BaseStore) -> dict[str, str]:
    assert isinstance(store, AsyncCenotaphStore)
    with store.lineage():
        memories = await store.asearch(("memories", state["user"]), limit=50)
        summary = "; ".join(sorted(m.value["text"] for m in memories))
        await store.aput(("team-digest",), state["user"], {"text": summary})
    return {"summary": summary}


async def test_a_compiled_graph_runs_on_it_and_the_users_erasure_reaches_its_summary(
    store: AsyncCenotaphStore,
) -> None:
    for i, text in enumerate(["likes tea", "allergic to nuts"]):
        await store.aput(("memories", "alice"), f"m{i}", {"text": text})
    graph = StateGraph(State)
    graph.add_node("summarize", summarize)
    graph.add_edge(START, "summarize")
    graph.add_edge("summarize", END)
    result = await graph.compile(store=store).ainvoke({"user": "alice", "summary": ""})
    assert result["summary"] == "allergic to nuts; likes tea"
    assert await store.aget(("team-digest",), "alice") is not None
    request = await store.aforget_user("alice")
    assert request.status().state == "verified"
    assert await store.aget(("team-digest",), "alice") is None
    assert await store.asearch(("memories", "alice")) == []


async def test_a_failed_background_purge_is_raised_by_the_next_call_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with AsyncCenotaphStore(tmp_path / "data", delete_mode="compliance") as store:
        await store.aput(("docs",), "kept", {"text": "stays"})
        await store.aput(("docs",), "gone", {"text": "erased"})
        monkeypatch.setenv(FAIL_ENV, "purge.rows")
        await store.adelete(("docs",), "gone")
        deadline = time.monotonic() + 30
        while True:  # poll the next calls until one raises the failed purge
            try:
                await store.aget(("docs",), "kept")
            except StorageError as exc:
                assert "background purge failed" in str(exc)
                break
            assert time.monotonic() < deadline, "no call raised the failed purge"
            await asyncio.sleep(0.01)  # a poll interval; the condition decides
        assert (await store.aget(("docs",), "kept")).value == {"text": "stays"}  # type: ignore[union-attr]
        monkeypatch.delenv(FAIL_ENV)
        assert store.cenotaph.erasures()[-1].wait(timeout=60).state == "verified"


async def test_a_failed_sweep_ends_the_sweeper_and_is_raised_when_it_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with AsyncCenotaphStore(tmp_path / "data", ttl={"default_ttl": 1}) as store:
        monkeypatch.setenv(FAIL_ENV, "purge.rows")
        sweeper = await store.start_ttl_sweeper(sweep_interval_minutes=0.001)
        assert isinstance(sweeper, asyncio.Task)
        with pytest.raises(StorageError, match="injected storage failure"):
            await asyncio.wait_for(sweeper, timeout=30)
        with pytest.raises(StorageError, match="injected storage failure"):
            await store.stop_ttl_sweeper()
        monkeypatch.delenv(FAIL_ENV)
        assert await store.stop_ttl_sweeper() is True
        assert await store.sweep_ttl() == 0
