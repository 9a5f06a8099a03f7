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
``BetaLocalFilesystemMemoryTool``. ``delete`` (of a file or a directory) and
``clear_all_memory`` are compliance forgets; an edit made after viewing other files records them
as ``derived_from``, so a note summarised from a deleted note dies with it.
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

from ._files import MemoryFiles

__all__ = ["AsyncCenotaphMemoryTool", "CenotaphMemoryTool"]


class CenotaphMemoryTool(BetaAbstractMemoryTool):
    """The memory tool over ``store``, its ``/memories`` directory kept under ``scope``.

    Files carry the scope's default subjects (every ``user:`` prefix of it) and ``subjects``.
    """

    def __init__(
        self,
        store: Store,
        scope: str,
        *,
        subjects: Iterable[str] = (),
        cache_control: BetaCacheControlEphemeralParam | None = None,
    ) -> None:
        super().__init__(cache_control=cache_control)
        self.files = MemoryFiles(store, scope, subjects=subjects)

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
        cache_control: BetaCacheControlEphemeralParam | None = None,
    ) -> None:
        super().__init__(cache_control=cache_control)
        self.files = MemoryFiles(store, scope, subjects=subjects)

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
