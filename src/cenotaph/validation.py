"""Input rules for keys, values, subjects, TTLs and metadata (the only place they live).

Limits are documented in the README: a value is any JSON value whose compact UTF-8 encoding is
at most ``MAX_VALUE_BYTES``; keys are 1..``MAX_KEY_LENGTH`` printable characters.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

from .errors import InvalidValueError

__all__ = [
    "MAX_KEY_LENGTH",
    "MAX_METADATA_BYTES",
    "MAX_SUBJECTS",
    "MAX_SUBJECT_LENGTH",
    "MAX_VALUE_BYTES",
    "check_key",
    "check_metadata",
    "check_record_ids",
    "check_subjects",
    "check_ttl",
    "encode_json",
]

MAX_VALUE_BYTES = 1 << 20
MAX_KEY_LENGTH = 512
MAX_METADATA_BYTES = 64 << 10
MAX_SUBJECTS = 64
MAX_SUBJECT_LENGTH = 512
MAX_TTL_SECONDS = 100 * 365 * 86400.0
MAX_DERIVED_FROM = 1024


def check_key(key: object) -> str:
    if not isinstance(key, str):
        raise InvalidValueError(f"key must be a string, got {type(key).__name__}")
    if not 1 <= len(key) <= MAX_KEY_LENGTH or not key.isprintable():
        raise InvalidValueError(f"key must be 1..{MAX_KEY_LENGTH} printable characters")
    return key


# one encoder for every value: json.dumps with options builds a new one per call
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encode_json(value: object, what: str = "value", limit: int = MAX_VALUE_BYTES) -> bytes:
    """Compact UTF-8 JSON of ``value``; rejects NaN, non-JSON types and oversized values."""
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError) as exc:
        raise InvalidValueError(
            f"{what} must be a JSON value (dict, list, str, int, float, bool or None, no NaN): {exc}"
        ) from None
    _check_keys(value, what)
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidValueError(f"{what} contains a lone surrogate; encode text as valid Unicode") from None
    if len(data) > limit:
        raise InvalidValueError(
            f"{what} is {len(data)} bytes of JSON, over the {limit}-byte limit; split it into several keys"
        )
    return data


def _check_keys(value: object, what: str) -> None:
    """json.dumps silently turns non-string object keys into strings; refuse them instead."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if not all(isinstance(k, str) for k in item):
                raise InvalidValueError(
                    f"{what} has an object key that is not a string; JSON keys must be strings"
                )
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


def check_subjects(subjects: object) -> list[str]:
    if subjects is None:
        return []
    if isinstance(subjects, str) or not isinstance(subjects, Iterable):
        raise InvalidValueError("subjects must be a list of strings, e.g. ['idp:1234']")
    items = list(subjects)
    if len(items) > MAX_SUBJECTS:
        raise InvalidValueError(f"at most {MAX_SUBJECTS} subjects per record")
    for item in items:
        check_subject(item)
    return items


def check_subject(subject: object) -> str:
    if (
        not isinstance(subject, str)
        or not 1 <= len(subject) <= MAX_SUBJECT_LENGTH
        or not subject.isprintable()
    ):
        raise InvalidValueError(f"a subject must be a string of 1..{MAX_SUBJECT_LENGTH} printable characters")
    return subject


def check_ttl(ttl: object) -> float | None:
    if ttl is None:
        return None
    if isinstance(ttl, timedelta):
        seconds = ttl.total_seconds()
    elif isinstance(ttl, int | float) and not isinstance(ttl, bool):
        seconds = float(ttl)
    else:
        raise InvalidValueError("ttl must be seconds (a number) or a datetime.timedelta")
    if not math.isfinite(seconds) or seconds <= 0 or seconds > MAX_TTL_SECONDS:
        raise InvalidValueError("ttl must be a positive number of seconds, at most 100 years")
    return seconds


def check_metadata(metadata: object) -> dict[str, Any]:
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping) or not all(isinstance(k, str) for k in metadata):
        raise InvalidValueError("metadata must be a JSON object with string keys")
    encode_json(dict(metadata), "metadata", MAX_METADATA_BYTES)
    return dict(metadata)


def check_record_ids(ids: object) -> tuple[str, ...]:
    if ids is None:
        return ()
    if isinstance(ids, str) or not isinstance(ids, Iterable):
        raise InvalidValueError("derived_from must be a list of record ids")
    items = tuple(ids)
    if len(items) > MAX_DERIVED_FROM:
        raise InvalidValueError(f"derived_from may name at most {MAX_DERIVED_FROM} records")
    for item in items:
        if not isinstance(item, str) or not 1 <= len(item) <= 64 or not item.isalnum():
            raise InvalidValueError("derived_from must hold record ids as returned by write()")
    return tuple(dict.fromkeys(items))
