"""cenotaph: a memory store for AI agents whose erasure claims are true statements about bytes.

>>> import cenotaph, tempfile
>>> with tempfile.TemporaryDirectory() as data, cenotaph.open(data) as store:
...     _ = store.write("tenant:acme/user:alice", "diet", "vegetarian")
...     request = store.forget("tenant:acme/user:alice", "diet")   # compliance: keys destroyed now
...     print(store.read("tenant:acme/user:alice", "diet"), request.wait().state)  # purged, scanned
...     certificate = store.attest(request.id)                    # signed, holds no names
...     print(cenotaph.verify_certificate(certificate.to_json(), store.public_key)["target_kind"])
None verified
key
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import errors, limits, operations, wire
from .audit.tree_head import check_consistency as verify_consistency
from .consumers import Consumer, ConsumerEvent, ConsumerInfo, TakenRecord
from .crypto.provider import KeyProvider, LocalKeyring
from .erasure.certify.certificate import verify_certificate
from .erasure.certify.pdf import certificate_pdf
from .erasure.entrance import Progress
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
from .index.embedder import Embedder, HashingEmbedder
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

if TYPE_CHECKING:
    from .client import Client

__version__ = "0.1.0"

__all__ = [
    "AccessDeniedError",
    "BackupInfo",
    "CenotaphError",
    "Certificate",
    "CertificateError",
    "Client",
    "Consumer",
    "ConsumerEvent",
    "ConsumerInfo",
    "DerivedFromForgottenError",
    "Embedder",
    "ErasureNotProvableError",
    "ErasureRequest",
    "ErasureStatus",
    "ForgottenError",
    "HashingEmbedder",
    "InvalidScopeError",
    "InvalidValueError",
    "KeyProvider",
    "KeyProviderError",
    "LayerStatus",
    "LocalKeyring",
    "NotFoundError",
    "Progress",
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
    "TakenRecord",
    "certificate_pdf",
    "errors",
    "limits",
    "open",
    "operations",
    "restore",
    "verify_certificate",
    "verify_consistency",
    "wire",
]


def __getattr__(name: str) -> Any:
    # the remote client needs httpx (the server extra): imported on first use, not by `import cenotaph`
    if name == "Client":
        from .client import Client

        return Client
    raise AttributeError(f"module 'cenotaph' has no attribute {name!r}")
