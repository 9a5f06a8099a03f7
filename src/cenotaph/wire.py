"""The HTTP API's error table: which status and ``error`` code stands for which library error.

The server answers a library error with :func:`status_for`'s status and code; the remote client
(``cenotaph.Client``) reads a response back into the same error with :func:`error_for`, so a
caller of ``Client`` catches exactly what a caller of ``Store`` catches. Both sides use this one
table; the client imports nothing of the server.

>>> from cenotaph.errors import StaleWriteError
>>> status_for(StaleWriteError("base_version 3 is older than 4"))
(409, 'stale_write')
>>> type(error_for(409, {"error": "stale_write", "message": "..."})).__name__
'StaleWriteError'
"""

from __future__ import annotations

from .errors import (
    AccessDeniedError,
    CenotaphError,
    CertificateError,
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

__all__ = ["error_for", "status_for"]

# Looked up by exact type first, then along the class's MRO (most specific wins).
_STATUS: dict[type[CenotaphError], tuple[int, str]] = {
    NotFoundError: (404, "not_found"),
    InvalidScopeError: (422, "invalid_scope"),
    InvalidValueError: (422, "invalid_input"),
    DerivedFromForgottenError: (409, "derived_from_forgotten"),
    ForgottenError: (409, "forgotten"),
    StaleWriteError: (409, "stale_write"),
    ScopeClosureError: (409, "scope_closure"),
    ErasureNotProvableError: (409, "not_provable"),
    CertificateError: (422, "invalid_input"),
    KeyProviderError: (503, "unavailable"),
    StorageError: (503, "unavailable"),
}

_BY_CODE: dict[str, type[CenotaphError]] = {
    "not_found": NotFoundError,
    "invalid_scope": InvalidScopeError,
    "invalid_input": InvalidValueError,
    "too_large": InvalidValueError,
    "derived_from_forgotten": DerivedFromForgottenError,
    "forgotten": ForgottenError,
    "stale_write": StaleWriteError,
    "scope_closure": ScopeClosureError,
    "not_provable": ErasureNotProvableError,
    "unavailable": StorageError,
}


def status_for(exc: CenotaphError) -> tuple[int, str]:
    """The HTTP status and ``error`` code the server answers ``exc`` with (500, ``internal`` for
    an error the table does not name)."""
    for cls in type(exc).__mro__:
        if cls in _STATUS:
            return _STATUS[cls]
    return 500, "internal"


def error_for(status: int, body: object) -> CenotaphError:
    """The library error a response with ``status`` and JSON ``body`` stands for (the client's
    side of the table): ``unauthorized``/``forbidden`` are :class:`AccessDeniedError`, a code the
    table does not know is a :class:`StorageError` naming the status."""
    info = body if isinstance(body, dict) else {}
    code = str(info.get("error", ""))
    message = str(info.get("message") or f"the server answered HTTP {status}")
    cls = _BY_CODE.get(code)
    if code in ("unauthorized", "forbidden"):
        return AccessDeniedError(message, status)
    if cls is None:
        return StorageError(f"{message} (HTTP {status})")
    if issubclass(cls, ForgottenError):
        version = info.get("version")
        return cls(message, version if isinstance(version, int) else 0)
    if cls is ErasureNotProvableError:
        return ErasureNotProvableError(message, [str(g) for g in info.get("gaps") or []])
    if cls is ScopeClosureError:
        return ScopeClosureError(message, [str(a) for a in info.get("ancestors") or []])
    return cls(message)
