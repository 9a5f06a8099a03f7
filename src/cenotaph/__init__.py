"""cenotaph: a memory store for AI agents whose erasure claims are true statements about bytes.

>>> import cenotaph, tempfile
>>> store = cenotaph.open(tempfile.mkdtemp())
>>> rec = store.write("tenant:acme/user:alice", "diet", "vegetarian")
>>> request = store.forget("tenant:acme/user:alice", "diet")   # returns once keys are destroyed
>>> store.read("tenant:acme/user:alice", "diet") is None
True
>>> request.wait().state                                       # purged and scanned in the background
'verified'
>>> store.close()
"""

from __future__ import annotations

from . import errors
from .crypto.provider import KeyProvider, LocalKeyring
from .erasure.certificate import verify_certificate
from .errors import (
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
from .model import (
    BackupInfo,
    Certificate,
    ErasureRequest,
    ErasureStatus,
    LayerStatus,
    PurgeReport,
    Record,
    Retention,
    RotationReport,
    SearchHit,
)
from .scope import Scope
from .store import Store, StoreSession, restore
from .store import open_store as open

__version__ = "0.1.0"

__all__ = [
    "BackupInfo",
    "CenotaphError",
    "Certificate",
    "CertificateError",
    "DerivedFromForgottenError",
    "ErasureNotProvableError",
    "ErasureRequest",
    "ErasureStatus",
    "ForgottenError",
    "InvalidScopeError",
    "InvalidValueError",
    "KeyProvider",
    "KeyProviderError",
    "NotFoundError",
    "LayerStatus",
    "LocalKeyring",
    "PurgeReport",
    "Record",
    "Retention",
    "RotationReport",
    "Scope",
    "ScopeClosureError",
    "SearchHit",
    "StaleWriteError",
    "StorageError",
    "Store",
    "StoreSession",
    "errors",
    "open",
    "restore",
    "verify_certificate",
]
