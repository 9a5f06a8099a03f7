"""``cenotaph attest ID --pdf FILE``: a one-page PDF, rendered with poppler's pdftoppm and read back
with pdftotext, holding the certificate's fields, the verification command and the key's fingerprint."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import cenotaph
from cenotaph.cli.main import cli

USER = "tenant:acme/user:alice"
POPPLER = shutil.which("pdftoppm") and shutil.which("pdftotext")
pytestmark = pytest.mark.skipif(not POPPLER, reason="poppler-utils (pdftoppm, pdftotext) is not installed")


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def verified(tmp_path: Path) -> tuple[Path, str]:
    data = tmp_path / "data"
    with cenotaph.open(data, auto_purge="sync") as store:
        store.write(USER, "diet", "vegetarian")
        request = store.forget(USER, "diet")
        assert request.wait().state == "verified"
    return data, request.id


def test_attest_pdf_is_one_page_with_the_fields_command_and_fingerprint(
    verified: tuple[Path, str], tmp_path: Path
) -> None:
    data, request_id = verified
    cert, pdf = tmp_path / "cert.json", tmp_path / "cert.pdf"
    result = run(
        "attest", request_id, "--out", str(cert), "--pdf", str(pdf),
        "--requester-key-id", "key_42", "--data", str(data),
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["pdf"] == str(pdf.resolve())
    fields = json.loads(cert.read_text())
    assert pdf.read_bytes().startswith(b"%PDF-")
    subprocess.run(["pdftoppm", "-png", "-r", "50", str(pdf), str(tmp_path / "page")], check=True, timeout=60)
    pages = sorted(tmp_path.glob("page*.png"))
    assert len(pages) == 1 and pages[0].read_bytes().startswith(b"\x89PNG")
    text = subprocess.run(
        ["pdftotext", "-layout", str(pdf), "-"], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    flat = " ".join(text.split())
    key = fields["public_key"]
    digest = hashlib.sha256(bytes.fromhex(key)).hexdigest()  # the fingerprint, computed here
    for expected in (
        request_id,
        "cryptographic erase + purge",
        "NIST SP 800-88 Rev. 2",
        f"cenotaph {fields['sanitization']['tool_version']}",
        "residue scan with positive control",
        f"{fields['verification_method']['sample_size']} probes",
        "API key key_42",
        fields["sanitized_media"]["location"],
        f"cenotaph verify-cert cert.json --public-key {key}",
        key,
        fields["log"]["tree_head"]["root_hash"],
    ):
        assert expected in flat, expected
    assert digest in flat.replace(" ", "")
    assert "vegetarian" not in flat and "diet" not in flat and "alice" not in flat  # content-free


def test_a_pdf_is_never_drawn_for_a_certificate_that_does_not_verify(verified: tuple[Path, str]) -> None:
    data, request_id = verified
    with cenotaph.open(data) as store:
        fields = dict(store.attest(request_id).fields)
    fields["verification_method"] = {**fields["verification_method"], "sample_size": 10_000}
    with pytest.raises(cenotaph.CertificateError, match="signature does not match"):
        cenotaph.certificate_pdf(fields)


def test_attest_pdf_into_a_missing_directory_is_bad_input(verified: tuple[Path, str], tmp_path: Path) -> None:
    data, request_id = verified
    result = run("attest", request_id, "--pdf", str(tmp_path / "nope" / "c.pdf"), "--data", str(data))
    assert result.exit_code == 2 and "--pdf" in result.stderr
    assert not (tmp_path / "nope").exists()


def test_verify_cert_says_what_the_log_proves_and_what_it_does_not(
    verified: tuple[Path, str], tmp_path: Path
) -> None:
    data, request_id = verified
    cert = tmp_path / "c.json"
    assert run("attest", request_id, "--out", str(cert), "--data", str(data)).exit_code == 0
    key = json.loads(cert.read_text())["public_key"]
    doc = json.loads(run("verify-cert", str(cert), "--public-key", key).stdout)
    assert doc["valid"] is True
    assert any("Merkle tree" in claim for claim in doc["proves"])
    assert any("audit witness" in claim for claim in doc["does_not_prove"])
    fields = json.loads(cert.read_text())
    fields["log"]["inclusion_path"] = [
        hashlib.sha256(b"forged").hexdigest(),
        *fields["log"]["inclusion_path"][1:],
    ]
    cert.write_text(json.dumps(fields))
    altered = run("verify-cert", str(cert), "--public-key", key)
    assert altered.exit_code == 1 and "inclusion_path does not lead" in " ".join(altered.stderr.split())
