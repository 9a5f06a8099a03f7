"""The NIST SP 800-88 Rev. 2 fields of a certificate, on every backend: what was done, with which tool,
how it was verified, what was sanitized and who asked -- signed like the rest."""

from __future__ import annotations

import json
from importlib import metadata

import pytest
from tests.kit.stores import StoreFactory

import cenotaph
from cenotaph import CertificateError, InvalidValueError

SCOPE = "tenant:acme/user:alice"


def _verified(store_factory: StoreFactory) -> tuple[cenotaph.Store, str]:
    store = store_factory(purge=True)
    store.write(SCOPE, "k", "v")
    request = store.forget(SCOPE, "k")
    request.wait()
    return store, request.id


def test_a_certificate_states_method_tool_verification_media_and_requester(
    store_factory: StoreFactory, backend: str
) -> None:
    store, request_id = _verified(store_factory)
    fields = store.attest(request_id, requester_key_id="key_7f3a").fields
    assert fields["sanitization"]["method"] == "cryptographic erase + purge"
    assert fields["sanitization"]["standard"] == "NIST SP 800-88 Rev. 2"
    assert (fields["sanitization"]["tool"], fields["sanitization"]["tool_version"]) == (
        "cenotaph",
        metadata.version("cenotaph"),
    )
    verification = fields["verification_method"]
    assert verification["method"] == "residue scan with positive control"
    assert verification["sample_size"] == fields["scan"]["probes"] > 0
    assert verification["positive_control"] is True
    media = fields["sanitized_media"]
    assert media["backend"] == {"sqlite": "sqlite", "postgres": "postgresql"}[backend]
    if backend == "sqlite":
        assert str(store.path) in media["location"]
    else:
        assert "schema" in media["location"] and "@" not in media["location"]  # no user:password@
    assert fields["requester"] == {"key_id": "key_7f3a"}  # no name unless one is given
    named = store.attest(request_id, requester_name="Data Protection Office").fields["requester"]
    assert named == {"key_id": None, "name": "Data Protection Office"}
    text = store.attest(request_id).to_json()
    assert cenotaph.verify_certificate(text, store.public_key)["requester"] == {"key_id": None}
    altered = json.loads(text)
    altered["verification_method"]["sample_size"] += 1
    with pytest.raises(CertificateError, match="signature does not match"):
        cenotaph.verify_certificate(json.dumps(altered), store.public_key)
    with pytest.raises(InvalidValueError, match="requester name"):
        store.attest(request_id, requester_name="  ")
