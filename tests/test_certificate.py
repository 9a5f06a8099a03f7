"""Erasure certificates: canonical, signed, and any change to any field fails verification.

Decision pinned here: verification is over the certificate's meaning, so JSON that was re-indented or had its
keys reordered still verifies; every change of a value, a field name or the signature fails.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from cenotaph.erasure.certify.certificate import (
    CERTIFICATE_FORMAT,
    REQUIRED_FIELDS,
    Signer,
    verify_certificate,
)
from cenotaph.errors import CertificateError, InvalidValueError
from cenotaph.model import Certificate, canonical_json


def _fields() -> dict[str, Any]:
    """A realistic, content-free field set: tokens, versions, counts, timestamps."""
    return {
        "request_id": "er_01J9Z3K5Q8",
        "target": "3f" * 32,
        "target_kind": "subject",
        "mode": "compliance",
        "requested_at": "2025-03-01T12:00:00+00:00",
        "verified_at": "2025-03-01T12:00:07+00:00",
        "forget_version": 42,
        "layers": {
            "keys": {"state": "done", "evidence": {"destroyed": 3}},
            "rows": {"state": "done", "evidence": {"removed": 17}},
            "wal": {"state": "done", "evidence": {"truncated": True}},
        },
        "scan": {"files": 4, "bytes": 81920, "probes": 51, "matches": 0, "positive_control": True},
        "horizon": None,
        "horizon_reason": "backup bk_7 retains KEK epoch 2",
        "root_of_trust": "local-file",
        "audit_head": "a1" * 32,
    }


@pytest.fixture(scope="module")
def signer() -> Signer:
    return Signer.generate()


@pytest.fixture(scope="module")
def certificate(signer: Signer) -> Certificate:
    return signer.sign_certificate(_fields())


def _altered(value: Any) -> Any:
    """A different JSON value of the same kind where possible."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return value[:-1] + ("0" if value[-1:] != "0" else "1")
    if isinstance(value, dict):
        return {**value, "extra": 1}
    return "now-a-string"  # None


# --- round trips -------------------------------------------------------------------------------


def test_signed_certificate_has_every_field_and_a_hex_signature(
    signer: Signer, certificate: Certificate
) -> None:
    assert set(certificate.fields) == {*REQUIRED_FIELDS, "signature"}
    assert certificate["format"] == CERTIFICATE_FORMAT
    assert certificate["public_key"] == signer.public_key_hex
    assert len(certificate.signature) == 128
    assert certificate.signature == certificate.signature.lower()
    bytes.fromhex(certificate.signature)


@pytest.mark.parametrize(
    "form",
    ["certificate", "json_str", "json_bytes", "dict"],
)
@pytest.mark.parametrize("key_form", ["hex", "raw"])
def test_round_trip_in_every_accepted_form(
    signer: Signer, certificate: Certificate, form: str, key_form: str
) -> None:
    given: Any = {
        "certificate": certificate,
        "json_str": certificate.to_json(),
        "json_bytes": certificate.to_json().encode("utf-8"),
        "dict": certificate.to_dict(),
    }[form]
    key: str | bytes = signer.public_key_hex if key_form == "hex" else bytes.fromhex(signer.public_key_hex)
    assert verify_certificate(given, key) == certificate


def test_uppercase_hex_public_key_is_accepted(signer: Signer, certificate: Certificate) -> None:
    assert verify_certificate(certificate, signer.public_key_hex.upper()) == certificate


def test_signature_is_ed25519_over_the_canonical_json_of_every_other_field(
    signer: Signer, certificate: Certificate
) -> None:
    body = {name: value for name, value in certificate.fields.items() if name != "signature"}
    public = Ed25519PublicKey.from_public_bytes(bytes.fromhex(signer.public_key_hex))
    public.verify(bytes.fromhex(certificate.signature), canonical_json(body).encode("utf-8"))


def test_json_is_canonical(certificate: Certificate) -> None:
    text = certificate.to_json()
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    top_keys = list(json.loads(text))
    assert top_keys == sorted(top_keys)
    assert ", " not in text and ": " not in text and "\n" not in text


def test_signer_round_trips_through_private_bytes(signer: Signer) -> None:
    raw = signer.private_bytes()
    assert len(raw) == 32
    again = Signer.from_private_bytes(raw)
    assert again.public_key_hex == signer.public_key_hex
    # Ed25519 is deterministic: the same key signs the same fields identically.
    assert again.sign_certificate(_fields()) == signer.sign_certificate(_fields())


def test_public_key_hex_is_64_lowercase_hex(signer: Signer) -> None:
    assert len(signer.public_key_hex) == 64
    assert bytes.fromhex(signer.public_key_hex).hex() == signer.public_key_hex


