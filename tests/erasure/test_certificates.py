"""S6/W5/S5 through the store: what ``attest`` signs, who can check it, and when it refuses.

- A verified compliance request attests; the certificate verifies with nothing but its JSON text and
  the store's public key hex, in a fresh process that has never seen the store.
- Changing, removing or adding any top-level field breaks it (CertificateError).
- It is canonical JSON with every S6 field, and content-free: no canary, scope id, key name, subject
  id, unsalted hash of one, or key material.
- An operational forget never reports erasure: confirm_erasure and attest always raise.
- The horizon is None (with a reason) until rotate_keys destroys the forget's epochs; then it is set,
  and a certificate issued afterwards states it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from tests.erasure._erasure_data import A, B, assert_gone, assert_readable, populate
from tests.kit.stores import StoreFactory

import cenotaph
from cenotaph.errors import CertificateError, ErasureNotProvableError

# the certificate format, spelled out here (not imported from the implementation)
S6_FIELDS = (
    "format",
    "request_id",
    "target",
    "target_kind",
    "mode",
    "requested_at",
    "verified_at",
    "forget_version",
    "layers",
    "scan",
    "horizon",
    "horizon_reason",
    "root_of_trust",
    "audit_head",
    "public_key",
    "signature",
)
OPERATIONAL = "operational forget never reports erasure"

VERIFY_IN_FRESH_PROCESS = r"""
import sys, cenotaph
cert = cenotaph.verify_certificate(sys.stdin.read(), sys.argv[1])
print("verified", cert["request_id"])
"""


@pytest.fixture
def erased(store_factory: StoreFactory) -> Any:
    """A store in which subject a was erased (verified), b kept: (store, a, b, request)."""
    store = store_factory(purge=True)
    a = populate(store, A, "A", short=4, long=1)
    b = populate(store, B, "B", short=4, long=0)
    request = store.forget_subject(A)
    assert request.status().state == "verified"
    return store, a, b, request


def _verify_elsewhere(text: str, public_key: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", VERIFY_IN_FRESH_PROCESS, public_key],
        input=text,
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
        check=False,
    )


def test_a_certificate_verifies_from_its_json_and_the_public_key_alone(erased: Any, tmp_path: Path) -> None:
    store, _a, _b, request = erased
    certificate = store.attest(request.id)
    text = certificate.to_json()
    public_key = store.public_key
    assert len(public_key) == 64 and int(public_key, 16) >= 0
    assert cenotaph.verify_certificate(text, public_key) == certificate
    assert cenotaph.verify_certificate(json.loads(text), bytes.fromhex(public_key)) == certificate
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = _verify_elsewhere(text, public_key, elsewhere)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["verified", request.id]
    # and the same fresh process refuses it under another key
    other = _verify_elsewhere(text, "ab" * 32, elsewhere)
    assert other.returncode != 0 and "CertificateError" in other.stderr


def _changed(value: Any) -> list[Any]:
    """Values that differ from ``value`` (same type first, then another type)."""
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value + 1, str(value)]
    if isinstance(value, str):
        if value and value[-1] in "0123456789abcdef":
            flipped = value[:-1] + ("0" if value[-1] != "0" else "1")
        else:
            flipped = value + "x"
        return [flipped, None]
    if isinstance(value, dict):
        extra = {**value, "extra": 1}
        return [extra, {}] if value else [extra]
    if value is None:
        return ["2030-01-01T00:00:00+00:00", 0]
    if isinstance(value, list):
        return [[*value, 1]]
    raise AssertionError(f"unexpected value {value!r}")


def test_changing_removing_or_adding_any_top_level_field_fails(erased: Any) -> None:
    store, _a, _b, request = erased
    certificate = store.attest(request.id)
    public_key = store.public_key
    original = certificate.to_dict()
    assert set(original) >= set(S6_FIELDS)
    for name, value in original.items():
        for new in _changed(value):
            tampered = copy.deepcopy(original)
            tampered[name] = new
            with pytest.raises(CertificateError):
                cenotaph.verify_certificate(json.dumps(tampered), public_key)
        removed = {k: v for k, v in original.items() if k != name}
        with pytest.raises(CertificateError):
            cenotaph.verify_certificate(removed, public_key)
    with pytest.raises(CertificateError):
        cenotaph.verify_certificate({**original, "note": "added"}, public_key)
    # nested evidence is signed too
    nested = copy.deepcopy(original)
    nested["scan"]["matches"] = 1
    with pytest.raises(CertificateError):
        cenotaph.verify_certificate(nested, public_key)
    assert cenotaph.verify_certificate(original, public_key) == certificate  # the untouched one still does


@pytest.mark.sqlite_only
def test_a_certificate_has_every_s6_field_and_is_canonical_and_content_free(
    erased: Any, store_factory: StoreFactory
) -> None:
    store, a, _b, request = erased
    certificate = store.attest(request.id)
    text = certificate.to_json()
    fields = json.loads(text)
    assert set(S6_FIELDS) <= set(fields)
    assert text == json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert fields["format"] == "cenotaph-erasure-certificate/1"
    assert fields["request_id"] == request.id
    assert fields["target_kind"] == "subject"
    assert fields["mode"] == "compliance"
    assert fields["forget_version"] == request.version
    assert fields["public_key"] == store.public_key
    assert fields["root_of_trust"] == "local-file"
    assert len(fields["signature"]) == 128 and int(fields["signature"], 16) >= 0
    assert len(fields["target"]) == 64 and int(fields["target"], 16) >= 0  # an HMAC-SHA256 token
    assert len(fields["audit_head"]) == 64
    assert fields["scan"]["matches"] == 0 and fields["scan"]["probes"] > 0
    assert fields["scan"]["positive_control"] is True
    for layer in ("tombstone", "keys", "rows", "wal", "index", "scan"):
        assert fields["layers"][layer]["state"] == "done", layer
    datetime.fromisoformat(fields["requested_at"])
    datetime.fromisoformat(fields["verified_at"])

    # content-free: nothing that names or hashes what was erased, no key material
    names = [a.canary, A, "user:a", "tenant:t", "session:s1", "short0", "long0"]
    names += [value for _, _, value in a.records.values() if isinstance(value, str)]
    lowered = text.lower()
    for name in names:
        raw = name.encode()
        assert name.lower() not in lowered
        assert raw.hex() not in lowered
        for digest in (hashlib.sha256(raw), hashlib.sha1(raw), hashlib.md5(raw)):
            assert digest.hexdigest() not in lowered
    doc = json.loads((store_factory.data_dir(store) / "keyring" / "keyring.json").read_text())
    for secret in [*doc["epochs"].values(), doc["erasure_secret"], doc["signing_key"]]:
        assert secret.lower() not in lowered


def test_an_operational_forget_never_reports_erasure(store_factory: StoreFactory) -> None:
    with store_factory(purge="background") as store:
        a = populate(store, A, "A", short=3, long=0)
        b = populate(store, B, "B", short=3, long=0)
        request = store.forget(A, mode="operational")
        assert request.mode == "operational"
        assert request.status().state == "tombstoned"
        assert_gone(store, a)
        assert_readable(store, b)
        for _ in range(2):  # before and after purge, and purge again
            with pytest.raises(ErasureNotProvableError) as confirm:
                store.confirm_erasure(request.id)
            assert OPERATIONAL in str(confirm.value)
            assert any(OPERATIONAL in g for g in confirm.value.gaps)
            with pytest.raises(ErasureNotProvableError) as attest:
                store.attest(request.id)
            assert OPERATIONAL in str(attest.value)
            status = request.status()
            assert status.state == "tombstoned"
            assert status.horizon is None
            assert any(OPERATIONAL in g for g in status.gaps)
            report = store.purge()
            assert report.requests[request.id] == "tombstoned"
        assert request.status().layers["reclaim"].state == "done"
        assert request.wait(timeout=1).state == "tombstoned"
        store.rotate_keys()  # not even key destruction turns it into an erasure
        with pytest.raises(ErasureNotProvableError):
            store.attest(request.id)
        assert request.status().horizon is None


def test_the_horizon_is_none_until_rotation_destroys_the_epochs_then_certificates_state_it(
    erased: Any,
) -> None:
    store, _a, b, request = erased
    status = request.status()
    assert status.state == "verified"
    assert status.horizon is None
    reason = status.layers["horizon"].evidence["reason"]
    assert "rotate_keys" in reason
    before = store.attest(request.id)
    assert before["horizon"] is None
    assert isinstance(before["horizon_reason"], str) and before["horizon_reason"]

    report = store.rotate_keys()
    assert 1 in report.destroyed_epochs and report.retained_epochs == ()
    status = request.status()
    assert isinstance(status.horizon, datetime) and status.horizon.tzinfo is not None
    assert "horizon" not in status.layers or status.layers["horizon"].state == "done"
    after = store.attest(request.id)
    cenotaph.verify_certificate(after.to_json(), store.public_key)
    assert after["horizon"] is not None
    assert datetime.fromisoformat(after["horizon"]) == status.horizon
    assert after["horizon_reason"] and after["horizon_reason"] != before["horizon_reason"]
    assert after["verified_at"] == before["verified_at"]
    # stable: a later status and certificate state the same instant
    assert request.status().horizon == status.horizon
    assert store.attest(request.id)["horizon"] == after["horizon"]
    assert_readable(store, b)
