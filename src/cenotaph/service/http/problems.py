"""Errors over HTTP: one table from the library's error tree to a status and a JSON body.

The remote client reads the same table backwards (:func:`error_for`), so a caller of
``cenotaph.Client`` catches exactly what a caller of ``Store`` catches. The store's messages name
library calls; a body says them in HTTP's words (:mod:`.spelling`): ``POST /v1/purge``, never
``store.purge()``.
"""

from __future__ import annotations

from typing import Any

from ...errors import (
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
from ...remedies import Spelling
from .spelling import speak_http

__all__ = [
    "NOT_FOUND_MESSAGE",
    "ApiError",
    "NotVisible",
    "error_for",
    "problem_for",
]

NOT_FOUND_MESSAGE = (
    "nothing here for this key: it does not exist, lies outside this key's prefix, or was forgotten; "
    "check the scope, key or id"
)

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


class ApiError(Exception):
    """An HTTP-level refusal (auth, role, body size) with its status, code and message."""

    def __init__(self, status: int, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details


class NotVisible(ApiError):
    """Foreign, missing or forgotten: one status, one body, whatever the reason."""

    def __init__(self) -> None:
        super().__init__(404, "not_found", NOT_FOUND_MESSAGE)


def problem_for(exc: CenotaphError, spelling: Spelling = speak_http) -> tuple[int, dict[str, Any]]:
    """The status and body for a library error, its words in ``spelling`` (the console passes its
    own). Messages name only the caller's own scopes."""
    for cls in type(exc).__mro__:
        if cls in _STATUS:
            status, code = _STATUS[cls]
            break
    else:
        status, code = 500, "internal"
    if status == 404:
        return status, {"error": code, "message": NOT_FOUND_MESSAGE}
    body: dict[str, Any] = {"error": code, "message": spelling(str(exc))}
    if isinstance(exc, ForgottenError):
        body["version"] = exc.version
    if isinstance(exc, ErasureNotProvableError):
        body["gaps"] = [spelling(gap) for gap in exc.gaps]
    if isinstance(exc, ScopeClosureError):
        body["ancestors"] = list(exc.ancestors)
    if status == 503:
        body["message"] = "the store is busy or its key provider failed; retry shortly, then ask the operator"
    return status, body


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


def error_for(status: int, body: object) -> CenotaphError:
    """The library error a response stands for (the client's side of the table above)."""
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
