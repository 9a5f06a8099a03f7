"""Each adapter (LangGraph's CenotaphStore and AsyncCenotaphStore, the memory tool and its async
twin) over a store opened as a user opens it, its background worker on, and nobody calling
``purge()`` or ``wait()``:

- a compliance delete goes on to ``verified`` by itself, its bytes gone from every file;
- an operational delete (the default) is hidden at once and reclaimed by the worker, never
  reported as an erasure, and leaves what was written after the read that preceded it;
- another writer's forget stays in force after the adapter deletes the same item again: the
  adapter's re-create is refused with the framework's own error, and the item stays unreadable.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from anthropic.lib.tools import ToolError

import cenotaph
from cenotaph.integrations.anthropic import AsyncCenotaphMemoryTool, CenotaphMemoryTool
from cenotaph.integrations.langgraph import AsyncCenotaphStore, CenotaphStore, ForgottenItemError

CANARY = "CANARY-5d1e-end-to-end-adapter"
SCOPE = "tenant:acme/user:alice"
ITEMS = "app:langgraph/ns:docs/items:_"
FILES = f"{SCOPE}/memories:root/dir:d/files:_"


def _until(condition: Callable[[], bool], what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)  # a poll interval; the condition decides


def _verified_by_the_worker(store: cenotaph.Store, request_id: str) -> None:
    """Poll the request's status (which never purges) until verified."""
    request = store.erasure(request_id)
    _until(lambda: request.status().state == "verified", "the worker verified the erasure")
    cenotaph.verify_certificate(store.attest(request_id), store.public_key)


def _reclaimed_by_the_worker(store: cenotaph.Store, request_id: str) -> None:
    request = store.erasure(request_id)
    _until(lambda: request.status().layers["reclaim"].state == "done", "the worker reclaimed the rows")
    assert request.status().state == "tombstoned"  # hidden, never reported as an erasure


