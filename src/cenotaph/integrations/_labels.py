"""Reversible encoding of framework names (namespace labels, keys, paths) into cenotaph names.

A scope id is 1..200 printable characters without ``/``, a key 1..512 printable characters;
framework names may hold anything. ``%``, ``/`` and every non-printable character are
percent-encoded (UTF-8 bytes), everything else is kept, so ordinary names stay readable in
exports. The empty string, which cenotaph cannot hold, is written as a lone ``%`` (a real ``%`` is
always ``%25``, so the two never meet).
"""

from __future__ import annotations

from urllib.parse import unquote

__all__ = ["decode_label", "encode_label"]

_EMPTY = "%"


def _escape(char: str) -> str:
    if char in "%/" or not char.isprintable():
        return "".join(f"%{byte:02X}" for byte in char.encode("utf-8"))
    return char


def encode_label(text: str) -> str:
    """``text`` as printable characters without ``/``; :func:`decode_label` reverses it."""
    if not text:
        return _EMPTY
    if text.isprintable() and "%" not in text and "/" not in text:
        return text
    return "".join(_escape(c) for c in text)


def decode_label(encoded: str) -> str:
    if "%" not in encoded:
        return encoded
    if encoded == _EMPTY:
        return ""
    return unquote(encoded, errors="strict")
