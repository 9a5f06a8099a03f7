"""Memory files as cenotaph records: the command semantics of the SDK's filesystem memory tool.

Layout under the tool's scope ``S``: the ``/memories`` directory is the scope ``S/memories:root``;
a directory ``/memories/a/b`` is ``S/memories:root/dir:a/dir:b``; the files directly in a
directory are records in its ``files:_`` child scope, keyed by file name. So a directory is a
scope subtree (deleting it is one forget of that subtree, and a subject erasure of a user whose
scope holds ``S`` reaches every file), and a file is one slot of a leaf scope, forgotten exactly
(never a same-named file elsewhere, and never refused because an ancestor scope holds that key).
Directories exist while a file under them does, as the paths imply; the root always exists.

All taint and every re-creation after the tool's own delete go through one core session
(:meth:`cenotaph.Store.session`) per :class:`MemoryFiles`, owned by a name stable for the scope.
Messages are the SDK's ``BetaLocalFilesystemMemoryTool`` strings, raised as its ``ToolError``.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from anthropic.lib.tools import ToolError

from cenotaph import Record, Scope, Store, StoreSession
from cenotaph.errors import (
    CenotaphError,
    InvalidScopeError,
    InvalidValueError,
)

from .._labels import decode_label, encode_label
from ._paths import ROOT, parse
from ._refusals import refused_write, tool_errors

__all__ = ["DeleteMode", "MemoryFiles", "owner_of"]

DeleteMode = Literal["operational", "compliance"]
MAX_LINES = 999999
LINE_NUMBER_WIDTH = len(str(MAX_LINES))
DIRECTORY_SIZE = 4096  # what a directory's size reads on the usual Linux file systems
_MARK = "memory_file"
_DIR, _FILES = "dir", "files:_"

Parts = tuple[str, ...]
# a write: the file's path components, its text, what it derives from besides the session's
# read set, and the version it replaces (compare-and-set), if any
Write = tuple[Parts, str, Sequence[str], int | None]


def owner_of(scope: str) -> str:
    """The owner of every forget the memory tool of ``scope`` makes: the same for every tool
    object over that scope (a restarted application re-creates what it deleted before), and
    for no other scope. The store keeps it only as a keyed token."""
    digest = hashlib.sha256(str(Scope.parse(scope)).encode()).hexdigest()
    return f"anthropic-memory:{digest}"


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


def _text(value: object, name: str, command: str) -> str:
    """A string parameter of a command (the SDK's own tool fails on a missing one with a raw
    AttributeError, after creating an empty file)."""
    if value is None:
        raise ToolError(f"Parameter `{name}` is required for command: {command}")
    if not isinstance(value, str):
        raise ToolError(f"Parameter `{name}` must be a string for command: {command}")
    return value


class MemoryFiles:
    """The memory directory of one scope. Thread-safe; every command is one or two transactions.

    ``delete_mode`` says what the tool's own ``delete`` and ``clear_all_memory()`` are:
    ``"operational"`` (the default: housekeeping -- hidden at once, stale rewrites refused, rows
    reclaimed by the store's purge, nothing derived from them forgotten, no later write blocked)
    or ``"compliance"`` (an erasure: keys destroyed, verified by a scan, what derived from the
    deleted files forgotten with them). Erasing a person is ``store.forget_subject(...)``.
    """

    def __init__(
        self,
        store: Store,
        scope: str,
        *,
        subjects: Iterable[str] = (),
        delete_mode: DeleteMode = "operational",
    ) -> None:
        if not isinstance(store, Store):
            raise InvalidValueError("store must be a cenotaph.Store (from cenotaph.open(...))")
        if delete_mode not in ("operational", "compliance"):
            raise InvalidValueError("delete_mode must be 'operational' (the default) or 'compliance'")
        self._store = store
        self._root = str(Scope.parse(scope).child("memories", "root"))
        self._subjects = list(subjects)
        self.delete_mode: DeleteMode = delete_mode
        self.owner = owner_of(scope)
        self._lock = threading.Lock()
        self._session = store.session(self._root, owner=self.owner)

    @property
    def session(self) -> StoreSession:
        """The session of this conversation: its read set is every file and listing viewed."""
        with self._lock:
            return self._session

    def reset_reads(self) -> None:
        """Start a new conversation: a new session, whose writes derive from nothing viewed
        before. Until then every write derives from every file viewed so far (and is refused once
        someone else erased one of those: the content the model read must not come back through
        a note written afterwards). The old session is not closed, so a command still running on
        it finishes; what the tool deleted stays its own (the store keeps the owner)."""
        session = self._store.session(self._root, owner=self.owner)
        with self._lock:
            self._session = session

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

    # -- state (these look without tainting: nothing they find is shown to the model) ------
    def files(self) -> dict[Parts, Record]:
        """Every memory file, by path components."""
        return self._files_under((), self._store.list)

    def _files_under(self, parts: Parts, lister: Callable[..., list[Record]]) -> dict[Parts, Record]:
        try:
            records = lister(self._dir_scope(parts), include_descendants=True)
        except InvalidScopeError:
            return {}  # a path too deep to be stored holds no file
        found = {}
        for record in records:
            file = self._parts(record)
            if file is not None:
                found[file] = record
        return found

    def _file(self, parts: Parts, session: StoreSession | None = None) -> Record | None:
        if not parts:
            return None
        scope, key = self._slot(parts)
        reader = self._store if session is None else session
        try:
            record = reader.read(scope, key, fallthrough=False)
        except (InvalidScopeError, InvalidValueError):
            return None  # a path too deep or a name too long to be stored names no stored file
        return record if record is not None and self._parts(record) == parts else None

    def _dir_exists(self, parts: Parts) -> bool:
        """Does a file exist under ``parts`` (the root always exists)? Lists that subtree only."""
        return not parts or bool(self._files_under(parts, self._store.list))

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

    # -- commands ------------------------------------------------------------------------
    def view(self, path: str, view_range: Sequence[int] | None = None) -> str:
        with tool_errors(path):
            parts = parse(path)
            if view_range is not None and (
                isinstance(view_range, str)
                or not isinstance(view_range, Sequence)
                or not all(type(n) is int for n in view_range)
            ):
                raise ToolError("Parameter `view_range` must be a list of two integers for command: view")
            session = self.session
            record = self._file(parts, session)  # a file viewed joins the read set
            if record is not None:
                return self._numbered(path, record.value, view_range)
            files = self._files_under(parts, session.list)  # and so does every file a listing names
            if not self._is_dir(parts, files):
                raise ToolError(f"The path {path} does not exist. Please provide a valid path.")
            header = (
                f"Here're the files and directories up to 2 levels deep in {path}, excluding hidden items:"
            )
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

    def create(self, path: str, file_text: str | None) -> str:
        with tool_errors(path):
            parts = parse(path)
            text = _text(file_text, "file_text", "create")
            self._check_new(parts, path)
            self._write(self.session, [(parts, text, (), None)], path)
            return f"File created successfully at: {path}"

    def _existing(self, path: str) -> tuple[Parts, Record]:
        parts = parse(path)
        record = self._file(parts)
        if record is None:
            if self._dir_exists(parts):
                raise ToolError(f"The path {path} is not a file.")
            raise ToolError(f"The path {path} does not exist. Please provide a valid path.")
        return parts, record

    def _edit(self, parts: Parts, content: str, record: Record, path: str) -> None:
        """Replace ``record`` (compare-and-set) with ``content``: the new version derives from the
        one it replaces (so from all that one derived from, transitively) and from the read set."""
        self._write(self.session, [(parts, content, (record.id,), record.version)], path)

    def str_replace(self, path: str, old_str: str | None, new_str: str | None) -> str:
        with tool_errors(path):
            old = _text(old_str, "old_str", "str_replace")
            new = _text(new_str, "new_str", "str_replace")
            parts, record = self._existing(path)
            content: str = record.value
            count = content.count(old)
            if count == 0:
                raise ToolError(
                    f"No replacement was performed, old_str `{old}` did not appear verbatim in {path}."
                )
            if count > 1:
                lines, start = [], 0
                while (pos := content.find(old, start)) != -1:
                    lines.append(content[:pos].count("\n") + 1)
                    start = pos + 1
                raise ToolError(
                    f"No replacement was performed. Multiple occurrences of old_str `{old}` in lines: "
                    f"{', '.join(map(str, lines))}. Please ensure it is unique"
                )
            changed = content[: content.find(old)].count("\n")
            new_content = content.replace(old, new)
            self._edit(parts, new_content, record, path)
            new_lines = new_content.split("\n")
            first, end = max(0, changed - 2), min(len(new_lines), changed + 3)
            snippet = [
                f"{str(n).rjust(LINE_NUMBER_WIDTH)}\t{new_lines[n - 1]}" for n in range(first + 1, end + 1)
            ]
            return (
                "The memory file has been edited. Here is the snippet showing the change (with line numbers):\n"
                + ("\n".join(snippet))
            )

    def insert(self, path: str, insert_line: int | None, insert_text: str | None) -> str:
        with tool_errors(path):
            if type(insert_line) is not int:
                raise ToolError("Parameter `insert_line` must be an integer for command: insert")
            text = _text(insert_text, "insert_text", "insert")
            parts, record = self._existing(path)
            lines = record.value.split("\n")
            if lines[-1] == "":
                lines.pop()
            if insert_line < 0 or insert_line > len(lines):
                raise ToolError(
                    f"Invalid `insert_line` parameter: {insert_line}. It should be within the range "
                    f"[0, {len(lines)}]."
                )
            lines.insert(insert_line, text.rstrip("\n"))
            new_content = "\n".join(lines)
            if not new_content.endswith("\n"):
                new_content += "\n"
            self._edit(parts, new_content, record, path)
            return f"The file {path} has been edited."

    def delete(self, path: str) -> str:
        with tool_errors(path):
            parts = parse(path)
            if not parts:
                raise ToolError(f"Cannot delete the {ROOT} directory itself")
            if self._file(parts) is not None:
                self._forget(*self._slot(parts), mode=self.delete_mode)
            elif self._dir_exists(parts):
                self._forget(self._dir_scope(parts), None, mode=self.delete_mode)
            else:
                raise ToolError(f"The path {path} does not exist")
            return f"Successfully deleted {path}"

    def rename(self, old_path: str, new_path: str) -> str:
        with tool_errors(old_path):
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
            session = self.session
            viewed = set(session.read_set)
            # the content is written at the new paths first (one transaction), then the old paths are
            # forgotten: no moment loses the content. A move is authored by nobody: each moved file
            # derives from the one it moves (so from what that derived from), not from the read set
            # (a session of the same owner with nothing read, which may re-create what it deleted)
            with self._store.session(self._root, owner=self.owner) as mover:
                moved = self._write(
                    mover,
                    [(new + f[len(old) :], r.value, (r.id,), None) for f, r in moving.items()],
                    new_path,
                )
            # a rename erases nothing (the content lives on at the new path), so the old paths go as
            # housekeeping in either delete mode: a compliance forget would also erase every note
            # derived from the file, and the moved copy, which derives from it
            if old in moving:
                self._forget(*self._slot(old), mode="operational")
            else:
                self._forget(self._dir_scope(old), None, mode="operational")
            # what the model viewed at the old path it now knows from the new one
            session.taint(m for m, source in zip(moved, moving.values(), strict=True) if source.id in viewed)
            return f"Successfully renamed {old_path} to {new_path}"

    def write_file(self, path: str, text: str, *, reauthorization: str | None = None) -> str:
        """Create or overwrite a file from outside the model's commands (an import, a seed); it
        derives from nothing the tool has read (only from the file it overwrites). With a
        ``reauthorization`` token (``store.reauthorize(...)``), it may write what a forget
        refuses, e.g. for a subject erased before (``store.reauthorize(scope, subject=...)``)."""
        with tool_errors(path):
            parts = parse(path)
            content = _text(text, "text", "write_file")
            existing = self._file(parts)
            if existing is None and self._dir_exists(parts):
                raise ToolError(f"The path {path} is a directory")
            self._check_ancestors(parts, path)
            sources = () if existing is None else (existing.id,)
            with self._store.session(self._root, owner=self.owner) as importer:
                self._write(importer, [(parts, content, sources, None)], path, reauthorization)
            return f"File written at: {path}"

    def clear_all_memory(self) -> str:
        with tool_errors(ROOT):
            self._forget(self._root, None, mode=self.delete_mode)
            return "All memory cleared"

    # -- writes and forgets --------------------------------------------------------------
    def _forget(self, scope: str, key: str | None, *, mode: DeleteMode) -> None:
        """The tool's own forget, through its session (so its later writes may re-create it): a
        file's is exact, its one slot; a directory's takes the subtree."""
        self.session.forget(scope, key, mode=mode, exact=key is not None)

    def _write(
        self,
        session: StoreSession,
        writes: Sequence[Write],
        path: str,
        reauthorization: str | None = None,
    ) -> list[Record]:
        """One transaction through ``session``: every item derives from its read set and from the
        item's own sources; a forget of the tool's own in the way is reopened by the session."""
        items = []
        for parts, content, sources, base_version in writes:
            scope, key = self._checked_scope(parts, path)
            item: dict[str, Any] = {
                "scope": scope,
                "key": key,
                "value": content,
                "subjects": self._subjects,
                "metadata": {_MARK: 1},
                "derived_from": list(sources),
                "base_version": base_version,
                "reauthorization": reauthorization,
            }
            items.append(item)
        issued = self._store.known_version()
        try:
            return session.write_many(items)
        except CenotaphError as exc:
            raise refused_write(self._store, path, items, issued, exc) from exc