def test_private_key_must_be_32_bytes() -> None:
    with pytest.raises(InvalidValueError, match="32 raw bytes"):
        Signer.from_private_bytes(b"\x00" * 31)


def test_whitespace_and_key_order_do_not_matter(signer: Signer, certificate: Certificate) -> None:
    reordered = dict(reversed(list(certificate.to_dict().items())))
    pretty = json.dumps(reordered, indent=4, ensure_ascii=True)
    assert pretty != certificate.to_json()
    assert verify_certificate(pretty, signer.public_key_hex) == certificate


def test_verified_certificate_is_detached_from_the_input(signer: Signer, certificate: Certificate) -> None:
    given = certificate.to_dict()
    verified = verify_certificate(given, signer.public_key_hex)
    given["layers"]["keys"]["state"] = "failed"
    assert verified == certificate


# --- signing -------------------------------------------------------------------------------------


def test_signer_sets_format_and_public_key_itself(signer: Signer) -> None:
    forged = {**_fields(), "format": "other/9", "public_key": "00" * 32}
    certificate = signer.sign_certificate(forged)
    assert certificate["format"] == CERTIFICATE_FORMAT
    assert certificate["public_key"] == signer.public_key_hex
    verify_certificate(certificate, signer.public_key_hex)


@pytest.mark.parametrize("name", [n for n in REQUIRED_FIELDS if n not in ("format", "public_key")])
def test_signer_refuses_a_missing_field(signer: Signer, name: str) -> None:
    fields = _fields()
    del fields[name]
    with pytest.raises(InvalidValueError, match=name):
        signer.sign_certificate(fields)


def test_signer_refuses_a_signature_field(signer: Signer) -> None:
    with pytest.raises(InvalidValueError, match="signature"):
        signer.sign_certificate({**_fields(), "signature": "00" * 64})


@pytest.mark.parametrize("bad", [float("nan"), object(), {1, 2}])
def test_signer_refuses_values_that_are_not_json(signer: Signer, bad: Any) -> None:
    with pytest.raises(InvalidValueError, match="plain JSON"):
        signer.sign_certificate({**_fields(), "scan": {"bytes": bad}})


def test_signed_fields_are_detached_from_the_caller(signer: Signer) -> None:
    fields = _fields()
    certificate = signer.sign_certificate(fields)
    fields["scan"]["matches"] = 5
    assert certificate["scan"]["matches"] == 0
    verify_certificate(certificate, signer.public_key_hex)


# --- tampering -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [*REQUIRED_FIELDS, "signature"])
def test_changing_any_field_fails(signer: Signer, certificate: Certificate, name: str) -> None:
    tampered = certificate.to_dict()
    tampered[name] = _altered(tampered[name])
    with pytest.raises(CertificateError):
        verify_certificate(tampered, signer.public_key_hex)
    with pytest.raises(CertificateError):
        verify_certificate(json.dumps(tampered), signer.public_key_hex)


@pytest.mark.parametrize(
    ("layer", "evidence", "value"),
    [("keys", "destroyed", 2), ("wal", "truncated", False), ("rows", "removed", "17")],
)
def test_changing_nested_evidence_fails(
    signer: Signer, certificate: Certificate, layer: str, evidence: str, value: Any
) -> None:
    tampered = certificate.to_dict()
    tampered["layers"][layer]["evidence"][evidence] = value
    with pytest.raises(CertificateError, match="altered"):
        verify_certificate(tampered, signer.public_key_hex)


def test_changing_any_byte_of_the_json_fails(signer: Signer, certificate: Certificate) -> None:
    text = certificate.to_json()
    for position, char in enumerate(text):
        for replacement in {"x" if char != "x" else "y", " "} - {char}:
            tampered = text[:position] + replacement + text[position + 1 :]
            with pytest.raises(CertificateError):
                verify_certificate(tampered, signer.public_key_hex)


def test_int_to_float_is_a_change(signer: Signer, certificate: Certificate) -> None:
    tampered = certificate.to_dict()
    tampered["forget_version"] = 42.0
    with pytest.raises(CertificateError, match="altered"):
        verify_certificate(tampered, signer.public_key_hex)


@pytest.mark.parametrize("name", [*REQUIRED_FIELDS, "signature"])
def test_removing_a_field_fails(signer: Signer, certificate: Certificate, name: str) -> None:
    tampered = certificate.to_dict()
    del tampered[name]
    with pytest.raises(CertificateError, match=f"missing {name}"):
        verify_certificate(tampered, signer.public_key_hex)


def test_adding_a_field_fails(signer: Signer, certificate: Certificate) -> None:
    tampered = {**certificate.to_dict(), "note": "harmless"}
    with pytest.raises(CertificateError, match="altered or not issued by this key"):
        verify_certificate(tampered, signer.public_key_hex)


