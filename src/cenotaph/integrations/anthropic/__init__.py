"""Anthropic integration: :class:`CenotaphMemoryTool`, the SDK's memory tool over cenotaph.

Needs ``pip install 'cenotaph[integrations]'`` (``anthropic`` 2.x). See ``docs/integrations.md``
for the layout of files and directories and where it differs from the SDK's filesystem tool.
"""

from __future__ import annotations

from ._files import MemoryFiles
from ._tool import AsyncCenotaphMemoryTool, CenotaphMemoryTool

__all__ = ["AsyncCenotaphMemoryTool", "CenotaphMemoryTool", "MemoryFiles"]
