"""Errors over HTTP: one table from the library's error tree to a status and a JSON body.

The table itself is public (:mod:`cenotaph.wire`): the remote client reads it backwards
(:func:`cenotaph.wire.error_for`), so a caller of ``cenotaph.Client`` catches exactly what a caller
of ``Store`` catches. The store's messages name
library calls; a body says them in HTTP's words (:mod:`.spelling`): ``POST /v1/purge``, never
``store.purge()``.
"""

from __future__ import annotations

from typing import Any

from cenotaph.errors import CenotaphError, ErasureNotProvableError, ForgottenError, ScopeClosureError
from cenotaph.remedies import Spelling
from cenotaph.wire import status_for

from .spelling import speak_http

__all__ = [
    "NOT_FOUND_MESSAGE",
    "ApiError",
    "NotVisible",
    "problem_for",
]

NOT_FOUND_MESSAGE = (
    "nothing here for this key: it does not exist, lies outside this key's prefix, or was forgotten; "
    "check the scope, key or id"
)


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
    status, code = status_for(exc)
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
