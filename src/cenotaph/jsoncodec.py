"""Compact JSON encoding on the hot paths, at the C encoder's speed (one place for it).

``json.JSONEncoder.encode`` builds a new C encoder on every call (~2 us, more than encoding a
small value); :func:`compact_encoder` builds it once. The output is byte-for-byte what
``json.JSONEncoder(separators=(",", ":"), ensure_ascii=..., allow_nan=...).encode`` returns, and
errors are the same types (``TypeError`` for a non-JSON type, ``ValueError`` for NaN when
``allow_nan`` is false, ``RecursionError`` for a cycle or too deep a value: there is no
separate cycle check).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json import encoder as _json_encoder

__all__ = ["compact_encoder"]


def _refuse(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def compact_encoder(*, ensure_ascii: bool, allow_nan: bool) -> Callable[[object], str]:
    """A function that encodes one value as compact JSON text."""
    fallback = json.JSONEncoder(
        separators=(",", ":"), ensure_ascii=ensure_ascii, allow_nan=allow_nan, check_circular=False
    ).encode
    make = getattr(_json_encoder, "c_make_encoder", None)
    if make is None:  # an interpreter without the C accelerator
        return fallback
    strings = _json_encoder.encode_basestring_ascii if ensure_ascii else _json_encoder.encode_basestring
    try:
        chunks = make(None, _refuse, strings, None, ":", ",", False, False, allow_nan)
    except TypeError:  # another interpreter's signature: the slower encoder is still right
        return fallback

    def encode(value: object) -> str:
        return "".join(chunks(value, 0))

    return encode
