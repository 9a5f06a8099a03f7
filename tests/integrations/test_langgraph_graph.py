"""CenotaphStore inside a compiled LangGraph graph and behind LangMem's memory tools: a node reads
a user's memories and writes a summary; the user's erasure leaves no summary anywhere."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore

with warnings.catch_warnings():  # langmem 0.0.30 imports a name langgraph 1.x deprecates
    warnings.simplefilter("ignore", DeprecationWarning)
    from langmem import create_manage_memory_tool, create_search_memory_tool

from tests.integrations import bag_of_words

import cenotaph
from cenotaph.integrations.langgraph import CenotaphStore

DIMS = 64


def embed(texts: Sequence[str]) -> list[list[float]]:
    return bag_of_words.embed(texts, DIMS)


class State(TypedDict):
    user: str
    summary: str


def summarize(state: State, config: RunnableConfig, *, store: BaseStore) -> dict[str, str]:
    assert isinstance(store, CenotaphStore)
    user = state["user"]
    with store.lineage():  # the summary derives from what the node read
        memories = store.search(("memories", user), limit=50)
        summary = "; ".join(sorted(m.value["text"] for m in memories))
        store.put(("memories", user), "summary", {"text": summary})
        store.put(("team-digest",), user, {"text": summary})  # outside the user's namespace
    return {"summary": summary}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CenotaphStore]:
    with CenotaphStore(
        tmp_path / "data",
        index={"dims": DIMS, "embed": embed, "fields": ["text"]},
        users=[("memories", "{user_id}")],
    ) as s:
        yield s


def build(store: CenotaphStore) -> object:
    graph = StateGraph(State)
    graph.add_node("summarize", summarize)
    graph.add_edge(START, "summarize")
    graph.add_edge("summarize", END)
    return graph.compile(store=store)


def test_a_users_erasure_leaves_no_summary_written_by_a_graph_node(store: CenotaphStore) -> None:
    store.put(("memories", "alice"), "m1", {"text": "cardiology appointment tuesday"})
    store.put(("memories", "alice"), "m2", {"text": "prefers morning calls"})
    store.put(("memories", "bob"), "m1", {"text": "likes chess"})
    app = build(store)
    result = app.invoke({"user": "alice", "summary": ""})  # type: ignore[attr-defined]
    assert "cardiology" in result["summary"]
    app.invoke({"user": "bob", "summary": ""})  # type: ignore[attr-defined]
    assert "cardiology" in store.get(("team-digest",), "alice").value["text"]  # type: ignore[union-attr]

    request = store.forget_user("alice")
    assert request.status().state == "verified"
    native = store.cenotaph
    cenotaph.verify_certificate(native.attest(request.id), native.public_key)
    assert store.get(("memories", "alice"), "summary") is None
    # the digest sits outside alice's namespace; it is gone because it derived from her memories
    assert store.get(("team-digest",), "alice") is None
    everything = json.dumps([r.value for r in native.list("app:langgraph", include_descendants=True)])
    assert "cardiology" not in everything and "morning" not in everything
    assert store.get(("team-digest",), "bob").value == {"text": "likes chess"}  # type: ignore[union-attr]
    assert [i.key for i in store.search(("memories", "bob"))] == ["summary", "m1"]


def test_langmem_memory_tools_run_on_the_store(tmp_path: Path) -> None:
    index = {"dims": DIMS, "embed": embed, "fields": ["content"]}  # LangMem stores {"content": ...}
    store = CenotaphStore(tmp_path / "lm", index=index, users=[("memories", "{user_id}")])  # type: ignore[arg-type]
    manage = create_manage_memory_tool(namespace=("memories", "{langgraph_user_id}"))
    search = create_search_memory_tool(namespace=("memories", "{langgraph_user_id}"))

    class Turn(TypedDict):
        found: str

    def remember(state: Turn) -> dict[str, str]:
        created = manage.invoke({"content": "allergic to penicillin", "action": "create"})
        manage.invoke({"content": "lives in Lyon", "action": "create"})
        memory_id = created.split()[-1]
        manage.invoke({"content": "allergic to penicillin and aspirin", "action": "update", "id": memory_id})
        return {"found": search.invoke({"query": "allergic penicillin"})}

    graph = StateGraph(Turn)
    graph.add_node("remember", remember)
    graph.add_edge(START, "remember")
    graph.add_edge("remember", END)
    app = graph.compile(store=store)
    config: RunnableConfig = {"configurable": {"langgraph_user_id": "carol"}}
    found = json.loads(app.invoke({"found": ""}, config)["found"])
    assert found[0]["value"]["content"] == "allergic to penicillin and aspirin"
    assert len(store.search(("memories", "carol"))) == 2

    def forget_one(state: Turn) -> dict[str, str]:
        memory_id = json.loads(search.invoke({"query": "Lyon"}))[0]["key"]
        manage.invoke({"action": "delete", "id": memory_id})  # LangMem's delete: the store's delete
        return {"found": search.invoke({"query": "Lyon"})}

    graph2 = StateGraph(Turn)
    graph2.add_node("forget", forget_one)
    graph2.add_edge(START, "forget")
    graph2.add_edge("forget", END)
    left = json.loads(graph2.compile(store=store).invoke({"found": ""}, config)["found"])
    assert all("Lyon" not in m["value"]["content"] for m in left)
    deleted = max(store.cenotaph.erasures(), key=lambda r: r.version)
    assert deleted.mode == "operational"  # housekeeping by default; erasing carol is forget_user

    store.forget_user("carol")
    assert store.search(("memories", "carol")) == []
    assert json.loads(app.invoke({"found": ""}, {"configurable": {"langgraph_user_id": "dave"}})["found"])
    store.close()
