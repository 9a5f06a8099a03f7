"""``AsyncCenotaphStore``: the LangGraph store for async applications, built as LangGraph builds
its own async stores (``AsyncSqliteStore``, ``AsyncPostgresStore``).

>>> import asyncio, tempfile
>>> from cenotaph.integrations.langgraph import AsyncCenotaphStore
>>> async def main() -> object:
...     async with AsyncCenotaphStore(tempfile.mkdtemp()) as store:
...         await store.aput(("memories", "alice"), "diet", {"text": "vegetarian"})
...         return (await store.aget(("memories", "alice"), "diet")).value
>>> asyncio.run(main())
{'text': 'vegetarian'}

It is LangGraph's ``AsyncBatchedBaseStore`` over :class:`BaseCenotaphStore`: the calls made in
one tick of its event loop are queued and run as one batch (embeddings awaited, the storage work
in a worker thread), one batch at a time in the order they were made; its sync methods raise
``asyncio.InvalidStateError`` inside its loop (they would block it) and run on the loop from any
other thread; ``sweep_ttl``, ``start_ttl_sweeper`` and ``stop_ttl_sweeper`` are coroutines and the
sweeper is an asyncio task. Where it departs from LangGraph's batcher, a delete is never lost:

- LangGraph's batcher keeps only the last write of an item per tick, so ``adelete`` then ``aput``
  of one item would drop the erasure of what the item held before the tick, while ``adelete``
  returned. Here a put made after the tick's last delete of its item runs in a second batch: the
  delete runs first, then the put re-creates the item (as :class:`CenotaphStore`'s puts do after
  its own delete returned). Puts made before the delete never land, as in LangGraph.
- A batch whose puts are refused (``ForgottenItemError``, ``StaleItemError``) writes none of them
  (its deletes are done); its other calls, only batched together, then run again one by one, so
  each caller gets its own answer rather than its neighbour's refusal.
- Reads and puts inside ``with store.lineage():`` run at once in the caller's task, which holds
  the lineage block (the batch runner's task cannot see it).
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from langgraph.store.base import (
    NOT_PROVIDED,
    BaseStore,
    IndexConfig,
    Item,
    NotProvided,
    Op,
    PutOp,
    Result,
    SearchItem,
    TTLConfig,
)
from langgraph.store.base.batch import AsyncBatchedBaseStore

from cenotaph import ErasureRequest, Store

from ._store import DEFAULT_SCOPE, BaseCenotaphStore, ForgottenItemError, StaleItemError, in_lineage

__all__ = ["AsyncCenotaphStore"]

_Queued = tuple["asyncio.Future[Result]", Op]


class AsyncCenotaphStore(AsyncBatchedBaseStore, BaseCenotaphStore):
    """A LangGraph store over cenotaph for async applications; create it inside the event loop
    that will use it (``async with AsyncCenotaphStore(path) as store:``). The arguments are
    :class:`CenotaphStore`'s (see :class:`BaseCenotaphStore`)."""

    supports_ttl = True  # BaseStore's False comes first in this class's MRO

    def __init__(
        self,
        path_or_store: str | os.PathLike[str] | Store,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        scope: str = DEFAULT_SCOPE,
        users: Sequence[Sequence[str]] = (),
        delete_mode: str = "operational",
        owner: str | None = None,
    ) -> None:
        super().__init__()
        self._open(
            path_or_store,
            index=index,
            ttl=ttl,
            scope=scope,
            users=users,
            delete_mode=delete_mode,
            owner=owner,
        )
        self._sweeper: asyncio.Task[None] | None = None
        self._sweeper_stop = asyncio.Event()

    def _ensure_task(self) -> None:
        # LangGraph's batcher, with the two rules of the module docstring (see _run_batches)
        if self._task is None or self._task.done():
            self._task = self._loop.create_task(_run_batches(self._aqueue, weakref.ref(self)))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        plan = self._plan(ops)
        vectors = await self._aembed(plan)
        queries = await self._aqueries(plan)
        return await asyncio.to_thread(self._execute, plan, vectors, queries)

    # -- lineage blocks run in the caller's task ----------------------------------------
    async def aget(
        self, namespace: tuple[str, ...], key: str, *, refresh_ttl: bool | None = None
    ) -> Item | None:
        if in_lineage():
            return await BaseStore.aget(self, namespace, key, refresh_ttl=refresh_ttl)
        return await super().aget(namespace, key, refresh_ttl=refresh_ttl)

    async def asearch(
        self,
        namespace_prefix: tuple[str, ...],
        /,
        *,
        query: str | None = None,
        filter: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool | None = None,
    ) -> list[SearchItem]:
        options: dict[str, Any] = {
            "query": query,
            "filter": filter,
            "limit": limit,
            "offset": offset,
            "refresh_ttl": refresh_ttl,
        }
        if in_lineage():
            return await BaseStore.asearch(self, namespace_prefix, **options)
        return await super().asearch(namespace_prefix, **options)

    async def aput(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Mapping[str, Any],
        index: Literal[False] | list[str] | None = None,
        *,
        ttl: float | NotProvided | None = NOT_PROVIDED,
    ) -> None:
        if in_lineage():
            return await BaseStore.aput(self, namespace, key, value, index, ttl=ttl)
        return await super().aput(namespace, key, value, index, ttl=ttl)

    # -- blocking calls: not inside the loop ---------------------------------------------
    def _refuse_in_loop(self, method: str, instead: str) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            return
        if running is self._loop:
            raise asyncio.InvalidStateError(
                f"AsyncCenotaphStore.{method}() would block its event loop; use "
                f"`await store.{instead}(...)` there"
            )

    def forget_user(self, user_id: str, *, reason: str | None = None) -> ErasureRequest:
        self._refuse_in_loop("forget_user", "aforget_user")
        return super().forget_user(user_id, reason=reason)

    def close(self) -> None:
        """Close from outside the event loop (inside it: ``await store.aclose()``)."""
        self._refuse_in_loop("close", "aclose")
        self._close_store()

    async def aclose(self) -> None:
        """Stop the TTL sweeper; if this adapter opened the cenotaph store, close it (its worker
        gets a last pass for the purges still due)."""
        try:
            await self.stop_ttl_sweeper()
        finally:
            await asyncio.to_thread(self._close_store)

    async def __aenter__(self) -> AsyncCenotaphStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- TTL sweeping (an asyncio task, as AsyncSqliteStore) ----------------------------
    async def sweep_ttl(self) -> int:
        """Remove expired items now; returns how many rows the purge reclaimed. Expired items are
        never returned even before a sweep."""
        return await asyncio.to_thread(self._sweep)

    async def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> asyncio.Task[None]:
        """Sweep every ``sweep_interval_minutes`` (default: the TTLConfig's, else 5) in a task of
        this loop; returns it (awaiting it waits for :meth:`stop_ttl_sweeper`; a failed sweep
        ends it with the sweep's error)."""
        if not self.ttl_config:
            return asyncio.create_task(asyncio.sleep(0))
        if self._sweeper is not None and not self._sweeper.done():
            return self._sweeper
        interval = float(sweep_interval_minutes or self.ttl_config.get("sweep_interval_minutes") or 5) * 60
        self._sweeper_stop.clear()

        async def loop() -> None:
            while True:
                try:
                    await asyncio.wait_for(self._sweeper_stop.wait(), timeout=interval)
                    return
                except TimeoutError:
                    await self.sweep_ttl()

        self._sweeper = asyncio.create_task(loop(), name="cenotaph-langgraph-ttl")
        return self._sweeper

    async def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper; False if it was still sweeping after ``timeout`` seconds. A sweep
        that failed (ending the sweeper) is raised here."""
        if self._sweeper is None:
            return True
        self._sweeper_stop.set()
        done, _ = await asyncio.wait([self._sweeper], timeout=timeout)
        if not done:
            return False
        sweeper, self._sweeper = self._sweeper, None
        error = None if sweeper.cancelled() else sweeper.exception()
        if error is not None:
            raise error
        return True


async def _run_batches(queue: asyncio.Queue[_Queued], store: weakref.ref[AsyncCenotaphStore]) -> None:
    """LangGraph's batch runner (``langgraph.store.base.batch._run``): take every call queued in
    one tick and run them as one batch, identical reads once; but a put made after the tick's
    last delete of its item waits for a second batch, and a refused batch's calls run again one
    by one."""
    while item := await queue.get():
        queued = [item]
        while not queue.empty():
            queued.append(queue.get_nowait())
        failed: BaseException | None = None
        for batch in _batches([(f, op) for f, op in queued if not f.done()]):
            if failed is not None:  # one tick fails whole, as in LangGraph: no put after a failed delete
                _settle(batch, failed)
                continue
            target = store()
            if target is None:
                return
            try:
                failed = await _run(target, batch)
            finally:
                del target  # no strong reference while waiting for the next call


def _batches(queued: list[_Queued]) -> list[list[_Queued]]:
    """The tick's calls in order, but a put of an item after the tick's last delete of it goes
    to a second batch: within a batch the last write of an item wins (puts before a delete never
    land, which is what deleting them means), so the delete must run before that put."""
    last_delete = {
        _slot(op): i for i, (_, op) in enumerate(queued) if isinstance(op, PutOp) and op.value is None
    }
    first: list[_Queued] = []
    after: list[_Queued] = []
    for i, (fut, op) in enumerate(queued):
        late = isinstance(op, PutOp) and op.value is not None and last_delete.get(_slot(op), i) < i
        (after if late else first).append((fut, op))
    return [b for b in (first, after) if b]


def _slot(op: PutOp) -> tuple[tuple[str, ...], str]:
    return tuple(op.namespace), op.key


def _distinct(ops: list[Op]) -> tuple[list[Op], list[int]]:
    """The batch with each read once (as LangGraph's ``_dedupe_ops``), and where each call's
    result is in it; writes stay as they are (the batch's own plan folds them)."""
    distinct: list[Op] = []
    where: list[int] = []
    seen: dict[Op, int] = {}
    for op in ops:
        try:
            index = len(distinct) if isinstance(op, PutOp) else seen.setdefault(op, len(distinct))
        except TypeError:  # a read holding a dict (a filter) is not hashable: run it as it is
            index = len(distinct)
        if index == len(distinct):
            distinct.append(op)
        where.append(index)
    return distinct, where


async def _run(store: AsyncCenotaphStore, batch: list[_Queued]) -> BaseException | None:
    """Run ``batch``, settle its calls; returns what failed the whole batch, if anything did."""
    ops, where = _distinct([op for _, op in batch])
    try:
        results = await store.abatch(ops)
    except (ForgottenItemError, StaleItemError) as exc:
        if len(batch) == 1:
            _settle(batch, exc)
        else:
            await _run_apart(store, batch)
        return None
    except Exception as exc:  # noqa: BLE001 - every caller of the batch gets it
        _settle(batch, exc)
        return exc
    for (fut, _), index in zip(batch, where, strict=True):
        if not fut.done():
            fut.set_result(results[index])
    return None


async def _run_apart(store: AsyncCenotaphStore, batch: list[_Queued]) -> None:
    """A batch whose puts (one ``write_many``) were refused whole, after its reads and deletes
    ran: the deletes are done, and so are puts a later write of the same item replaced; every
    other call runs again alone, so each caller gets its own answer."""
    last = {_slot(op): i for i, (_, op) in enumerate(batch) if isinstance(op, PutOp)}
    for i, (fut, op) in enumerate(batch):
        if isinstance(op, PutOp) and (op.value is None or last[_slot(op)] != i):
            if not fut.done():
                fut.set_result(None)
        else:
            await _run(store, [(fut, op)])


def _settle(batch: list[_Queued], error: BaseException) -> None:
    for fut, _ in batch:
        if not fut.done():
            fut.set_exception(error)
