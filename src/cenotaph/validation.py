"""Input rules for keys, values, subjects, TTLs and metadata (the only place they live).

The limits they enforce are public, in :mod:`cenotaph.limits`: a value is any JSON value whose
compact UTF-8 encoding is at most ``MAX_VALUE_BYTES``; keys are 1..``MAX_KEY_LENGTH`` printable
characters.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from .errors import InvalidValueError
from .jsoncodec import compact_encoder
from .limits import (
    MAX_DERIVED_FROM,
    MAX_JSON_DEPTH,
    MAX_KEY_LENGTH,
    MAX_METADATA_BYTES,
    MAX_OWNER_LENGTH,
    MAX_SUBJECT_LENGTH,
    MAX_SUBJECTS,
    MAX_TTL_SECONDS,
    MAX_VALUE_BYTES,
)

__all__ = [
    "MAX_KEY_LENGTH",
    "MAX_METADATA_BYTES",
    "MAX_OWNER_LENGTH",
    "MAX_SUBJECTS",
    "MAX_SUBJECT_LENGTH",
    "MAX_VALUE_BYTES",
    "MAX_DERIVED_FROM",
    "MAX_JSON_DEPTH",
    "MAX_TTL_SECONDS",
    "check_key",
    "exact_str",
    "flat_copy",
    "check_callback",
    "check_flag",
    "check_metadata",
    "check_owner",
    "check_path",
    "check_reauthorization",
    "check_token_text",
    "echo",
    "check_record_ids",
    "check_subjects",
    "check_ttl",
    "encode_json",
]

MAX_INT_BITS = 14_000  # ~4,200 digits: a default Python (int_max_str_digits 4300) can read it back


def exact_str(text: str) -> str:
    """A ``str`` subclass (``numpy.str_``, a caller's own class) as a plain ``str``: checks then run
    on ``str``'s own methods, and nothing the store keeps or returns is the caller's object."""
    return text if type(text) is str else str.__str__(text)


def check_key(key: object) -> str:
    if not isinstance(key, str):
        raise InvalidValueError(f"key must be a string, got {type(key).__name__}")
    key = exact_str(key)
    if not 1 <= len(key) <= MAX_KEY_LENGTH or not key.isprintable():
        raise InvalidValueError(f"key must be 1..{MAX_KEY_LENGTH} printable characters")
    return key


_ENCODE = compact_encoder(ensure_ascii=False, allow_nan=False)


def encode_json(value: object, what: str = "value", limit: int = MAX_VALUE_BYTES) -> bytes:
    """Compact UTF-8 JSON of ``value``; rejects NaN, non-JSON types and oversized values."""
    _check_tree(value, what)  # first: the encoder recurses in C, so depth must be bounded before
    try:
        text = _ENCODE(value)
    except RecursionError:  # a container whose items() lies to the walk above
        raise InvalidValueError(f"{what} is nested too deeply; use a flatter structure") from None
    except (TypeError, ValueError) as exc:
        raise InvalidValueError(
            f"{what} must be a JSON value (dict, list, str, int, float, bool or None, no NaN): {exc}"
        ) from None
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidValueError(f"{what} contains a lone surrogate; encode text as valid Unicode") from None
    if len(data) > limit:
        raise InvalidValueError(
            f"{what} is {len(data)} bytes of JSON, over the {limit}-byte limit; split it into several keys"
        )
    return data


_FLAT_ATOMS = frozenset({str, float, bool, type(None)})


def _flat(value: object) -> bool:
    """Is ``value`` an atom, or a plain dict of atoms under plain string keys (most values)?
    Then :func:`_check_tree` has nothing to refuse: one pass, no stack."""
    if type(value) in _FLAT_ATOMS:
        return True
    if type(value) is int:
        return value.bit_length() <= MAX_INT_BITS
    if type(value) is not dict:
        return False
    for k, v in value.items():
        if type(k) is not str:
            return False
        item = type(v)
        if item is int:
            if v.bit_length() > MAX_INT_BITS:
                return False
        elif item not in _FLAT_ATOMS:
            return False
    return True


def flat_copy(value: object) -> tuple[object] | None:
    """A private copy of a flat ``value`` (see :func:`_flat`), in a 1-tuple: equal, type for
    type, to what the JSON of the copy parses back to, so a batch write's records need not parse
    their own JSON back. ``None`` for any other value (its JSON is parsed instead). Encode the
    copy, not ``value``: a caller's dict changed meanwhile must not make the two differ."""
    if not _flat(value):
        return None
    return (dict(value),) if type(value) is dict else (value,)


def _check_tree(value: object, what: str) -> None:
    """What the encoder would not refuse, or not safely: nesting deeper than ``MAX_JSON_DEPTH``
    (a value that contains itself never ends; the C encoder would exhaust the C stack when the
    recursion limit is raised), object keys that are not strings (the encoder silently turns
    them into strings), and integers too long for a default Python to read back."""
    if _flat(value):
        return
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list | tuple):
            if depth > MAX_JSON_DEPTH:
                raise InvalidValueError(
                    f"{what} is nested more than {MAX_JSON_DEPTH} levels deep, or contains itself; "
                    "use a flatter structure"
                )
            if isinstance(item, dict):
                pairs = list(item.items())  # what the encoder iterates for a dict subclass too
                if not all(isinstance(k, str) for k, _ in pairs):
                    raise InvalidValueError(
                        f"{what} has an object key that is not a string; JSON keys must be strings"
                    )
                stack.extend((v, depth + 1) for _, v in pairs)
            else:
                stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, int) and not isinstance(item, bool) and item.bit_length() > MAX_INT_BITS:
            raise InvalidValueError(
                f"{what} holds an integer of more than ~4,200 digits; encode it as a string"
            )


