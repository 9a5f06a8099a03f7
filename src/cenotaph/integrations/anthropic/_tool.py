"""``CenotaphMemoryTool``: the Anthropic SDK's memory tool, its files kept as cenotaph records.

>>> import cenotaph, tempfile
>>> from anthropic.types.beta import BetaMemoryTool20250818CreateCommand as Create
>>> from cenotaph.integrations.anthropic import CenotaphMemoryTool
>>> store = cenotaph.open(tempfile.mkdtemp())
>>> tool = CenotaphMemoryTool(store, "tenant:acme/user:alice")
>>> tool.execute(Create(command="create", path="/memories/diet.md", file_text="vegetarian"))
'File created successfully at: /memories/diet.md'
>>> store.close()

Pass it to ``client.beta.messages.tool_runner(tools=[tool], ...)`` like the SDK's own
``BetaLocalFilesystemMemoryTool``. The model's ``delete`` (of a file or a directory), ``rename``
and ``clear_all_memory()`` are housekeeping: operational forgets, hidden at once and reclaimed by
the store's purge, after which the tool may write those paths again. ``delete_mode="compliance"``
makes ``delete`` and ``clear_all_memory()`` compliance erasures, verified, and what derived from
the deleted files (a note written after viewing them) goes with them. Erasing a person is one
call on the store, ``store.forget_subject(...)``, always a compliance erasure.
"""

from __future__ import annotations

from collections.abc import Iterable

from anthropic.lib.tools import BetaAbstractMemoryTool, BetaAsyncAbstractMemoryTool
from anthropic.types.beta import (
    BetaCacheControlEphemeralParam,
    BetaMemoryTool20250818CreateCommand,
    BetaMemoryTool20250818DeleteCommand,
    BetaMemoryTool20250818InsertCommand,
    BetaMemoryTool20250818RenameCommand,
    BetaMemoryTool20250818StrReplaceCommand,
    BetaMemoryTool20250818ViewCommand,
)
from anyio.to_thread import run_sync
from typing_extensions import override

from cenotaph import Store

from ._files import DeleteMode, MemoryFiles

__all__ = ["AsyncCenotaphMemoryTool", "CenotaphMemoryTool"]


class CenotaphMemoryTool(BetaAbstractMemoryTool):
    """The memory tool over ``store``, its ``/memories`` directory kept under ``scope``.

    Files carry the scope's default subjects (every ``user:`` prefix of it) and ``subjects``.
    ``delete_mode`` is ``"operational"`` (the default) or ``"compliance"`` (see the module).
    The tool's read set is its conversation's: ``tool.files.reset_reads()`` starts a new one.
    A command never raises a cenotaph error, only the SDK's ``ToolError``.
    """

    def __init__(
        self,
        store: Store,
        scope: str,
        *,
        subjects: Iterable[str] = (),
        delete_mode: DeleteMode = "operational",
        cache_control: BetaCacheControlEphemeralParam | None = None,
    ) -> None:
        super().__init__(cache_control=cache_control)
        self.files = MemoryFiles(store, scope, subjects=subjects, delete_mode=delete_mode)

    @override
    def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        return self.files.view(command.path, command.view_range)

    @override
    def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        return self.files.create(command.path, command.file_text)

    @override
    def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        return self.files.str_replace(command.path, command.old_str, command.new_str)

    @override
    def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        return self.files.insert(command.path, command.insert_line, command.insert_text)

    @override
    def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        return self.files.delete(command.path)

    @override
    def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        return self.files.rename(command.old_path, command.new_path)

    @override
    def clear_all_memory(self) -> str:
        return self.files.clear_all_memory()


class AsyncCenotaphMemoryTool(BetaAsyncAbstractMemoryTool):
    """The async twin of :class:`CenotaphMemoryTool` (same files, run in a worker thread)."""

    def __init__(
        self,
        store: Store,
        scope: str,
        *,
        subjects: Iterable[str] = (),
        delete_mode: DeleteMode = "operational",
        cache_control: BetaCacheControlEphemeralParam | None = None,
    ) -> None:
        super().__init__(cache_control=cache_control)
        self.files = MemoryFiles(store, scope, subjects=subjects, delete_mode=delete_mode)

    @override
    async def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        return await run_sync(self.files.view, command.path, command.view_range)

    @override
    async def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        return await run_sync(self.files.create, command.path, command.file_text)

    @override
    async def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        return await run_sync(self.files.str_replace, command.path, command.old_str, command.new_str)

    @override
    async def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        return await run_sync(self.files.insert, command.path, command.insert_line, command.insert_text)

    @override
    async def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        return await run_sync(self.files.delete, command.path)

    @override
    async def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        return await run_sync(self.files.rename, command.old_path, command.new_path)

    @override
    async def clear_all_memory(self) -> str:
        return await run_sync(self.files.clear_all_memory)
