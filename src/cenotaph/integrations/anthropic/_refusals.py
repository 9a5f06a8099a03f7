"""Why the store refused a memory-tool command, said as the SDK's ``ToolError``.

The model (and the application behind it) sees only ``ToolError``: a raw cenotaph error never
leaves the tool. A refused write is told apart by what the store holds, never by an error's text:
a subject erasure among the forgets in its way, a source of its lineage forgotten, a forget newer
than the command (it ran while the command did), or else another writer's forget.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from anthropic.lib.tools import ToolError

from cenotaph import Store
from cenotaph.errors import CenotaphError, DerivedFromForgottenError, ForgottenError, StaleWriteError

__all__ = ["refused_write", "tool_errors"]


@contextmanager
def tool_errors(path: str) -> Iterator[None]:
    """Any cenotaph error of a command on ``path`` that the command did not handle becomes a
    ``ToolError`` (its message says what to do and never holds a value)."""
    try:
        yield
    except ToolError:
        raise
    except CenotaphError as exc:
        raise ToolError(f"The memory store could not run this command on {path}: {exc}") from exc


def refused_write(
    store: Store, path: str, items: Sequence[Mapping[str, Any]], issued: int, exc: CenotaphError
) -> ToolError:
    """The ``ToolError`` for a write of ``items`` (a command on ``path``, issued when the store
    knew version ``issued``) that the store refused with ``exc``."""
    if not isinstance(exc, ForgottenError | StaleWriteError):
        return ToolError(f"Cannot write {path}: {exc}")
    found = {
        r.version: r.target_kind
        for item in items
        for r in store.blocking_erasures(item["scope"], item["key"], subjects=item.get("subjects"))
    }
    if isinstance(exc, StaleWriteError):  # a forget newer than the command, or a stale base_version
        if any(v > issued for v in found):
            return ToolError(f"Cannot write {path}: it was deleted while this command was running.")
        return ToolError(f"The file {path} no longer exists (may have been deleted or renamed concurrently).")
    if "subject" in found.values():
        return ToolError(
            f"Cannot write {path}: the person this memory belongs to was erased (a subject erasure), and "
            "nothing is written for them again unless the application decides so: "
            "store.reauthorize(scope, subject=...) gives a token, tool.files.write_file(path, text, "
            "reauthorization=token) writes with it, and later writes for that subject land again."
        )
    if isinstance(exc, DerivedFromForgottenError):
        return ToolError(
            f"Cannot write {path}: a memory file viewed in this conversation has been erased since, and what "
            "is written now could carry its content back. Writes stay refused until the application starts a "
            "new conversation (tool.files.reset_reads())."
        )
    return ToolError(
        f"Cannot write {path}: it was erased by another writer, and this tool re-creates only what it "
        "deleted itself."
    )