def test_extra_fields_signed_by_the_store_verify(signer: Signer) -> None:
    certificate = signer.sign_certificate({**_fields(), "store_version": "0.1.0"})
    assert verify_certificate(certificate.to_json(), signer.public_key_hex) == certificate


def test_resigned_with_another_key_fails_against_the_original_key(
    signer: Signer, certificate: Certificate
) -> None:
    impostor = Signer.generate()
    forged = impostor.sign_certificate({**_fields(), "horizon": "2025-03-02T00:00:00+00:00"})
    with pytest.raises(CertificateError, match="issued by another store"):
        verify_certificate(forged, signer.public_key_hex)
    # An impostor who also copies the genuine public_key field is caught by the signature.
    spoofed = {**forged.to_dict(), "public_key": signer.public_key_hex}
    with pytest.raises(CertificateError, match="altered or not issued by this key"):
        verify_certificate(spoofed, signer.public_key_hex)


def test_verifying_with_another_stores_key_says_so(certificate: Certificate) -> None:
    with pytest.raises(CertificateError, match="another store"):
        verify_certificate(certificate, Signer.generate().public_key_hex)


@pytest.mark.parametrize("position", range(0, 128, 9))
def test_signature_altered_by_one_character_fails(
    signer: Signer, certificate: Certificate, position: int
) -> None:
    signature = certificate.signature
    original = signature[position]
    hex_digits = "0123456789abcdef"
    replacements = {hex_digits[(hex_digits.index(original) + 1) % 16], original.upper()} - {original}
    for replacement in replacements:
        altered = signature[:position] + replacement + signature[position + 1 :]
        with pytest.raises(CertificateError):
            verify_certificate({**certificate.to_dict(), "signature": altered}, signer.public_key_hex)


# --- malformed input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("{not json", "not valid JSON"),
        (b"\xff\xfe{}", "not UTF-8"),
        ("[1, 2]", "must be an object"),
        ('"text"', "must be an object"),
        (42, "not int"),
    ],
)
def test_unparsable_input_is_refused(signer: Signer, given: Any, message: str) -> None:
    with pytest.raises(CertificateError, match=message):
        verify_certificate(given, signer.public_key_hex)


def test_duplicate_keys_are_refused(signer: Signer, certificate: Certificate) -> None:
    text = certificate.to_json()
    duplicated_top = text[:-1] + ',"mode":"operational"}'
    with pytest.raises(CertificateError, match="repeats a key"):
        verify_certificate(duplicated_top, signer.public_key_hex)
    duplicated_nested = text.replace('"matches":0', '"matches":1,"matches":0')
    assert duplicated_nested != text
    with pytest.raises(CertificateError, match="repeats a key"):
        verify_certificate(duplicated_nested, signer.public_key_hex)


def test_nan_in_text_is_refused(signer: Signer, certificate: Certificate) -> None:
    text = certificate.to_json().replace('"bytes":81920', '"bytes":NaN')
    with pytest.raises(CertificateError, match="NaN"):
        verify_certificate(text, signer.public_key_hex)


def test_wrong_format_is_refused(signer: Signer, certificate: Certificate) -> None:
    tampered = {**certificate.to_dict(), "format": "cenotaph-erasure-certificate/2"}
    with pytest.raises(CertificateError, match="unknown certificate format"):
        verify_certificate(tampered, signer.public_key_hex)


@pytest.mark.parametrize("signature", ["", "00" * 63, "zz" * 64, None, 7])
def test_malformed_signature_is_refused(signer: Signer, certificate: Certificate, signature: Any) -> None:
    tampered = {**certificate.to_dict(), "signature": signature}
    with pytest.raises(CertificateError, match="signature is malformed"):
        verify_certificate(tampered, signer.public_key_hex)


def test_uppercase_signature_is_refused(signer: Signer, certificate: Certificate) -> None:
    tampered = {**certificate.to_dict(), "signature": certificate.signature.upper()}
    with pytest.raises(CertificateError, match="signature is malformed"):
        verify_certificate(tampered, signer.public_key_hex)


@pytest.mark.parametrize("key", ["", "ab" * 31, "zz" * 32, b"\x00" * 31, b"\x00" * 64])
def test_malformed_public_key_argument_is_refused(certificate: Certificate, key: Any) -> None:
    with pytest.raises(CertificateError, match="public key is malformed"):
        verify_certificate(certificate, key)


def test_malformed_public_key_field_is_refused(signer: Signer, certificate: Certificate) -> None:
    tampered = {**certificate.to_dict(), "public_key": "not-a-key"}
    with pytest.raises(CertificateError, match="public_key is malformed"):
        verify_certificate(tampered, signer.public_key_hex)