def check_subjects(subjects: object) -> list[str]:
    if subjects is None:
        return []
    if isinstance(subjects, str) or not isinstance(subjects, Iterable):
        raise InvalidValueError("subjects must be a list of strings, e.g. ['idp:1234']")
    items = list(subjects)
    if len(items) > MAX_SUBJECTS:
        raise InvalidValueError(f"at most {MAX_SUBJECTS} subjects per record")
    return [check_subject(item) for item in items]


def check_subject(subject: object) -> str:
    text = exact_str(subject) if isinstance(subject, str) else None
    if text is None or not 1 <= len(text) <= MAX_SUBJECT_LENGTH or not text.isprintable():
        raise InvalidValueError(f"a subject must be a string of 1..{MAX_SUBJECT_LENGTH} printable characters")
    return text


def check_owner(owner: object) -> str | None:
    """A forget's owner: None (nobody in particular) or a name of 1..200 printable characters."""
    if owner is None:
        return None
    text = exact_str(owner) if isinstance(owner, str) else None
    if text is None or not 1 <= len(text) <= MAX_OWNER_LENGTH or not text.isprintable():
        raise InvalidValueError(
            f"owner must be None or a string of 1..{MAX_OWNER_LENGTH} printable characters naming who forgets"
        )
    return text


def check_ttl(ttl: object) -> float | None:
    if ttl is None:
        return None
    if isinstance(ttl, timedelta):
        seconds = ttl.total_seconds()
    elif isinstance(ttl, int | float) and not isinstance(ttl, bool):
        seconds = float(ttl) if isinstance(ttl, float) or abs(ttl) <= MAX_TTL_SECONDS else math.inf
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
    if not metadata:
        return {}
    # the store keeps its own copy, made of plain JSON types: what was checked is what is sealed
    copy: dict[str, Any] = json.loads(encode_json(dict(metadata), "metadata", MAX_METADATA_BYTES))
    return copy


def check_record_ids(ids: object) -> tuple[str, ...]:
    if ids is None:
        return ()
    if isinstance(ids, str) or not isinstance(ids, Iterable):
        raise InvalidValueError("derived_from must be a list of record ids")
    items = tuple(ids)
    if len(items) > MAX_DERIVED_FROM:
        raise InvalidValueError(f"derived_from may name at most {MAX_DERIVED_FROM} records")
    found: list[str] = []
    for item in items:
        text = exact_str(item) if isinstance(item, str) else None
        if text is None or not 1 <= len(text) <= 64 or not text.isalnum():
            raise InvalidValueError("derived_from must hold record ids as returned by store.write()")
        found.append(text)
    return tuple(dict.fromkeys(found))


def check_flag(value: object, name: str) -> bool:
    """A boolean option: only True or False (a truthy string such as "no" must not mean yes)."""
    if type(value) is not bool:
        raise InvalidValueError(f"{name} must be True or False")
    return value


def check_callback(callback: object, name: str) -> None:
    """Checked before any work starts, so a bad callback cannot fail half way through."""
    if callback is not None and not callable(callback):
        raise InvalidValueError(f"{name} must be a function (or None)")


def check_token_text(value: object, message: str) -> str:
    """An id or token the store handed out: a non-empty string of printable ASCII; else
    InvalidValueError(``message``)."""
    if not isinstance(value, str) or not value or not value.isascii() or not value.isprintable():
        raise InvalidValueError(message)
    return value


# What store.reauthorize() hands out: "crt_" and secrets.token_urlsafe(32) (43 characters).
REAUTHORIZATION_TOKEN = re.compile(r"crt_[A-Za-z0-9_-]{43}")


def check_reauthorization(value: object) -> str:
    """A reauthorization token as the store issues them; anything else is refused at once, even
    by a write that needs no token (a mangled token is a mistake worth hearing about)."""
    message = "reauthorization must be a token returned by store.reauthorize() ('crt_' and 43 characters)"
    token = check_token_text(value, message)
    if not REAUTHORIZATION_TOKEN.fullmatch(token):
        raise InvalidValueError(message)
    return token


def check_path(value: object, what: str) -> Path:
    """A file-system path from the caller: str or os.PathLike, not empty, no NUL, encodable."""
    if not isinstance(value, str | os.PathLike):
        raise InvalidValueError(f"{what} must be a path (str or pathlib.Path)")
    text = os.fspath(value)
    if not isinstance(text, str) or not text or "\0" in text:
        raise InvalidValueError(f"{what} must be a non-empty path without NUL characters")
    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        raise InvalidValueError(
            f"{what} is not a valid file name here; use one the file system can encode"
        ) from None
    return Path(text)


def echo(name: object, limit: int = 40) -> str:
    """A caller-supplied name (an option or operator, never data) quoted for an error message,
    cut to ``limit`` characters."""
    text = repr(name)
    return text if len(text) <= limit else text[: limit - 3] + "..."
