"""CenotaphStore as a LangGraph BaseStore: erasure through every path, the put rules after a
delete, subject erasure of a user, the namespace mapping, search/index/TTL semantics."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from langgraph.store.base import InvalidNamespaceError, PutOp
from tests.integrations import bag_of_words
from tests.kit.clock import ManualClock

import cenotaph
from cenotaph.errors import ForgottenError, StaleWriteError, StorageError
from cenotaph.faults import FAIL_ENV
from cenotaph.integrations.langgraph import CenotaphStore, ForgottenItemError, StaleItemError

USERS = [("memories", "{user_id}")]
CANARY = "CANARY-7f3a-cardiology-appointment"
DIMS = 256


def embed(texts: Sequence[str]) -> list[list[float]]:
    return bag_of_words.embed(texts, DIMS)


INDEX = {"dims": DIMS, "embed": embed, "fields": ["text"]}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CenotaphStore]:
    with CenotaphStore(tmp_path / "data", index=INDEX, users=USERS) as s:  # type: ignore[arg-type]
        yield s


@pytest.fixture
def erasing(tmp_path: Path) -> Iterator[CenotaphStore]:
    """A store whose deletes are compliance erasures (``delete_mode="compliance"``)."""
    with CenotaphStore(tmp_path / "data", index=INDEX, users=USERS, delete_mode="compliance") as s:  # type: ignore[arg-type]
        yield s


def files_contain(directory: Path, needle: bytes) -> list[str]:
    return [str(p) for p in directory.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_items_round_trip_with_framework_fields(store: CenotaphStore) -> None:
    store.put(("memories", "alice"), "diet", {"text": "vegetarian since 2019"})
    item = store.get(("memories", "alice"), "diet")
    assert item is not None
    assert (item.namespace, item.key, item.value) == (
        ("memories", "alice"),
        "diet",
        {"text": "vegetarian since 2019"},
    )
    assert item.created_at.tzinfo is not None and item.updated_at == item.created_at
    assert store.list_namespaces() == [("memories", "alice")]
    assert [i.key for i in store.search(("memories",))] == ["diet"]
    # the record lives where the documented mapping says, with the user's subject
    record = store.cenotaph.read("app:langgraph/ns:memories/ns:alice/items:_", "diet", fallthrough=False)
    assert record is not None and "app:langgraph/user:alice" in record.subjects


def test_a_compliance_delete_is_a_verified_erasure_reaching_every_path(
    erasing: CenotaphStore, tmp_path: Path
) -> None:
    store = erasing
    store.put(("memories", "alice"), "note", {"text": f"{CANARY} on tuesday"})
    store.put(("memories", "alice"), "other", {"text": "likes tea"})
    assert store.search(("memories", "alice"), query=CANARY)[0].key == "note"
    store.delete(("memories", "alice"), "note")

    assert store.get(("memories", "alice"), "note") is None
    assert [i.key for i in store.search(("memories",), query=CANARY)] == ["other"]
    assert [i.key for i in store.search((), filter={"text": f"{CANARY} on tuesday"})] == []
    native = store.cenotaph
    assert all(CANARY not in str(r.value) for r in native.list("app:langgraph", include_descendants=True))
    assert all(
        CANARY not in str(h.record.value)
        for h in native.search("app:langgraph", CANARY, include_descendants=True)
    )
    assert CANARY not in str(native.export_subject(store.user_subject("alice")))
    request = max(native.erasures(), key=lambda r: r.version)
    assert request.status().state in ("shredded", "purged", "verified")  # keys gone when delete returned
    assert request.wait(30).state == "verified"  # rows, WAL and the scan follow in the background
    cenotaph.verify_certificate(native.attest(request.id), native.public_key)
    assert files_contain(tmp_path / "data", CANARY.encode()) == []


def test_a_delete_is_housekeeping_by_default(store: CenotaphStore) -> None:
    """The model's delete stops recall of the item, and its rows are reclaimed by the store's
    worker, but it is no erasure: what was made from it stays, and it never reports "verified"."""
    store.put(("memories", "alice"), "note", {"text": "on tuesday"})
    with store.lineage():
        store.get(("memories", "alice"), "note")
        store.put(("memories", "alice"), "summary", {"text": "a tuesday note"})
    store.delete(("memories", "alice"), "note")
    assert store.get(("memories", "alice"), "note") is None
    assert store.search(("memories",), query="tuesday")[0].key == "summary"
    request = max(store.cenotaph.erasures(), key=lambda r: r.version)
    assert request.mode == "operational" and request.target_kind == "key"
    store.put(("memories", "alice"), "later", {"text": "after the delete"})  # no taint block
    with pytest.raises(ValueError, match="delete_mode"):
        CenotaphStore(store.cenotaph, delete_mode="erase")


@pytest.mark.parametrize("mode", ["operational", "compliance"])
def test_a_delete_works_when_a_wider_namespace_holds_the_same_key(tmp_path: Path, mode: str) -> None:
    """Items live in leaf scopes; an item's delete forgets its slot only, so a parent namespace
    holding the same key neither fails it (no ScopeClosureError reaches LangGraph) nor is touched."""
    with CenotaphStore(tmp_path / "data", delete_mode=mode) as store:
        native = store.cenotaph
        native.write("app:langgraph/ns:docs", "k", "a native copy in a scope above both items")
        store.put(("docs",), "k", {"text": "parent"})
        store.put(("docs", "sub"), "k", {"text": "child"})
        store.delete(("docs", "sub"), "k")
        assert store.get(("docs", "sub"), "k") is None
        assert store.get(("docs",), "k").value == {"text": "parent"}  # type: ignore[union-attr]
        store.delete(("docs",), "k")
        assert store.get(("docs",), "k") is None
        assert native.read("app:langgraph/ns:docs", "k", fallthrough=False) is not None


def test_put_after_the_stores_own_delete_recreates_the_item(store: CenotaphStore) -> None:
    for round_ in range(3):
        store.put(("memories", "alice"), "diet", {"text": f"version {round_}"})
        assert store.get(("memories", "alice"), "diet").value == {"text": f"version {round_}"}  # type: ignore[union-attr]
        store.delete(("memories", "alice"), "diet")
        assert store.get(("memories", "alice"), "diet") is None


def test_put_after_a_subject_erasure_is_refused_with_the_frameworks_error(store: CenotaphStore) -> None:
    store.put(("memories", "alice"), "diet", {"text": "vegetarian"})
    store.delete(("memories", "alice"), "diet")  # our own delete first: even then, the erasure wins
    request = store.forget_user("alice")
    assert request.status().state == "verified"
    with pytest.raises(ForgottenItemError, match="data subject") as caught:
        store.put(("memories", "alice"), "diet", {"text": "vegetarian"})
    assert isinstance(caught.value, InvalidNamespaceError) and isinstance(caught.value, ForgottenError)
    assert "naming the subject with store.cenotaph.reauthorize(...)" in str(caught.value)
    with pytest.raises(ForgottenItemError, match="data subject"):  # an item that never existed too
        store.put(("memories", "alice"), "never-written", {"text": "new"})
    assert store.get(("memories", "alice"), "diet") is None
    store.put(("memories", "bob"), "diet", {"text": "omnivore"})  # other users are untouched


def test_put_after_another_writers_forget_is_refused(tmp_path: Path) -> None:
    with cenotaph.open(tmp_path / "data") as native:
        mine, theirs = CenotaphStore(native, owner="app-a"), CenotaphStore(native, owner="app-b")
        mine.put(("docs",), "plan", {"text": "draft"})
        theirs.delete(("docs",), "plan")  # another application sharing the scope
        with pytest.raises(ForgottenItemError, match="forgotten by another writer"):
            mine.put(("docs",), "plan", {"text": "draft again"})
        theirs.put(("docs",), "plan", {"text": "theirs"})  # the deleter itself may re-create it
        assert mine.get(("docs",), "plan").value == {"text": "theirs"}  # type: ignore[union-attr]
        native.forget("app:langgraph/ns:docs/items:_", "plan")  # a native cenotaph forget
        with pytest.raises(ForgottenItemError):
            theirs.put(("docs",), "plan", {"text": "again"})
        theirs.delete(("docs",), "plan")  # its own no-op delete of what someone else forgot ...
        with pytest.raises(ForgottenItemError, match="forgotten by another writer"):
            theirs.put(("docs",), "plan", {"text": "again"})  # ... does not make that forget its own
        assert native.read("app:langgraph/ns:docs/items:_", "plan") is None


def test_a_restarted_store_recreates_what_it_deleted_before(tmp_path: Path) -> None:
    with CenotaphStore(tmp_path / "data") as store:
        store.put(("docs",), "plan", {"text": "draft"})
        store.delete(("docs",), "plan")
    with CenotaphStore(tmp_path / "data") as again:  # the same application, restarted
        again.put(("docs",), "plan", {"text": "draft again"})
        assert again.get(("docs",), "plan").value == {"text": "draft again"}  # type: ignore[union-attr]


def test_a_put_issued_before_the_stores_delete_returned_is_refused_as_stale(tmp_path: Path) -> None:
    embedding, release = threading.Event(), threading.Event()

    def slow_embed(texts: Sequence[str]) -> list[list[float]]:
        embedding.set()  # the put is issued and waits here, before it writes
        release.wait(10)
        return embed(texts)

    with CenotaphStore(tmp_path / "data", index={"dims": DIMS, "embed": slow_embed}) as store:
        store.put(("docs",), "k", {"text": "v1"}, index=False)
        errors: list[BaseException] = []

        def put() -> None:
            try:
                store.put(("docs",), "k", {"text": "v2 in flight"})
            except BaseException as exc:
                errors.append(exc)

        writer = threading.Thread(target=put)
        writer.start()
        assert embedding.wait(10)
        store.delete(("docs",), "k")
        release.set()
        writer.join(10)
        assert len(errors) == 1 and isinstance(errors[0], StaleItemError)
        assert isinstance(errors[0], StaleWriteError) and "stale" in str(errors[0])
        assert store.get(("docs",), "k") is None
        store.put(("docs",), "k", {"text": "v3"}, index=False)  # a put issued after the delete lands
        assert store.get(("docs",), "k").value == {"text": "v3"}  # type: ignore[union-attr]


def test_namespaces_are_separate_scopes_not_nested_ones(store: CenotaphStore) -> None:
    store.put(("a",), "k", {"text": "parent"})
    store.put(("a", "b"), "k", {"text": "child"})
    store.delete(("a", "b"), "k")  # an ancestor namespace holding the key does not block it
    assert store.get(("a",), "k").value == {"text": "parent"}  # type: ignore[union-attr]
    store.put(("a", "b"), "k", {"text": "child again"})
    store.delete(("a",), "k")  # nor does deleting the parent's key reach the child's
    assert store.get(("a", "b"), "k").value == {"text": "child again"}  # type: ignore[union-attr]
    assert {i.namespace for i in store.search(("a",))} == {("a", "b")}


def test_subject_erasure_reaches_everything_the_user_has(tmp_path: Path) -> None:
    native = cenotaph.open(tmp_path / "data")
    store = CenotaphStore(native, users=[("memories", "{user_id}"), ("profiles", "*", "{user_id}")])
    store.put(("memories", "alice"), "m1", {"text": "alice one"})
    store.put(("memories", "alice", "prefs"), "m2", {"text": "alice deeper"})
    store.put(("profiles", "eu", "alice"), "p", {"text": "alice profile"})
    store.put(("memories", "bob"), "m1", {"text": "bob one"})
    native.write("app:langgraph/user:alice/session:s1", "chat", "alice's native cenotaph record")
    request = store.forget_user("alice")
    request.wait(30)
    assert request.status().state == "verified"
    assert [i.value["text"] for i in store.search(())] == ["bob one"]
    assert native.read("app:langgraph/user:alice/session:s1", "chat") is None
    assert native.export_subject("app:langgraph/user:alice")["records"] == []
    native.close()


def test_labels_and_keys_of_any_text_round_trip(store: CenotaphStore) -> None:
    odd = [("a/b", "50%", "tab\there"), ("新しい", "line\nbreak"), ("%2F", "%2e%2e")]
    for i, namespace in enumerate(odd):
        store.put(namespace, f"key/{i}%\n", {"text": "x"})
    store.put(("plain",), "", {"text": "empty key"})
    assert sorted(store.list_namespaces()) == sorted([*odd, ("plain",)])
    for i, namespace in enumerate(odd):
        assert store.get(namespace, f"key/{i}%\n") is not None
    assert store.get(("plain",), "").value == {"text": "empty key"}  # type: ignore[union-attr]
    assert store.get(("a",), "key/0%\n") is None  # "a/b" is one label, not two


def test_invalid_namespaces_are_refused_like_the_frameworks(store: CenotaphStore) -> None:
    for bad in [(), ("a.b",), ("a", ""), ("langgraph", "x")]:
        with pytest.raises(InvalidNamespaceError):
            store.put(bad, "k", {"text": "v"})
    with pytest.raises(InvalidNamespaceError, match="cannot be stored"):
        store.put(("x" * 201,), "k", {"text": "v"})
    with pytest.raises(InvalidNamespaceError, match="cannot be stored"):
        store.put(tuple(f"l{i}" for i in range(31)), "k", {"text": "v"})
    store.batch([PutOp(("langgraph", "x"), "k", {"text": "v"})])  # as LangGraph: past the public API
    assert store.get(("langgraph", "x"), "k") is not None


def test_filters_and_ordering(store: CenotaphStore) -> None:
    docs = {
        "a": {"n": 1, "tag": "x", "deep": {"v": "p"}},
        "b": {"n": 2.5, "tag": "y"},
        "c": {"n": 3, "tag": "x"},
    }
    for key, value in docs.items():
        store.put(("f",), key, value)
        time.sleep(0.002)
    assert [i.key for i in store.search(("f",))] == ["c", "b", "a"]  # newest first, as SqliteStore
    assert [i.key for i in store.search(("f",), filter={"n": {"$gt": 1, "$lte": 3}})] == ["c", "b"]
    assert [i.key for i in store.search(("f",), filter={"tag": {"$ne": "x"}})] == ["b"]
    assert [i.key for i in store.search(("f",), filter={"deep.v": "p"})] == ["a"]
    assert [i.key for i in store.search(("f",), filter={"missing": None})] == ["c", "b", "a"]
    assert [i.key for i in store.search(("f",), limit=1, offset=1)] == ["b"]
    with pytest.raises(ValueError, match="Invalid filter key"):
        store.search(("f",), filter={"a') OR 1=1": "x"})
    with pytest.raises(ValueError, match="Unsupported operator"):
        store.search(("f",), filter={"n": {"$regex": "."}})


def test_semantic_search_fields_paths_and_unindexed_items(tmp_path: Path) -> None:
    with CenotaphStore(
        tmp_path / "d", index={"dims": DIMS, "embed": embed, "fields": ["items[*].text"]}
    ) as store:
        store.put(("s",), "multi", {"items": [{"text": "red apple"}, {"text": "blue car"}]})
        store.put(("s",), "single", {"items": [{"text": "green tree"}]})
        store.put(("s",), "override", {"title": "blue car", "items": []}, index=["title"])
        store.put(("s",), "off", {"items": [{"text": "blue car"}]}, index=False)
        hits = store.search(("s",), query="blue car", limit=10)
        assert [h.key for h in hits[:2]] == sorted(["multi", "override"]) or {h.key for h in hits[:2]} == {
            "multi",
            "override",
        }
        assert hits[0].score == pytest.approx(1.0)
        assert hits[-1].key == "off" and hits[-1].score is None  # unindexed items fill the page last
        assert [h.key for h in store.search(("s",), query="blue car", limit=2)] != ["off"]


def test_async_api_and_async_embedding_function(tmp_path: Path) -> None:
    async def aembed(texts: Sequence[str]) -> list[list[float]]:
        await asyncio.sleep(0)
        return embed(texts)

    async def scenario() -> None:
        with CenotaphStore(
            tmp_path / "d", index={"dims": DIMS, "embed": aembed, "fields": ["text"]}
        ) as store:
            await asyncio.gather(*(store.aput(("a",), f"k{i}", {"text": f"word{i}"}) for i in range(5)))
            hits = await store.asearch(("a",), query="word3")
            assert hits[0].key == "k3"
            await store.adelete(("a",), "k3")
            assert await store.aget(("a",), "k3") is None
            await store.aput(("a",), "k3", {"text": "back"})
            assert (await store.aget(("a",), "k3")).value == {"text": "back"}  # type: ignore[union-attr]
            assert await store.alist_namespaces() == [("a",)]

    asyncio.run(scenario())


def test_expired_items_are_never_returned_even_before_a_sweep(tmp_path: Path, clock: ManualClock) -> None:
    with (
        cenotaph.open(tmp_path / "d", clock=clock) as inner,
        CenotaphStore(inner, ttl={"default_ttl": 1, "refresh_on_read": False}) as store,
    ):
        store.put(("t",), "short", {"v": 1})
        store.put(("t",), "kept", {"v": 2}, ttl=None)
        assert store.get(("t",), "short") is not None
        clock.advance(61)  # the default ttl is in minutes
        assert store.get(("t",), "short") is None
        assert [i.key for i in store.search(("t",))] == ["kept"]
        assert store.sweep_ttl() >= 1


def test_reads_of_names_too_long_to_store_find_nothing(store: CenotaphStore) -> None:
    assert store.get(("x" * 300,), "k") is None
    assert store.get(("a",), "k" * 600) is None
    assert store.search(tuple(f"l{i}" for i in range(40))) == []


def _until(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.01)  # a poll interval; the condition decides


def test_a_failed_background_purge_is_raised_by_the_next_call_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's worker purges the adapter's deletes; a purge failing there (an injected
    storage failure) is raised by the adapter's next call, and only by that one."""
    with CenotaphStore(tmp_path / "data", delete_mode="compliance") as store:
        store.put(("docs",), "kept", {"text": "stays"})
        store.put(("docs",), "gone", {"text": "erased"})
        monkeypatch.setenv(FAIL_ENV, "purge.rows")
        store.delete(("docs",), "gone")
        raised: list[StorageError] = []

        def next_call_raises() -> bool:
            try:
                store.get(("docs",), "kept")
            except StorageError as exc:
                raised.append(exc)
            return bool(raised)

        _until(next_call_raises, "a call raised the failed purge")
        assert "background purge failed" in str(raised[0]) and "store.purge()" in str(raised[0])
        assert store.get(("docs",), "kept").value == {"text": "stays"}  # type: ignore[union-attr]
        assert store.get(("docs",), "gone") is None  # the delete is in effect all along
        monkeypatch.delenv(FAIL_ENV)
        assert store.cenotaph.erasures()[-1].wait(timeout=60).state == "verified"


def test_close_gives_the_last_deletes_purge_its_pass(tmp_path: Path) -> None:
    with CenotaphStore(tmp_path / "data", delete_mode="compliance") as store:
        store.put(("docs",), "k", {"text": f"{CANARY} note"})
        store.delete(("docs",), "k")
        request_id = store.cenotaph.erasures()[-1].id
    with cenotaph.open(tmp_path / "data", auto_purge="off") as native:  # nothing purges here
        assert native.erasure(request_id).status().state == "verified"
    assert files_contain(tmp_path / "data", CANARY.encode()) == []


def test_a_failed_sweep_ends_the_sweeper_and_its_future_holds_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with CenotaphStore(tmp_path / "data", ttl={"default_ttl": 1}) as store:
        monkeypatch.setenv(FAIL_ENV, "purge.rows")
        future = store.start_ttl_sweeper(sweep_interval_minutes=0.001)
        assert isinstance(future.exception(timeout=30), StorageError)
        monkeypatch.delenv(FAIL_ENV)
        assert store.stop_ttl_sweeper(timeout=10)
