"""Key derivation is a storage format: records sealed by an earlier release must still open.

``derive`` MACs the label and each input framed by its 2-byte length; ``content_key`` and
``lineage_key`` build that message on a fast path. These tests pin both to an independent
implementation of the framing and to fixed known answers.
"""

from __future__ import annotations

import hashlib
import hmac

import pytest

from cenotaph.crypto.aead import derive
from cenotaph.crypto.keys import content_key, content_key_of, group_part, lineage_key


def _reference(seed: bytes, label: bytes, *inputs: bytes) -> bytes:
    mac = hmac.new(seed, label, hashlib.sha256)
    for part in inputs:
        mac.update(len(part).to_bytes(2, "big"))
        mac.update(part)
    return mac.digest()


def _key(n: int) -> bytes:
    return hashlib.sha256(b"test-key-%d" % n).digest()


@pytest.mark.parametrize("scopes", [0, 1, 3])
@pytest.mark.parametrize("subjects", [0, 1, 2])
def test_content_key_is_the_documented_derivation(scopes: int, subjects: int) -> None:
    seed, lineage = _key(0), _key(1)
    scope_keys = [_key(10 + i) for i in range(scopes)]
    subject_keys = [_key(20 + i) for i in range(subjects)]
    expected = _reference(seed, b"content", lineage, *scope_keys, b"|", *subject_keys)
    assert content_key(seed, lineage, scope_keys, subject_keys) == expected


@pytest.mark.parametrize("scopes", [0, 1, 3])
@pytest.mark.parametrize("subjects", [0, 1, 2])
def test_a_groups_cached_part_gives_the_same_content_key(scopes: int, subjects: int) -> None:
    seed, lineage = _key(0), _key(1)
    scope_keys = [_key(10 + i) for i in range(scopes)]
    subject_keys = [_key(20 + i) for i in range(subjects)]
    expected = _reference(seed, b"content", lineage, *scope_keys, b"|", *subject_keys)
    assert content_key_of(seed, lineage, group_part(scope_keys, subject_keys)) == expected
    other = group_part(scope_keys, [*subject_keys, _key(99)])  # one more subject: another key
    assert content_key_of(seed, lineage, other) != expected


@pytest.mark.parametrize("sources", [0, 1, 4])
def test_lineage_key_is_the_documented_derivation(sources: int) -> None:
    keys = [_key(30 + i) for i in range(sources)]
    assert lineage_key(_key(2), keys) == _reference(_key(2), b"lineage", *keys)


@pytest.mark.parametrize("sizes", [(), (32,), (32, 32), (1,), (32, 5, 32), (0,), (300,)])
def test_derive_frames_inputs_of_any_length(sizes: tuple[int, ...]) -> None:
    parts = [bytes([i]) * n for i, n in enumerate(sizes)]
    assert derive(_key(3), b"label", *parts) == _reference(_key(3), b"label", *parts)


def test_derive_known_answers() -> None:
    """Fixed outputs: a change here would make every stored record undecryptable."""
    assert content_key(_key(0), _key(1), [_key(10), _key(11)], [_key(20)]).hex() == CONTENT_KAT
    assert lineage_key(_key(2), []).hex() == LINEAGE_KAT
    assert lineage_key(_key(2), [_key(30), _key(31)]).hex() == LINEAGE_WITH_SOURCES_KAT
    assert content_key(_key(0), _key(1), [_key(10)], []).hex() == CONTENT_NO_SUBJECTS_KAT


CONTENT_KAT = "2532f7e93ede8ea73aba64c50ca737a21e6cece4ded2282dd7b9fc1a5b68ad8e"
LINEAGE_KAT = "628da630bb6a1760d7c7e224a907b26524bcbf4fa748edb41d5255f0d6de2124"
LINEAGE_WITH_SOURCES_KAT = "9a46299c5c4e29f0fd747b4083b27999032bf535fd13e5a0ae6019d3353a5278"
CONTENT_NO_SUBJECTS_KAT = "d46ee6809b440f9ba1a0ad277f67ed6b9bc49b53dcbc3b6531ea7efd9d075ade"
