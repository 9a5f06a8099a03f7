"""What a failed tool call says: one line the agent can act on, never a traceback or a value.

Tools raise :class:`Refused` (a reason written for the agent) or let a store error through;
:func:`reason_for` turns either into the one line the client receives as a tool error
(``is_error``). Store messages name what to do in Python terms; the MCP wording is chosen here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from cenotaph.errors import (
    CenotaphError,
    DerivedFromForgottenError,
    ErasureNotProvableError,
    ForgottenError,
    InvalidScopeError,
    InvalidValueError,
    KeyProviderError,
    NotFoundError,
    ScopeClosureError,
    StaleWriteError,
    StorageError,
)

if TYPE_CHECKING:  # pydantic comes with the mcp extra; `cenotaph kg` runs without it
    from pydantic import ValidationError

__all__ = ["Refused", "one_line", "reason_for", "invalid_arguments"]

READ_FORGOTTEN = (
    "refused: this connection has read a memory that has since been forgotten, so what it writes now "
    "may carry what was forgotten; nothing was written. Write again from a new connection, once your "
    "context no longer holds the forgotten memory"
)


class Refused(Exception):
    """A tool call refused with a reason for the agent (one line, no values)."""


def one_line(text: str) -> str:
    return " ".join(text.split())


def reason_for(exc: BaseException) -> str | None:
    """The line a tool error carries for ``exc``; None if it is not an anticipated failure."""
    if isinstance(exc, Refused):
        return one_line(str(exc))
    if isinstance(exc, CenotaphError):
        return one_line(_store_reason(exc))
    return None


def _store_reason(exc: CenotaphError) -> str:
    if isinstance(exc, NotFoundError):
        return f"not found: {exc}"
    if isinstance(exc, InvalidScopeError):
        return f"invalid scope: {exc}"
    if isinstance(exc, InvalidValueError):
        return f"invalid arguments: {exc}"
    if isinstance(exc, DerivedFromForgottenError):
        return READ_FORGOTTEN
    if isinstance(exc, ForgottenError):
        return (
            f"refused: this memory was forgotten (at version {exc.version}); writing it again needs a "
            "reauthorization from an operator"
        )
    if isinstance(exc, StaleWriteError):
        return f"refused: {exc}"
    if isinstance(exc, ScopeClosureError):
        return (
            "refused: the key is also held by a wider scope that a read here would fall through to; "
            "forget it there too (memory_forget with that scope), or ask an operator"
        )
    if isinstance(exc, ErasureNotProvableError):
        return f"not provable yet: {'; '.join(exc.gaps) or exc}"
    if isinstance(exc, KeyProviderError | StorageError):
        return f"the store failed, nothing was changed: {exc}"
    return f"refused: {exc}"


def invalid_arguments(tool: str, exc: ValidationError) -> str:
    """Pydantic's multi-line report as one line naming each field and what is wrong with it,
    never the rejected value (it is the caller's data)."""
    parts = [f"{_where(e['loc']) or 'arguments'}: {e['msg']}" for e in exc.errors()]
    return one_line(f"invalid arguments for {tool}: " + "; ".join(parts[:10]))


def _where(loc: Iterable[int | str]) -> str:
    return ".".join(str(part) for part in loc)
