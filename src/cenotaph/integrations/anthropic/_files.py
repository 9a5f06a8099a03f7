"""Memory files as cenotaph records: the command semantics of the SDK's filesystem memory tool.

Layout under the tool's scope ``S``: the ``/memories`` directory is the scope ``S/memories:root``;
a directory ``/memories/a/b`` is ``S/memories:root/dir:a/dir:b``; the files directly in a
directory are records in its ``files:_`` child scope, keyed by file name. So a directory is a
scope subtree (deleting it is one compliance forget of that subtree, and a subject erasure of a
user whose scope holds ``S`` reaches every file), and a file's scope has no descendants, so
forgetting one file never reaches a same-named file elsewhere. Directories exist while a file
under them does, as the paths imply; the root always exists.

Messages are the SDK's ``BetaLocalFilesystemMemoryTool`` strings, raised as its ``ToolError``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from anthropic.lib.tools import ToolError

from cenotaph import Record, Scope, Store
from cenotaph.errors import (
    DerivedFromForgottenError,
    ForgottenError,
    InvalidScopeError,
    InvalidValueError,
    StaleWriteError,
)

from .._deletes import DeleteState, OwnDeletes, Target, write_reopening
from .._labels import decode_label, encode_label
from ._paths import ROOT, parse

__all__ = ["MemoryFiles"]

MAX_LINES = 999999
LINE_NUMBER_WIDTH = len(str(MAX_LINES))
DIRECTORY_SIZE = 4096  # what a directory's size reads on the usual Linux file systems
_MARK = "memory_file"
_DIR, _FILES = "dir", "files:_"

Parts = tuple[str, ...]


def _size(count: int) -> str:
    """The SDK's _format_file_size."""
    if count == 0:
        return "0B"
    units = ["B", "K", "M", "G"]
    i = min(int(count.bit_length() - 1) // 10, len(units) - 1)
    size = count / (1024**i)
    return f"{int(size)}{units[i]}" if size == int(size) else f"{size:.1f}{units[i]}"


def _display(parts: Parts) -> str:
    return "/".join([ROOT, *parts])


class MemoryFiles:
    """The memory directory of one scope. Thread-safe; every command is one or two transactions."""

    def __init__(self, store: Store, scope: str, *, subjects: Iterable[str] = ()) -> None:
        if not isinstance(store, Store):
            raise InvalidValueError("store must be a cenotaph.Store (from cenotaph.open(...))")
        self._store = store
        self._root = str(Scope.parse(scope).child("memories", "root"))
        self._subjects = list(subjects)
        self._deletes = OwnDeletes()
        self._reads: set[str] = set()
        self._lock = threading.Lock()

    # -- layout --------------------------------------------------------------------------
    def _dir_scope(self, parts: Parts) -> str:
        return "/".join([self._root, *(f"{_DIR}:{encode_label(p)}" for p in parts)])

    def _slot(self, parts: Parts) -> tuple[str, str]:
        return f"{self._dir_scope(parts[:-1])}/{_FILES}", encode_label(parts[-1])

    def _parts(self, record: Record) -> Parts | None:
        if record.metadata.get(_MARK) != 1 or not isinstance(record.value, str):
            return None
        head, _, rest = record.scope.partition(self._root)
        if head or not rest.endswith("/" + _FILES):
            return None
        dirs = [s for s in rest[: -len(_FILES) - 1].split("/") if s]
        if not all(d.startswith(f"{_DIR}:") for d in dirs):
            return None
        return (*(decode_label(d[len(_DIR) + 1 :]) for d in dirs), decode_label(record.key))

    def _checked_scope(self, parts: Parts, path: str) -> tuple[str, str]:
        try:
            scope, key = self._slot(parts)
            Scope.parse(scope)
        except (InvalidScopeError, InvalidValueError) as exc:
            raise ToolError(f"The path {path} is too deep or has a name too long for memory: {exc}") from None
        if len(key) > 512:
            raise ToolError(f"The path {path} has a file name too long for memory (at most 512 characters)")
        return scope, key

    # -- state ---------------------------------------------------------------------------
    def files(self) -> dict[Parts, Record]:
        """Every memory file, by path components."""
        found = {}
        for record in self._store.list(self._root, include_descendants=True):
            parts = self._parts(record)
            if parts is not None:
                found[parts] = record
        return found

    def _file(self, parts: Parts) -> Record | None:
        if not parts:
            return None
        scope, key = self._slot(parts)
        try:
            record = self._store.read(scope, key, fallthrough=False)
        except (InvalidScopeError, InvalidValueError):
            return None  # a path too deep or a name too long to be stored names no stored file
        return record if record is not None and self._parts(record) == parts else None

    def _dir_exists(self, parts: Parts) -> bool:
        """Does a file exist under ``parts`` (the root always exists)? Lists that subtree only."""
        if not parts:
            return True
        try:
            records = self._store.list(self._dir_scope(parts), include_descendants=True)
        except InvalidScopeError:
            return False
        return any(self._parts(r) is not None for r in records)

    def _check_new(self, parts: Parts, path: str) -> None:
        """A file may be created at ``parts``: nothing is there, and no ancestor is a file."""
        if self._file(parts) is not None or self._dir_exists(parts):
            raise ToolError(f"File {path} already exists")
        self._check_ancestors(parts, path)

    def _check_ancestors(self, parts: Parts, path: str) -> None:
        for depth in range(1, len(parts)):
            if self._file(parts[:depth]) is not None:
                raise ToolError(f"Cannot create {path}: {_display(parts[:depth])} is a file, not a directory")

    @staticmethod
    def _is_dir(parts: Parts, files: Iterable[Parts]) -> bool:
        return not parts or any(len(f) > len(parts) and f[: len(parts)] == parts for f in files)

    def _read(self, record: Record) -> None:
        with self._lock:
            self._reads.add(record.id)

    def reset_reads(self) -> None:
        """Start a new read set (e.g. for a new conversation). Until then every write derives from
        every file viewed so far, and is refused once one of those has been deleted: the content
        the model read must not come back through a note written afterwards."""
        with self._lock:
            self._reads.clear()

    def _lineage(self, own: Record | None) -> list[str]:
        """What a write derives from: every file read so far by this tool (but not the file itself,
        whose earlier versions a forget of it covers anyway), and what the file derived from."""
        with self._lock:
            reads = set(self._reads)
        if own is not None:
            reads.discard(own.id)
            reads.update(own.derived_from)
        return sorted(reads)

    # -- commands ------------------------------------------------------------------------
    def view(self, path: str, view_range: Sequence[int] | None = None) -> str:
        parts = parse(path)
        record = self._file(parts)
        if record is not None:
            self._read(record)
            return self._numbered(path, record.value, view_range)
        files = self.files()
        if not self._is_dir(parts, files):
            raise ToolError(f"The path {path} does not exist. Please provide a valid path.")
        header = f"Here're the files and directories up to 2 levels deep in {path}, excluding hidden items:"
        lines = [f"{_size(DIRECTORY_SIZE)}\t{path}"]
        lines.extend(f"{size}\t{path}/{name}" for size, name in self._listing(parts, files))
        return f"{header}\n" + "\n".join(lines)

    @staticmethod
    def _numbered(path: str, content: str, view_range: Sequence[int] | None) -> str:
        lines = content.split("\n")
        if len(lines) > MAX_LINES:
            raise ToolError(f"File {path} exceeds maximum line limit of 999,999 lines.")
        shown, start = lines, 1
        if view_range and len(view_range) == 2:
            first = max(1, view_range[0]) - 1
            end = len(lines) if view_range[1] == -1 else view_range[1]
            shown, start = lines[first:end], first + 1
        numbered = [f"{str(i + start).rjust(LINE_NUMBER_WIDTH)}\t{line}" for i, line in enumerate(shown)]
        return f"Here's the content of {path} with line numbers:\n" + "\n".join(numbered)

    @staticmethod
    def _listing(parts: Parts, files: Mapping[Parts, Record]) -> list[tuple[str, str]]:
        """(size, relative name) two levels deep, sorted by name, hidden names skipped."""
        tree: dict[str, Any] = {}
        for file, record in files.items():
            if len(file) <= len(parts) or file[: len(parts)] != parts:
                continue
            node = tree
            for name in file[len(parts) : -1]:
                node = node.setdefault(name, {})
                if not isinstance(node, dict):
                    break
            else:
                node[file[-1]] = len(record.value.encode("utf-8"))
        items: list[tuple[str, str]] = []

        def walk(node: dict[str, Any], prefix: str, depth: int) -> None:
            for name in sorted(node):
                if name.startswith("."):
                    continue
                child, relative = node[name], f"{prefix}{name}"
                if isinstance(child, dict):
                    items.append((_size(DIRECTORY_SIZE), f"{relative}/"))
                    if depth < 2:
                        walk(child, f"{relative}/", depth + 1)
                else:
                    items.append((_size(child), relative))

        walk(tree, "", 1)
        return items

    def create(self, path: str, file_text: str) -> str:
        parts = parse(path)
        ticket = self._deletes.ticket()
        self._check_new(parts, path)
        self._write([(parts, file_text, None)], path, ticket)
        return f"File created successfully at: {path}"

    def _existing(self, path: str) -> tuple[Parts, Record]:
        parts = parse(path)
        record = self._file(parts)
        if record is None:
            if self._dir_exists(parts):
                raise ToolError(f"The path {path} is not a file.")
            raise ToolError(f"The path {path} does not exist. Please provide a valid path.")
        return parts, record

    def str_replace(self, path: str, old_str: str, new_str: str) -> str:
        ticket = self._deletes.ticket()
        parts, record = self._existing(path)
        content: str = record.value
        count = content.count(old_str)
        if count == 0:
            raise ToolError(
                f"No replacement was performed, old_str `{old_str}` did not appear verbatim in {path}."
            )
        if count > 1:
            lines, start = [], 0
            while (pos := content.find(old_str, start)) != -1:
                lines.append(content[:pos].count("\n") + 1)
                start = pos + 1
            raise ToolError(
                f"No replacement was performed. Multiple occurrences of old_str `{old_str}` in lines: "
                f"{', '.join(map(str, lines))}. Please ensure it is unique"
            )
        changed = content[: content.find(old_str)].count("\n")
        new_content = content.replace(old_str, new_str)
        self._write([(parts, new_content, record)], path, ticket)
        new_lines = new_content.split("\n")
        first, end = max(0, changed - 2), min(len(new_lines), changed + 3)
        snippet = [
            f"{str(n).rjust(LINE_NUMBER_WIDTH)}\t{new_lines[n - 1]}" for n in range(first + 1, end + 1)
        ]
        return (
            "The memory file has been edited. Here is the snippet showing the change (with line numbers):\n"
            + ("\n".join(snippet))
        )

    def insert(self, path: str, insert_line: int, insert_text: str) -> str:
        ticket = self._deletes.ticket()
        parts, record = self._existing(path)
        lines = record.value.split("\n")
        if lines[-1] == "":
            lines.pop()
        if insert_line < 0 or insert_line > len(lines):
            raise ToolError(
                f"Invalid `insert_line` parameter: {insert_line}. It should be within the range [0, {len(lines)}]."
            )
        lines.insert(insert_line, insert_text.rstrip("\n"))
        new_content = "\n".join(lines)
        if not new_content.endswith("\n"):
            new_content += "\n"
        self._write([(parts, new_content, record)], path, ticket)
        return f"The file {path} has been edited."

    def delete(self, path: str) -> str:
        parts = parse(path)
        if not parts:
            raise ToolError(f"Cannot delete the {ROOT} directory itself")
        if self._file(parts) is not None:
            self._forget(self._slot(parts))
        elif self._dir_exists(parts):
            self._forget((self._dir_scope(parts), None))
        else:
            raise ToolError(f"The path {path} does not exist")
        return f"Successfully deleted {path}"

    def rename(self, old_path: str, new_path: str) -> str:
        ticket = self._deletes.ticket()
        old, new = parse(old_path), parse(new_path)
        if not old:
            raise ToolError(f"Cannot rename the {ROOT} directory itself")
        files = self.files()
        if new in files or self._is_dir(new, files):
            raise ToolError(f"The destination {new_path} already exists")
        moving = {f: r for f, r in files.items() if f[: len(old)] == old}
        if not moving:
            raise ToolError(f"The path {old_path} does not exist")
        if new[: len(old)] == old:
            raise ToolError(f"Cannot move {old_path} into itself ({new_path})")
        for depth in range(1, len(new)):
            if new[:depth] in files and new[:depth] not in moving:
                raise ToolError(
                    f"Cannot rename to {new_path}: {_display(new[:depth])} is a file, not a directory"
                )
        # the content is written at the new paths first (one transaction), then the old paths are
        # forgotten (compliance): no moment loses the content, and after this returns no old path
        # holds it (not even in the database's free pages, once the forget's purge has run)
        self._write(
            [(new + f[len(old) :], r.value, r) for f, r in moving.items()],
            new_path,
            ticket,
            keep_lineage=True,
        )
        self._forget(self._slot(old) if old in files else (self._dir_scope(old), None))
        return f"Successfully renamed {old_path} to {new_path}"

    def write_file(self, path: str, text: str) -> str:
        """Create or overwrite a file from outside the model's commands (an import, a seed); it
        derives from nothing the tool has read."""
        parts = parse(path)
        ticket = self._deletes.ticket()
        existing = self._file(parts)
        if existing is None and self._dir_exists(parts):
            raise ToolError(f"The path {path} is a directory")
        self._check_ancestors(parts, path)
        self._write([(parts, text, existing)], path, ticket, keep_lineage=True)
        return f"File written at: {path}"

    def clear_all_memory(self) -> str:
        self._forget((self._root, None))
        return "All memory cleared"

    # -- writes and forgets --------------------------------------------------------------
    def _forget(self, target: Target) -> None:
        request = self._store.forget(*target, mode="compliance")
        self._deletes.deleted(target, request.version)

    def _targets(self, item: Mapping[str, Any]) -> list[Target]:
        """What a forget that blocks this file's write may have named: the file, or a directory
        holding it (innermost first), up to the memory root."""
        scope: str = item["scope"]
        found: list[Target] = [(scope, item["key"])]
        directory = scope[: -len(_FILES) - 1]
        while len(directory) >= len(self._root):
            found.append((directory, None))
            directory = directory.rpartition("/")[0]
        return found

    def _write(
        self,
        writes: list[tuple[Parts, str, Record | None]],
        path: str,
        ticket: int,
        *,
        keep_lineage: bool = False,
    ) -> None:
        items = []
        for parts, content, source in writes:
            scope, key = self._checked_scope(parts, path)
            item: dict[str, Any] = {
                "scope": scope,
                "key": key,
                "value": content,
                "subjects": self._subjects,
                "metadata": {_MARK: 1},
                # a moved (or imported) file keeps its own lineage; an edit adds what was read before it
                "derived_from": (
                    (sorted(source.derived_from) if source else []) if keep_lineage else self._lineage(source)
                ),
            }
            if source is not None and not keep_lineage:
                item["base_version"] = source.version
            items.append(item)
        try:
            write_reopening(self._store, self._deletes, items, ticket, self._targets)
        except StaleWriteError as exc:
            raise ToolError(
                f"The file {path} no longer exists (may have been deleted or renamed concurrently)."
            ) from exc
        except DerivedFromForgottenError as exc:
            raise ToolError(
                f"Cannot write {path}: a memory file read before this edit has been deleted since, and "
                "what was derived from it cannot be written again. View the remaining files and retry."
            ) from exc
        except ForgottenError as exc:
            _, state = self._deletes.match([t for i in items for t in self._targets(i)], exc.version, ticket)
            why = (
                "it was deleted while this command was running"
                if state is DeleteState.STALE
                else "it was erased by a subject erasure or by another writer, and this tool re-creates only "
                "what it deleted itself"
            )
            raise ToolError(f"Cannot write {path}: {why}.") from exc
        except InvalidValueError as exc:
            raise ToolError(f"Cannot write {path}: {exc}") from exc
