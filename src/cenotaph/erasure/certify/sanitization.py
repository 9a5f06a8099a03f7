"""The NIST SP 800-88 Rev. 2 certificate-of-sanitization fields of an erasure certificate.

What was done (cryptographic erase, then purge), with which tool, how it was verified (a residue
scan with a positive control, and its sample size), what was sanitized (the store's backend and
where its database is) and who asked (an API key id; a name only when the caller gives one).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from ...errors import InvalidValueError

__all__ = ["SANITIZATION_FIELDS", "Requester", "sanitization_fields"]

STANDARD = "NIST SP 800-88 Rev. 2"
METHOD = "cryptographic erase + purge"
TECHNIQUE = (
    "the record, scope and subject keys that sealed the data were destroyed (cryptographic erase); "
    "the ciphertext rows, write-ahead log and index entries were then removed (purge)"
)
VERIFICATION = "residue scan with positive control"
SANITIZATION_FIELDS = ("sanitization", "sanitized_media", "verification_method", "requester")
_MAX_TEXT = 200


@dataclass(frozen=True, slots=True)
class Requester:
    """Who requested the erasure: the API key id that made it, and a name only if one was given."""

    key_id: str | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        for label, value in (("requester key id", self.key_id), ("requester name", self.name)):
            if value is not None and (
                not isinstance(value, str) or not value.strip() or len(value) > _MAX_TEXT
            ):
                raise InvalidValueError(
                    f"the {label} must be a non-empty string of at most {_MAX_TEXT} characters"
                )

    def to_dict(self) -> dict[str, str | None]:
        found: dict[str, str | None] = {"key_id": self.key_id}
        if self.name is not None:
            found["name"] = self.name
        return found


def tool_version() -> str:
    try:
        return metadata.version("cenotaph")
    except metadata.PackageNotFoundError:
        return "unknown"


def sanitization_fields(
    media: Mapping[str, str], scan: Mapping[str, Any], requester: Requester
) -> dict[str, Any]:
    """The certificate's SP 800-88 fields (content-free: counts, names of methods, the store's location)."""
    return {
        "sanitization": {
            "standard": STANDARD,
            "method": METHOD,
            "technique": TECHNIQUE,
            "tool": "cenotaph",
            "tool_version": tool_version(),
        },
        "verification_method": {
            "method": VERIFICATION,
            "sample_size": int(scan.get("probes") or 0),
            "positive_control": bool(scan.get("positive_control")),
            "files_scanned": int(scan.get("files") or 0),
            "bytes_scanned": int(scan.get("bytes") or 0),
        },
        "sanitized_media": {"backend": media["backend"], "location": media["location"]},
        "requester": requester.to_dict(),
    }
