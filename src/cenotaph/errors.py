"""The one error tree of cenotaph.

Every error the library raises on purpose is a :class:`CenotaphError`::

    CenotaphError
    ├── InvalidScopeError          (also ValueError)   malformed scope path
    ├── InvalidValueError          (also ValueError)   bad value, key, option or argument
    │   └── NotFoundError          no erasure request or backup has that id
    ├── ForgottenError             the target is covered by a tombstone (.version = v_f)
    │   └── DerivedFromForgottenError   a derived_from source was forgotten
    ├── StaleWriteError            base_version is older than the record or a forget
    ├── ScopeClosureError          a forget would leave an ancestor copy readable
    ├── ErasureNotProvableError    erasure cannot be proven yet (.gaps)
    ├── CertificateError           a certificate does not verify
    ├── KeyProviderError           the key provider failed or is misconfigured
    ├── StorageError               the database failed, is locked, or is corrupt
    └── AccessDeniedError          a server refused the API key (missing, wrong, revoked) or its role

Messages say what to do next. They may name the caller's own scopes (the caller
already knows them) but never values, and they never reach a log or the audit log.
Driver errors are translated into :class:`StorageError` in the backend only.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "AccessDeniedError",
    "CenotaphError",
    "CertificateError",
    "DerivedFromForgottenError",
    "ErasureNotProvableError",
    "ForgottenError",
    "InvalidScopeError",
    "InvalidValueError",
    "KeyProviderError",
    "NotFoundError",
    "ScopeClosureError",
    "StaleWriteError",
    "StorageError",
]


class CenotaphError(Exception):
    """Base of every error cenotaph raises on purpose."""


class InvalidScopeError(CenotaphError, ValueError):
    """A scope path is malformed."""


class InvalidValueError(CenotaphError, ValueError):
    """A value, key, option or argument is not acceptable."""


class NotFoundError(InvalidValueError):
    """No erasure request or backup has the given id (the CLI exits 1, "not found")."""


class ForgottenError(CenotaphError):
    """The write's target is covered by a tombstone at ``version`` (v_f)."""

    def __init__(self, message: str, version: int) -> None:
        super().__init__(message, version)  # both in args: pickling (multiprocessing) rebuilds it
        self.version = version

    def __str__(self) -> str:
        return str(self.args[0])


class DerivedFromForgottenError(ForgottenError):
    """A record named in ``derived_from`` has been forgotten."""


class StaleWriteError(CenotaphError):
    """``base_version`` is older than the current record or a forget covering it."""


class ScopeClosureError(CenotaphError):
    """A forget would leave the key readable through an ancestor scope."""

    def __init__(self, message: str, ancestors: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.ancestors = tuple(ancestors)


class ErasureNotProvableError(CenotaphError):
    """Erasure cannot be proven (yet); ``gaps`` says why, one reason per item."""

    def __init__(self, message: str, gaps: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.gaps = tuple(gaps)


class CertificateError(CenotaphError):
    """A certificate is malformed or its signature does not verify."""


class KeyProviderError(CenotaphError):
    """The key provider failed, is missing, or is misconfigured."""


class StorageError(CenotaphError):
    """The storage backend failed, is locked for too long, or is corrupt."""


class AccessDeniedError(CenotaphError):
    """A cenotaph server refused the request's API key (``status`` 401) or its role (403)."""

    def __init__(self, message: str, status: int = 401) -> None:
        super().__init__(message, status)
        self.status = status

    def __str__(self) -> str:
        return str(self.args[0])