def _files_with(directory: Path, needle: str) -> list[str]:
    return [str(p) for p in directory.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


@pytest.fixture
def native(tmp_path: Path) -> Iterator[cenotaph.Store]:
    with cenotaph.open(tmp_path / "data") as store:  # the default: the background worker purges
        assert store.purge_mode == "background"
        yield store


# -- LangGraph -----------------------------------------------------------------------------------
def test_langgraph_compliance_delete_verifies_with_nobody_calling_purge(
    native: cenotaph.Store, tmp_path: Path
) -> None:
    store = CenotaphStore(native, delete_mode="compliance")
    store.put(("docs",), "note", {"text": CANARY})
    store.delete(("docs",), "note")
    assert store.get(("docs",), "note") is None
    (request,) = native.erasures()
    _verified_by_the_worker(native, request.id)
    assert _files_with(tmp_path / "data", CANARY) == []


def test_langgraph_operational_delete_is_reclaimed_and_blocks_nothing_after_it(
    native: cenotaph.Store,
) -> None:
    store = CenotaphStore(native)
    store.put(("docs",), "old", {"text": "outdated"})
    with store.lineage():
        assert store.get(("docs",), "old") is not None
        store.put(("docs",), "summary", {"text": "made from old"})
    store.delete(("docs",), "old")
    assert store.get(("docs",), "old") is None
    store.put(("docs",), "later", {"text": "after the delete"})  # no taint block
    (request,) = native.erasures()
    assert request.mode == "operational"
    _reclaimed_by_the_worker(native, request.id)
    assert store.get(("docs",), "summary") is not None  # no derived cascade
    store.put(("docs",), "old", {"text": "re-created"})  # its own delete: re-creating is fine


def test_langgraph_own_delete_does_not_lift_another_writers_forget(native: cenotaph.Store) -> None:
    store = CenotaphStore(native, owner="app-a")
    store.put(("docs",), "plan", {"text": "draft"})
    native.forget(ITEMS, "plan", mode="operational", owner="operator")
    store.delete(("docs",), "plan")  # the adapter's own forget, newer, over the operator's
    with pytest.raises(ForgottenItemError, match="another writer"):
        store.put(("docs",), "plan", {"text": "written over someone's forget"})
    assert native.read(ITEMS, "plan") is None


async def test_langgraph_async_store_keeps_the_same_promises(native: cenotaph.Store, tmp_path: Path) -> None:
    erasing = AsyncCenotaphStore(native, delete_mode="compliance", owner="app-a")
    await erasing.aput(("docs",), "note", {"text": CANARY})
    await erasing.adelete(("docs",), "note")
    assert await erasing.aget(("docs",), "note") is None
    (request,) = native.erasures()
    await asyncio.to_thread(_verified_by_the_worker, native, request.id)
    assert _files_with(tmp_path / "data", CANARY) == []

    await erasing.aput(("docs",), "plan", {"text": "draft"})
    native.forget(ITEMS, "plan", mode="operational", owner="operator")
    await erasing.adelete(("docs",), "plan")
    with pytest.raises(ForgottenItemError, match="another writer"):
        await erasing.aput(("docs",), "plan", {"text": "written over someone's forget"})
    assert native.read(ITEMS, "plan") is None


# -- the memory tool -------------------------------------------------------------------------------
class _Runner:
    """Runs model commands through the sync tool or its async twin, awaited either way."""

    def __init__(self, twin: str, store: cenotaph.Store, **options: Any) -> None:
        self.sync = CenotaphMemoryTool(store, SCOPE, **options) if twin == "sync" else None
        self.aio = AsyncCenotaphMemoryTool(store, SCOPE, **options) if twin == "async" else None

    async def __call__(self, **command: Any) -> Any:
        if self.sync is not None:
            return self.sync.call(command)
        assert self.aio is not None
        return await self.aio.call(command)


TWINS = ["async", "sync"]


@pytest.mark.parametrize("twin", TWINS)
async def test_memory_tool_compliance_delete_verifies_with_nobody_calling_purge(
    native: cenotaph.Store, tmp_path: Path, twin: str
) -> None:
    run = _Runner(twin, native, delete_mode="compliance")
    await run(command="create", path="/memories/health.md", file_text=CANARY)
    assert (
        await run(command="delete", path="/memories/health.md") == "Successfully deleted /memories/health.md"
    )
    (request,) = native.erasures()
    await asyncio.to_thread(_verified_by_the_worker, native, request.id)
    assert _files_with(tmp_path / "data", CANARY) == []


@pytest.mark.parametrize("twin", TWINS)
async def test_memory_tool_view_and_delete_is_housekeeping_that_never_bricks_it(
    native: cenotaph.Store, twin: str
) -> None:
    """A model's view then delete of an outdated file: hidden, reclaimed by the worker, and
    every later create works, while a file written after the view survives the delete."""
    run = _Runner(twin, native)
    await run(command="create", path="/memories/old.md", file_text="outdated")
    assert "old.md" in await run(command="view", path="/memories")
    assert "outdated" in await run(command="view", path="/memories/old.md")
    await run(command="create", path="/memories/later.md", file_text="written after the view")
    await run(command="delete", path="/memories/old.md")
    await run(command="create", path="/memories/new.md", file_text="fine")
    await run(command="create", path="/memories/old.md", file_text="re-created")
    assert "written after the view" in await run(command="view", path="/memories/later.md")
    (request,) = native.erasures()
    _reclaimed_by_the_worker(native, request.id)


@pytest.mark.parametrize("twin", TWINS)
async def test_memory_tool_own_delete_does_not_lift_another_writers_forget(
    native: cenotaph.Store, twin: str
) -> None:
    run = _Runner(twin, native)
    await run(command="create", path="/memories/d/f.md", file_text="someone's")
    await run(command="create", path="/memories/d/g.md", file_text="mine")
    native.forget(FILES, "f.md", mode="operational", owner="operator")
    await run(command="delete", path="/memories/d")  # the tool deletes the file's directory
    with pytest.raises(ToolError, match="another writer"):
        await run(command="create", path="/memories/d/f.md", file_text="written over someone's forget")
    assert native.read(FILES, "f.md") is None
    await run(command="create", path="/memories/d/g.md", file_text="mine again")  # its own: fine
