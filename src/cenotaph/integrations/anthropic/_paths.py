"""Memory-tool paths: the SDK's rules for ``/memories/...``, checked without a filesystem.

As in the SDK's ``BetaLocalFilesystemMemoryTool``: a path must start with ``/memories`` (else
``Path must start with /memories, got: ...``); the rest, with leading ``/`` removed, is resolved
like a file system would (``.`` and empty components dropped, ``..`` steps up), and a path that
does not end inside the root is refused (``Path ... would escape /memories directory``). Nothing is
ever decoded: ``%2F`` or ``%2e%2e`` are ordinary characters of a name, as on a file system, so no
encoding can smuggle a separator or a parent step past these checks. A NUL byte, which no file
system name can hold, is refused as well.
"""

from __future__ import annotations

from anthropic.lib.tools import ToolError

__all__ = ["ROOT", "parse"]

ROOT = "/memories"


def parse(path: str) -> tuple[str, ...]:
    """The components of ``path`` below ``/memories`` (``()`` for the root itself)."""
    if not isinstance(path, str) or not path.startswith(ROOT):
        raise ToolError(f"Path must start with {ROOT}, got: {path}")
    if "\x00" in path:
        raise ToolError(f"Path {path!r} contains a NUL byte; use a path without one")
    # resolved as the SDK's Path.resolve() does, from the directory that holds "memories": a path
    # may step out and back in ("/memories/../memories/x"), but must end inside the root
    parts = [ROOT[1:]]
    for part in path[len(ROOT) :].lstrip("/").split("/"):
        if part in ("", "."):
            continue
        if part != "..":
            parts.append(part)
        elif parts:
            parts.pop()
        else:
            raise ToolError(f"Path {path} would escape {ROOT} directory")
    if not parts or parts[0] != ROOT[1:]:
        raise ToolError(f"Path {path} would escape {ROOT} directory")
    return tuple(parts[1:])
