"""CenotaphMemoryTool over one core session: the model's deletes are housekeeping by default, a
file's delete takes its one slot, listings taint, missing parameters are tool errors, another
writer's forget is never undone, compliance mode erases, and a subject erasure says so.

The real SDK classes (the runner's ``call`` entry point, ``ToolError``) over a real SQLite store.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from anthropic.lib.tools import ToolError

import cenotaph
from cenotaph.integrations.anthropic import CenotaphMemoryTool

SCOPE = "tenant:acme/user:alice"
ROOT_FILES = f"{SCOPE}/memories:root/files:_"
CANARY = "CANARY-5e0d-allergic-to-penicillin"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[cenotaph.Store]:
    with cenotaph.open(tmp_path / "data", auto_purge="sync") as s:
        yield s


@pytest.fixture
def tool(store: cenotaph.Store) -> CenotaphMemoryTool:
    return CenotaphMemoryTool(store, SCOPE)


def run(tool: CenotaphMemoryTool, **command: Any) -> Any:
    return tool.call(command)


def record(store: cenotaph.Store, path: str) -> cenotaph.Record:
    """The stored record of a memory file (``/memories/a/b.md``)."""
    *dirs, name = path.removeprefix("/memories/").split("/")
    scope = "/".join([f"{SCOPE}/memories:root", *(f"dir:{d}" for d in dirs), "files:_"])
    found = store.read(scope, name, fallthrough=False)
    assert found is not None, path
    return found


def make(store: cenotaph.Store, mode: str) -> CenotaphMemoryTool:
    """A tool in ``mode`` ("operational" is the default, so it is not passed)."""
    if mode == "operational":
        return CenotaphMemoryTool(store, SCOPE)
    return CenotaphMemoryTool(store, SCOPE, delete_mode="compliance")


# -- the model's delete is housekeeping ---------------------------------------------------
def test_view_and_delete_then_create_elsewhere_works_and_earlier_files_survive(
    tool: CenotaphMemoryTool, store: cenotaph.Store
) -> None:
    run(tool, command="create", path="/memories/old.md", file_text="outdated plan")
    run(tool, command="create", path="/memories/kept.md", file_text="written before the view")
    run(tool, command="view", path="/memories/old.md")
    run(tool, command="create", path="/memories/summary.md", file_text="written after the view")
    run(tool, command="delete", path="/memories/old.md")
    assert store.erasures()[-1].mode == "operational"
    for path in ("/memories/new.md", "/memories/d/deeper.md"):  # anywhere, any number of times
        assert (
            run(tool, command="create", path=path, file_text="fresh")
            == f"File created successfully at: {path}"
        )
    run(tool, command="str_replace", path="/memories/summary.md", old_str="after", new_str="once")
    listing = run(tool, command="view", path="/memories")
    for path in ("/memories/kept.md", "/memories/summary.md", "/memories/new.md", "/memories/d/deeper.md"):
        assert f"\t{path}" in listing
    assert "old.md" not in listing
    # the note derived from the deleted file is kept, and says where it came from
    assert record(store, "/memories/summary.md").value == "written once the view"


def test_the_tool_re_creates_what_an_earlier_tool_object_deleted(store: cenotaph.Store) -> None:
    """Ownership of a delete is the store's, under a name stable for the scope: a restarted
    application (a new tool object) writes the paths its previous run deleted."""
    first = CenotaphMemoryTool(store, SCOPE)
    run(first, command="create", path="/memories/d/f.md", file_text="1")
    run(first, command="delete", path="/memories/d")
    second = CenotaphMemoryTool(store, SCOPE)
    run(second, command="create", path="/memories/d/f.md", file_text="2")
    assert record(store, "/memories/d/f.md").value == "2"
    bob = CenotaphMemoryTool(store, "tenant:acme/user:bob")  # another scope is another owner
    assert bob.files.owner != second.files.owner


def test_editing_a_note_after_deleting_its_source_works(
    tool: CenotaphMemoryTool, store: cenotaph.Store
) -> None:
    run(tool, command="create", path="/memories/source.md", file_text="raw notes")
    run(tool, command="view", path="/memories/source.md")
    run(tool, command="create", path="/memories/summary.md", file_text="summary v1")
    run(tool, command="delete", path="/memories/source.md")
    run(tool, command="str_replace", path="/memories/summary.md", old_str="v1", new_str="v2")
    run(tool, command="insert", path="/memories/summary.md", insert_line=1, insert_text="more")
    run(tool, command="rename", old_path="/memories/summary.md", new_path="/memories/final.md")
    assert record(store, "/memories/final.md").value == "summary v2\nmore\n"


def test_a_file_viewed_and_edited_twice_can_be_moved_and_edited_again(
    tool: CenotaphMemoryTool, store: cenotaph.Store
) -> None:
    run(tool, command="create", path="/memories/x.md", file_text="a")
    for letter in "bc":
        run(tool, command="view", path="/memories/x.md")
        run(tool, command="str_replace", path="/memories/x.md", old_str=chr(ord(letter) - 1), new_str=letter)
    run(tool, command="rename", old_path="/memories/x.md", new_path="/memories/y.md")
    run(tool, command="str_replace", path="/memories/y.md", old_str="c", new_str="d")
    run(tool, command="create", path="/memories/x.md", file_text="a new x")
    assert record(store, "/memories/y.md").value == "d"
    assert record(store, "/memories/x.md").value == "a new x"


def test_what_was_viewed_before_a_rename_taints_through_the_new_path(
    tool: CenotaphMemoryTool, store: cenotaph.Store
) -> None:
    run(tool, command="create", path="/memories/a.md", file_text="seen")
    run(tool, command="create", path="/memories/b.md", file_text="never seen")
    run(tool, command="view", path="/memories/a.md")
    run(tool, command="rename", old_path="/memories/a.md", new_path="/memories/moved.md")
    run(tool, command="rename", old_path="/memories/b.md", new_path="/memories/moved-b.md")
    note = run(tool, command="create", path="/memories/note.md", file_text="from what was seen")
    assert note.startswith("File created")
    assert record(store, "/memories/note.md").derived_from == (record(store, "/memories/moved.md").id,)


# -- a file's delete takes its slot only --------------------------------------------------
@pytest.mark.parametrize("mode", ["operational", "compliance"])
def test_delete_works_when_an_ancestor_scope_holds_the_same_key(store: cenotaph.Store, mode: str) -> None:
    tool = make(store, mode)
    above = store.write(SCOPE, "notes.md", "the application's own record, same key")
    nested = store.write(f"{SCOPE}/memories:root", "f.md", "another ancestor's copy")
    run(tool, command="create", path="/memories/notes.md", file_text=CANARY)
    run(tool, command="create", path="/memories/f.md", file_text=CANARY)
    assert run(tool, command="delete", path="/memories/notes.md") == "Successfully deleted /memories/notes.md"
    run(tool, command="rename", old_path="/memories/f.md", new_path="/memories/g.md")
    for gone in ("/memories/notes.md", "/memories/f.md"):
        with pytest.raises(ToolError, match="does not exist"):
            run(tool, command="view", path=gone)
    assert store.read(ROOT_FILES, "notes.md", fallthrough=False) is None
    assert store.read(SCOPE, "notes.md") == above and store.read(f"{SCOPE}/memories:root", "f.md") == nested
    run(tool, command="create", path="/memories/notes.md", file_text="written again")
    assert record(store, "/memories/notes.md").value == "written again"


# -- listings taint ------------------------------------------------------------------------
def test_a_directory_view_records_the_listed_files_as_derived_from(
    tool: CenotaphMemoryTool, store: cenotaph.Store
) -> None:
    for path in ("/memories/top.md", "/memories/d/a.md", "/memories/d/e/b.md"):
        run(tool, command="create", path=path, file_text=f"content of {path}")
    run(tool, command="view", path="/memories/d")
    run(tool, command="create", path="/memories/from-d.md", file_text="names seen in /memories/d")
    in_d = {record(store, p).id for p in ("/memories/d/a.md", "/memories/d/e/b.md")}
    assert set(record(store, "/memories/from-d.md").derived_from) == in_d
    run(tool, command="view", path="/memories")
    run(tool, command="create", path="/memories/index.md", file_text="every name")
    assert set(record(store, "/memories/index.md").derived_from) == {
        *in_d,
        record(store, "/memories/top.md").id,
        record(store, "/memories/from-d.md").id,
    }


def test_a_listing_taints_so_an_erasure_of_a_listed_file_reaches_the_note(store: cenotaph.Store) -> None:
    tool = CenotaphMemoryTool(store, SCOPE, delete_mode="compliance")
    run(tool, command="create", path="/memories/people/clinic-visit.md", file_text=CANARY)
    run(tool, command="view", path="/memories")
    run(tool, command="create", path="/memories/index.md", file_text="files: people/clinic-visit.md")
    store.forget(f"{SCOPE}/memories:root/dir:people")  # the application erases that directory
    with pytest.raises(ToolError, match="does not exist"):
        run(tool, command="view", path="/memories/index.md")


# -- bad parameters ------------------------------------------------------------------------
def test_create_without_file_text_is_a_tool_error_and_stores_nothing(
    tool: CenotaphMemoryTool, store: cenotaph.Store
) -> None:
    with pytest.raises(ToolError, match="Parameter `file_text` is required for command: create"):
        run(tool, command="create", path="/memories/x.md")
    with pytest.raises(ToolError, match="`file_text` must be a string"):
        run(tool, command="create", path="/memories/x.md", file_text=5)
    assert store.list(SCOPE, include_descendants=True) == []
    with pytest.raises(ToolError, match="does not exist"):
        run(tool, command="view", path="/memories/x.md")
    run(tool, command="create", path="/memories/x.md", file_text="now")  # the path was never taken


def test_other_missing_parameters_are_tool_errors(tool: CenotaphMemoryTool, store: cenotaph.Store) -> None:
    run(tool, command="create", path="/memories/x.md", file_text="one line")
    cases: list[tuple[dict[str, Any], str]] = [
        ({"command": "str_replace", "path": "/memories/x.md", "old_str": "one"}, "`new_str` is required"),
        ({"command": "str_replace", "path": "/memories/x.md", "new_str": "two"}, "`old_str` is required"),
        (
            {"command": "insert", "path": "/memories/x.md", "insert_text": "x"},
            "`insert_line` must be an integer",
        ),
        ({"command": "insert", "path": "/memories/x.md", "insert_line": 0}, "`insert_text` is required"),
        (
            {"command": "view", "path": "/memories/x.md", "view_range": [1.5, 2]},
            "`view_range` must be a list",
        ),
        ({"command": "view"}, "Path must start with /memories"),
    ]
    for command, message in cases:
        with pytest.raises(ToolError, match=message):
            tool.call(command)
    assert record(store, "/memories/x.md").value == "one line"


def test_no_raw_cenotaph_error_leaves_the_tool(tmp_path: Path) -> None:
    store = cenotaph.open(tmp_path / "data")
    tool = CenotaphMemoryTool(store, SCOPE)
    run(tool, command="create", path="/memories/x.md", file_text="x")
    store.close()
    for command in (
        {"command": "view", "path": "/memories"},
        {"command": "create", "path": "/memories/y.md", "file_text": "y"},
        {"command": "delete", "path": "/memories/x.md"},
    ):
        with pytest.raises(ToolError, match="memory store could not run this command"):
            tool.call(command)


# -- another writer's forget is never undone ------------------------------------------------
@pytest.mark.parametrize("owner", [None, "someone-else"])
def test_deleting_the_directory_again_does_not_undo_another_writers_forget(
    tool: CenotaphMemoryTool, store: cenotaph.Store, owner: str | None
) -> None:
    run(tool, command="create", path="/memories/d/f.md", file_text=CANARY)
    run(tool, command="create", path="/memories/d/g.md", file_text="mine")
    by: dict[str, Any] = {} if owner is None else {"owner": owner}  # none: as the library always took it
    store.forget(f"{SCOPE}/memories:root/dir:d/files:_", "f.md", mode="operational", **by)
    run(tool, command="delete", path="/memories/d")  # the tool's own forget, newer, over it
    with pytest.raises(ToolError, match="erased by another writer"):
        run(tool, command="create", path="/memories/d/f.md", file_text="written over someone's forget")
    with pytest.raises(ToolError, match="does not exist"):
        run(tool, command="view", path="/memories/d/f.md")
    run(tool, command="create", path="/memories/d/g.md", file_text="mine again")  # only mine was in its way
    assert record(store, "/memories/d/g.md").value == "mine again"


def test_clearing_all_memory_does_not_undo_another_writers_forget_of_a_directory(
    tool: CenotaphMemoryTool, store: cenotaph.Store
) -> None:
    run(tool, command="create", path="/memories/d/f.md", file_text=CANARY)
    run(tool, command="create", path="/memories/e.md", file_text="mine")
    store.forget(f"{SCOPE}/memories:root/dir:d", mode="operational")
    tool.clear_all_memory()
    with pytest.raises(ToolError, match="erased by another writer"):
        run(tool, command="create", path="/memories/d/f.md", file_text="back")
    run(tool, command="create", path="/memories/e.md", file_text="mine again")


def test_a_forget_of_a_viewed_file_by_someone_else_still_blocks_notes(
    tool: CenotaphMemoryTool, store: cenotaph.Store
) -> None:
    run(tool, command="create", path="/memories/a.md", file_text=CANARY)
    run(tool, command="view", path="/memories/a.md")
    store.forget(ROOT_FILES, "a.md")  # the application erases what the model read
    with pytest.raises(ToolError, match="has been erased since"):
        run(tool, command="create", path="/memories/note.md", file_text=f"recalled: {CANARY}")
    tool.files.reset_reads()
    run(tool, command="create", path="/memories/note.md", file_text="a new conversation")


# -- compliance mode ------------------------------------------------------------------------
def test_compliance_mode_erases_and_what_derived_from_the_file_goes_too(
    store: cenotaph.Store, tmp_path: Path
) -> None:
    tool = CenotaphMemoryTool(store, SCOPE, delete_mode="compliance")
    run(tool, command="create", path="/memories/health.md", file_text=CANARY)
    run(tool, command="create", path="/memories/unrelated.md", file_text="never derived")
    run(tool, command="view", path="/memories/health.md")
    run(tool, command="create", path="/memories/summary.md", file_text="has a clinic visit")
    run(
        tool, command="rename", old_path="/memories/summary.md", new_path="/memories/moved.md"
    )  # lineage moves
    run(tool, command="delete", path="/memories/health.md")
    request = store.erasures()[-1]
    assert request.mode == "compliance" and request.target_kind == "key"
    assert request.wait(60).state == "verified"
    cenotaph.verify_certificate(store.attest(request.id), store.public_key)
    for gone in ("/memories/health.md", "/memories/moved.md"):
        with pytest.raises(ToolError, match="does not exist"):
            run(tool, command="view", path=gone)
    assert "never derived" in run(tool, command="view", path="/memories/unrelated.md")
    assert [
        p for p in (tmp_path / "data").rglob("*") if p.is_file() and CANARY.encode() in p.read_bytes()
    ] == []
    # the rewrite of the erased path is not derived from the erased copy
    run(tool, command="create", path="/memories/health.md", file_text="a new file")


def test_clear_all_memory_follows_the_delete_mode(store: cenotaph.Store) -> None:
    for mode in ("operational", "compliance"):
        tool = CenotaphMemoryTool(store, SCOPE, delete_mode=mode)
        run(tool, command="create", path=f"/memories/{mode}.md", file_text="x")
        assert tool.clear_all_memory() == "All memory cleared"
        assert store.erasures()[-1].mode == mode
    with pytest.raises(cenotaph.InvalidValueError, match="delete_mode"):
        CenotaphMemoryTool(store, SCOPE, delete_mode="erase")  # type: ignore[arg-type]


# -- subject erasure ------------------------------------------------------------------------
def test_after_a_subject_erasure_a_create_says_the_subject_was_erased(
    tool: CenotaphMemoryTool, store: cenotaph.Store
) -> None:
    run(tool, command="create", path="/memories/a.md", file_text=CANARY)
    run(tool, command="view", path="/memories")
    store.forget_subject(SCOPE)
    with pytest.raises(ToolError) as refused:
        run(tool, command="create", path="/memories/never-existed.md", file_text="new")
    message = str(refused.value)
    assert "the person this memory belongs to was erased (a subject erasure)" in message
    assert "store.reauthorize(scope, subject=...)" in message and "item" not in message
    assert SCOPE not in message  # no subject id in what the model reads
    # the application decides to write for her again: one token, then the model's writes land
    token = store.reauthorize(SCOPE, subject=SCOPE)
    tool.files.reset_reads()
    tool.files.write_file("/memories/welcome-back.md", "a new start", reauthorization=token)
    run(tool, command="create", path="/memories/never-existed.md", file_text="new")
    assert record(store, "/memories/never-existed.md").value == "new"


# -- a write racing a delete ------------------------------------------------------------------
def test_a_create_racing_the_tools_own_delete_of_its_directory_is_refused(
    tool: CenotaphMemoryTool, store: cenotaph.Store
) -> None:
    """The create is issued (the session takes the store's version), then the tool's own delete
    of the directory commits and returns, then the create reaches the store: it is stale, and
    refused; the same create issued afterwards lands."""
    run(tool, command="create", path="/memories/d/keep.md", file_text="x")
    issued, deleted = threading.Event(), threading.Event()
    real = store.known_version
    calls = 0

    def known_version() -> int:  # the session's version for the write, held until the delete returned
        nonlocal calls
        version = real()
        calls += 1
        if calls == 2:  # the tool's own (for telling refusals apart), then the session's
            issued.set()
            assert deleted.wait(30)
        return version

    def delete() -> None:
        assert issued.wait(30)
        run(tool, command="delete", path="/memories/d")
        deleted.set()

    deleter = threading.Thread(target=delete)
    deleter.start()
    store.known_version = known_version  # type: ignore[method-assign]
    try:
        with pytest.raises(ToolError, match="it was deleted while this command was running"):
            run(tool, command="create", path="/memories/d/new.md", file_text="racing")
    finally:
        del store.known_version
        deleter.join(30)
    run(tool, command="create", path="/memories/d/new.md", file_text="after")
    assert record(store, "/memories/d/new.md").value == "after"
