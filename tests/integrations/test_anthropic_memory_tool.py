"""CenotaphMemoryTool: deletes (housekeeping, or erasures in compliance mode) and renames, lineage
of edits, subject erasure, path attacks, the async twin, and a whole tool_runner loop against a
fake Messages API. The regressions of the tool's session live in test_anthropic_memory_session.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from anthropic import Anthropic
from anthropic.lib.tools import BetaAbstractMemoryTool, BetaAsyncAbstractMemoryTool, ToolError

import cenotaph
from cenotaph.integrations.anthropic import AsyncCenotaphMemoryTool, CenotaphMemoryTool

SCOPE = "tenant:acme/user:alice"
CANARY = "CANARY-91c2-allergic-to-penicillin"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[cenotaph.Store]:
    with cenotaph.open(tmp_path / "data", auto_purge="sync") as s:  # deletes verify before they return
        yield s


@pytest.fixture
def tool(store: cenotaph.Store) -> CenotaphMemoryTool:
    return CenotaphMemoryTool(store, SCOPE)


def run(tool: CenotaphMemoryTool, **command: Any) -> Any:
    return tool.call(command)  # the runner's entry point: a raw tool_use input


def files_contain(directory: Path, needle: bytes) -> list[str]:
    return [str(p) for p in directory.rglob("*") if p.is_file() and needle in p.read_bytes()]


def everything(store: cenotaph.Store) -> str:
    return json.dumps([r.value for r in store.list(SCOPE, include_descendants=True)])


def test_it_is_the_sdks_memory_tool(tool: CenotaphMemoryTool, store: cenotaph.Store) -> None:
    assert isinstance(tool, BetaAbstractMemoryTool)
    assert isinstance(AsyncCenotaphMemoryTool(store, SCOPE), BetaAsyncAbstractMemoryTool)
    assert tool.to_dict() == {"type": "memory_20250818", "name": "memory"}


@pytest.fixture
def erasing(store: cenotaph.Store) -> CenotaphMemoryTool:
    return CenotaphMemoryTool(store, SCOPE, delete_mode="compliance")


def test_delete_of_a_file_is_housekeeping_by_default(tool: CenotaphMemoryTool, store: cenotaph.Store) -> None:
    run(tool, command="create", path="/memories/old.md", file_text=f"{CANARY}\noutdated")
    run(tool, command="create", path="/memories/tea.md", file_text="likes tea")
    assert run(tool, command="delete", path="/memories/old.md") == "Successfully deleted /memories/old.md"
    with pytest.raises(ToolError, match="does not exist"):
        run(tool, command="view", path="/memories/old.md")
    assert "old.md" not in run(tool, command="view", path="/memories")
    assert CANARY not in everything(store)
    request = store.erasures()[-1]
    assert request.mode == "operational" and request.target_kind == "key"
    assert request.status().state == "tombstoned"  # hidden; never reported as an erasure
    assert "likes tea" in run(tool, command="view", path="/memories/tea.md")


def test_delete_of_a_file_in_compliance_mode_is_a_verified_erasure(
    erasing: CenotaphMemoryTool, store: cenotaph.Store, tmp_path: Path
) -> None:
    run(erasing, command="create", path="/memories/health.md", file_text=f"{CANARY}\nnote 2")
    run(erasing, command="create", path="/memories/tea.md", file_text="likes tea")
    assert (
        run(erasing, command="delete", path="/memories/health.md")
        == "Successfully deleted /memories/health.md"
    )
    with pytest.raises(ToolError, match="does not exist"):
        run(erasing, command="view", path="/memories/health.md")
    assert "health.md" not in run(erasing, command="view", path="/memories")
    assert CANARY not in everything(store)
    assert CANARY not in str(store.export_subject(SCOPE))
    request = store.erasures()[-1]
    assert request.mode == "compliance" and request.status().state == "verified"
    cenotaph.verify_certificate(store.attest(request.id), store.public_key)
    assert files_contain(tmp_path / "data", CANARY.encode()) == []
    assert "likes tea" in run(erasing, command="view", path="/memories/tea.md")


@pytest.mark.parametrize("mode", ["operational", "compliance"])
def test_delete_of_a_directory_forgets_everything_under_it_in_one_request(
    store: cenotaph.Store, mode: str
) -> None:
    tool = CenotaphMemoryTool(store, SCOPE, delete_mode=mode)  # type: ignore[arg-type]
    for path in ["/memories/p/a.md", "/memories/p/q/b.md", "/memories/p/q/r/c.md", "/memories/pp.md"]:
        run(tool, command="create", path=path, file_text=f"{CANARY} {path}")
    before = len(store.erasures())
    run(tool, command="delete", path="/memories/p")
    assert len(store.erasures()) == before + 1
    request = store.erasures()[-1]
    assert request.mode == mode and request.target_kind == "scope"
    assert request.status().state == ("verified" if mode == "compliance" else "tombstoned")
    listing = run(tool, command="view", path="/memories")
    assert "/memories/p/" not in listing and "/memories/pp.md" in listing
    assert everything(store).count(CANARY) == 1
    with pytest.raises(ToolError, match="Cannot delete the /memories directory itself"):
        run(tool, command="delete", path="/memories/p/..")


@pytest.mark.parametrize("mode", ["operational", "compliance"])
def test_rename_moves_content_and_leaves_the_old_path_readable_nowhere(
    store: cenotaph.Store, mode: str
) -> None:
    tool = CenotaphMemoryTool(store, SCOPE, delete_mode=mode)  # type: ignore[arg-type]
    run(tool, command="create", path="/memories/old/one.md", file_text=CANARY)
    run(tool, command="create", path="/memories/old/sub/two.md", file_text="two")
    assert (
        run(tool, command="rename", old_path="/memories/old", new_path="/memories/new/place")
        == "Successfully renamed /memories/old to /memories/new/place"
    )
    assert CANARY in run(tool, command="view", path="/memories/new/place/one.md")
    assert "two" in run(tool, command="view", path="/memories/new/place/sub/two.md")
    for gone in ["/memories/old/one.md", "/memories/old"]:
        with pytest.raises(ToolError, match="does not exist"):
            run(tool, command="view", path=gone)
    records = store.list(SCOPE, include_descendants=True)
    assert everything(store).count(CANARY) == 1
    assert all("dir:old" not in r.scope for r in records)
    assert store.erasures()[-1].mode == "operational"  # a move erases nothing, in either mode
    run(tool, command="rename", old_path="/memories/new/place/one.md", new_path="/memories/one.md")
    assert [r.key for r in store.list(SCOPE, include_descendants=True) if CANARY in r.value] == ["one.md"]
    run(tool, command="rename", old_path="/memories/one.md", new_path="/memories/old/one.md")  # back again
    assert CANARY in run(tool, command="view", path="/memories/old/one.md")


def test_in_compliance_mode_a_note_written_after_viewing_a_file_dies_with_it(
    erasing: CenotaphMemoryTool, store: cenotaph.Store
) -> None:
    run(erasing, command="create", path="/memories/session/visit.md", file_text=f"{CANARY} tuesday")
    run(erasing, command="create", path="/memories/unrelated.md", file_text="written before any view")
    run(erasing, command="view", path="/memories/session/visit.md")
    run(erasing, command="create", path="/memories/summary.md", file_text="User has a cardiology appointment")
    run(erasing, command="str_replace", path="/memories/unrelated.md", old_str="before", new_str="after")
    summary = store.read(f"{SCOPE}/memories:root/files:_", "summary.md", fallthrough=False)
    assert summary is not None and len(summary.derived_from) == 1

    run(erasing, command="delete", path="/memories/session")
    assert store.erasures()[-1].status().state == "verified"
    for gone in ["/memories/summary.md", "/memories/unrelated.md"]:  # both edited after the view
        with pytest.raises(ToolError, match="does not exist"):
            run(erasing, command="view", path=gone)
    assert "cardiology" not in everything(store) and CANARY not in everything(store)
    # what the model read is erased: a new note from this conversation could carry it back
    with pytest.raises(ToolError, match="has been erased since"):
        run(erasing, command="create", path="/memories/again.md", file_text="cardiology, from memory")
    erasing.files.reset_reads()  # a new conversation
    run(erasing, command="create", path="/memories/again.md", file_text="a fresh start")


def test_subject_erasure_reaches_every_file_and_blocks_new_ones(
    tool: CenotaphMemoryTool, store: cenotaph.Store
) -> None:
    run(tool, command="create", path="/memories/a.md", file_text=CANARY)
    run(tool, command="create", path="/memories/d/b.md", file_text="b")
    bob = CenotaphMemoryTool(store, "tenant:acme/user:bob")
    run(bob, command="create", path="/memories/a.md", file_text="bob's")
    request = store.forget_subject(SCOPE)
    assert request.status().state == "verified"
    assert run(tool, command="view", path="/memories").count("\n") == 1  # the root alone
    with pytest.raises(ToolError, match="subject erasure"):
        run(tool, command="create", path="/memories/a.md", file_text="back")
    assert "bob's" in run(bob, command="view", path="/memories/a.md")


def test_writes_after_the_tools_own_deletes_succeed(tool: CenotaphMemoryTool) -> None:
    run(tool, command="create", path="/memories/d/f.md", file_text="1")
    run(tool, command="delete", path="/memories/d/f.md")
    run(tool, command="create", path="/memories/d/f.md", file_text="2")
    run(tool, command="delete", path="/memories/d")
    run(tool, command="create", path="/memories/d/f.md", file_text="3")
    assert tool.clear_all_memory() == "All memory cleared"  # an app-side method, not a model command
    run(tool, command="create", path="/memories/d/f.md", file_text="4")
    assert run(tool, command="view", path="/memories/d/f.md").endswith("1\t4")


def test_another_writers_forget_is_not_undone(tool: CenotaphMemoryTool, store: cenotaph.Store) -> None:
    run(tool, command="create", path="/memories/f.md", file_text="1")
    store.forget(f"{SCOPE}/memories:root/files:_", "f.md")
    with pytest.raises(ToolError, match="another writer"):
        run(tool, command="create", path="/memories/f.md", file_text="2")


@pytest.mark.parametrize(
    "path",
    [
        "/memories/../etc/passwd",
        "/memories/..",
        "/memories/a/../../x",
        "/memories/./../../../tmp/x",
        "/memories//../x",
    ],
)
def test_paths_cannot_escape_the_memory_directory(tool: CenotaphMemoryTool, path: str) -> None:
    with pytest.raises(ToolError, match="would escape /memories directory"):
        run(tool, command="create", path=path, file_text="x")


def test_encoded_doubled_and_odd_separators_stay_inside(
    tool: CenotaphMemoryTool, store: cenotaph.Store
) -> None:
    run(tool, command="create", path="/memories//a///b.md", file_text="doubled")
    assert "doubled" in run(tool, command="view", path="/memories/a/b.md")
    run(tool, command="create", path="/memories/%2e%2e/%2Fx.md", file_text="encoded")  # names, not steps
    run(tool, command="create", path="/memories/back\\slash.md", file_text="literal")
    run(tool, command="create", path="/memories/../memories/in.md", file_text="back inside")
    listing = run(tool, command="view", path="/memories")
    assert "/memories/%2e%2e/" in listing and "/memories/%2e%2e/%2Fx.md" in listing
    assert "/memories/back\\slash.md" in listing and "/memories/in.md" in listing
    assert all(
        r.scope.startswith(f"{SCOPE}/memories:root") for r in store.list(SCOPE, include_descendants=True)
    )
    for bad in ["/etc/passwd", "memories/x", "/memorie", "/memories/x\x00y"]:
        with pytest.raises(ToolError):
            run(tool, command="create", path=bad, file_text="x")
    with pytest.raises(ToolError, match="is a file, not a directory"):
        run(tool, command="create", path="/memories/a/b.md/c.md", file_text="x")


def test_tools_of_different_scopes_never_see_each_other(store: cenotaph.Store) -> None:
    alice, bob = CenotaphMemoryTool(store, SCOPE), CenotaphMemoryTool(store, "tenant:acme/user:bob")
    run(alice, command="create", path="/memories/secret.md", file_text=CANARY)
    with pytest.raises(ToolError, match="does not exist"):
        run(bob, command="view", path="/memories/secret.md")
    bob.clear_all_memory()
    assert CANARY in run(alice, command="view", path="/memories/secret.md")


def test_the_async_twin_runs_the_same_commands(store: cenotaph.Store) -> None:
    tool = AsyncCenotaphMemoryTool(store, SCOPE)

    async def scenario() -> None:
        assert await tool.call({"command": "create", "path": "/memories/x.md", "file_text": "a\nb"}) == (
            "File created successfully at: /memories/x.md"
        )
        await tool.call(
            {"command": "insert", "path": "/memories/x.md", "insert_line": 1, "insert_text": "mid"}
        )
        view = await tool.call({"command": "view", "path": "/memories/x.md", "view_range": [2, -1]})
        assert (
            view
            == "Here's the content of /memories/x.md with line numbers:\n     2\tmid\n     3\tb\n     4\t"
        )
        await tool.call({"command": "rename", "old_path": "/memories/x.md", "new_path": "/memories/y.md"})
        await tool.call({"command": "delete", "path": "/memories/y.md"})
        with pytest.raises(ToolError, match="does not exist"):
            await tool.call({"command": "view", "path": "/memories/y.md"})
        assert await tool.clear_all_memory() == "All memory cleared"

    asyncio.run(scenario())


def _message(content: list[dict[str, Any]], stop_reason: str) -> dict[str, Any]:
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": "claude-fake",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def _tool_use(n: int, **command: Any) -> dict[str, Any]:
    return _message(
        [{"type": "tool_use", "id": f"toolu_{n}", "name": "memory", "input": command}], "tool_use"
    )


def test_a_whole_tool_runner_loop_against_a_fake_messages_api(
    tool: CenotaphMemoryTool, store: cenotaph.Store
) -> None:
    script = [
        _tool_use(1, command="view", path="/memories"),
        _tool_use(2, command="create", path="/memories/prefs.md", file_text="likes green tea"),
        _tool_use(3, command="str_replace", path="/memories/prefs.md", old_str="green", new_str="jasmine"),
        _tool_use(4, command="view", path="/memories/../../etc/passwd"),
        _message([{"type": "text", "text": "Noted: jasmine tea."}], "end_turn"),
    ]
    requests: list[dict[str, Any]] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        assert request.url.host == "api.example.test" and request.url.path == "/v1/messages"
        requests.append(json.loads(request.content))
        return httpx2.Response(200, json=script[len(requests) - 1])

    client = Anthropic(
        api_key="test-key",
        base_url="http://api.example.test",
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
        max_retries=0,
    )
    runner = client.beta.messages.tool_runner(
        model="claude-fake",
        max_tokens=256,
        tools=[tool],
        messages=[{"role": "user", "content": "I like green tea, make that jasmine"}],
    )
    final = runner.until_done()
    assert final.content[0].text == "Noted: jasmine tea."  # type: ignore[union-attr]
    assert len(requests) == 5
    assert requests[0]["tools"] == [{"type": "memory_20250818", "name": "memory"}]

    def result(i: int) -> dict[str, Any]:
        block = requests[i]["messages"][-1]["content"][0]
        assert block["type"] == "tool_result" and block["tool_use_id"] == f"toolu_{i}"
        return block  # type: ignore[no-any-return]

    assert "up to 2 levels deep in /memories" in json.dumps(result(1)["content"])
    assert "File created successfully at: /memories/prefs.md" in json.dumps(result(2)["content"])
    assert "jasmine" in json.dumps(result(3)["content"])
    escape = result(4)
    assert escape.get("is_error") is True and "would escape /memories directory" in json.dumps(
        escape["content"]
    )
    record = store.read(f"{SCOPE}/memories:root/files:_", "prefs.md", fallthrough=False)
    assert record is not None and record.value == "likes jasmine tea"


def test_paths_too_deep_or_long_are_tool_errors(tool: CenotaphMemoryTool) -> None:
    deep = "/memories/" + "/".join(f"d{i}" for i in range(40)) + "/f.md"
    long_name = "/memories/" + "n" * 600
    for path in (deep, long_name):
        with pytest.raises(ToolError, match="does not exist"):
            run(tool, command="view", path=path)
        with pytest.raises(ToolError, match=r"too deep|too long"):
            run(tool, command="create", path=path, file_text="x")
