"""A one-page PDF of an erasure certificate, for people who file paper (NIST SP 800-88 Rev. 2 fields).

The PDF is a rendering, not the certificate: what verifies is the JSON, with the command printed on
the page and the public key whose SHA-256 fingerprint the page shows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from ...errors import CertificateError
from ...model import Certificate
from .certificate import verify_certificate

__all__ = ["certificate_pdf", "key_fingerprint"]

_TITLE = "Certificate of Sanitization"
_MARGIN = 14.0


def key_fingerprint(public_key_hex: str) -> str:
    """SHA-256 of the raw Ed25519 public key, in groups of four hex digits."""
    digest = hashlib.sha256(bytes.fromhex(public_key_hex)).hexdigest()
    return " ".join(digest[i : i + 4] for i in range(0, len(digest), 4))


def certificate_pdf(
    certificate: Certificate | str | bytes | Mapping[str, Any], *, json_name: str = "CERTIFICATE.json"
) -> bytes:
    """The PDF bytes of a certificate (verified against its own public key first: a page is never
    drawn for a certificate that does not verify). ``json_name`` is the certificate file's name in
    the verification command printed on the page."""
    try:
        from fpdf import FPDF
    except ImportError as exc:  # pragma: no cover - fpdf2 is a dependency
        raise CertificateError("the PDF needs fpdf2: pip install fpdf2") from exc
    fields = _fields(certificate)
    checked = verify_certificate(fields, str(fields.get("public_key", "")))
    rows = _rows(checked.fields, json_name)
    pdf = FPDF(format="A4")
    pdf.set_auto_page_break(False)
    pdf.set_margins(_MARGIN, _MARGIN)
    pdf.add_page()
    pdf.set_title(_TITLE)
    pdf.set_creator("cenotaph")
    pdf.set_font("Helvetica", "B", 15)
    pdf.cell(0, 8, _TITLE, new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("Helvetica", "", 8.5)
    pdf.cell(
        0, 5, "Fields of NIST SP 800-88 Rev. 2; issued and signed by cenotaph", new_x="LMARGIN", new_y="NEXT"
    )
    pdf.ln(2)
    width = pdf.w - 2 * _MARGIN
    label_w = 44.0
    for label, value in rows:
        if label == "":
            pdf.ln(1.5)
            pdf.set_font("Helvetica", "B", 10)
            pdf.cell(0, 6, _latin1(value), new_x="LMARGIN", new_y="NEXT")
            continue
        y = pdf.get_y()
        pdf.set_font("Helvetica", "B", 8)
        pdf.multi_cell(label_w, 4.2, _latin1(label), align="L", new_x="RIGHT", new_y="TOP")
        pdf.set_xy(_MARGIN + label_w, y)
        pdf.set_font("Courier" if _is_code(label) else "Helvetica", "", 8)
        pdf.multi_cell(width - label_w, 4.2, _latin1(value), align="L", new_x="LMARGIN", new_y="NEXT")
        pdf.set_y(max(pdf.get_y(), y + 4.2))
    if pdf.get_y() > pdf.h - _MARGIN:
        raise CertificateError("the certificate does not fit on one page; file its JSON instead")
    return bytes(pdf.output())


def _fields(certificate: object) -> dict[str, Any]:
    if isinstance(certificate, Certificate):
        return dict(certificate.fields)
    if isinstance(certificate, str | bytes):
        import json

        try:
            parsed = json.loads(certificate)
        except ValueError:
            raise CertificateError(
                "the certificate is not valid JSON; pass what store.attest() returned"
            ) from None
        if isinstance(parsed, dict):
            return parsed
        raise CertificateError("the certificate JSON must be an object; pass what store.attest() returned")
    if isinstance(certificate, Mapping):
        return dict(certificate)
    raise CertificateError(
        f"a certificate is a Certificate, its JSON text or a dict, not {type(certificate).__name__}"
    )


_CODE = (
    "Request id",
    "Target (token)",
    "Audit head",
    "Leaf hash",
    "Root hash",
    "Public key",
    "Fingerprint",
    "Signature",
    "Command",
)


def _is_code(label: str) -> bool:
    return label in _CODE


def _rows(f: Mapping[str, Any], json_name: str) -> list[tuple[str, str]]:
    san = f.get("sanitization") or {}
    ver = f.get("verification_method") or {}
    media = f.get("sanitized_media") or {}
    who = f.get("requester") or {}
    log = f.get("log") or {}
    head = log.get("tree_head") or {}
    layers = f.get("layers") or {}
    rows: list[tuple[str, str]] = [
        ("", "Request"),
        ("Request id", str(f.get("request_id"))),
        ("Target kind / mode", f"{f.get('target_kind')} / {f.get('mode')}"),
        ("Target (token)", str(f.get("target"))),
        ("Requested by", _requester(who)),
        ("Requested at", str(f.get("requested_at"))),
        ("", "Sanitization"),
        ("Method", f"{san.get('method', 'not stated')} ({san.get('standard', 'NIST SP 800-88 Rev. 2')})"),
        ("Technique", str(san.get("technique", "not stated"))),
        ("Tool and version", f"{san.get('tool', 'cenotaph')} {san.get('tool_version', '')}".strip()),
        ("Media (backend)", str(media.get("backend", "not stated"))),
        ("Media (location)", str(media.get("location", "not stated"))),
        (
            "Layers",
            ", ".join(f"{name}: {(v or {}).get('state')}" for name, v in sorted(layers.items())) or "none",
        ),
        ("", "Verification"),
        ("Method", str(ver.get("method", "residue scan"))),
        (
            "Sample size",
            f"{ver.get('sample_size', (f.get('scan') or {}).get('probes'))} probes; positive control: "
            f"{'passed' if ver.get('positive_control', (f.get('scan') or {}).get('positive_control')) else 'not run'}",
        ),
        ("Scanned", f"{ver.get('files_scanned', '?')} files, {ver.get('bytes_scanned', '?')} bytes"),
        ("Verified at", str(f.get("verified_at"))),
        (
            "Horizon",
            f"{f.get('horizon') or 'none'} ({f.get('horizon_reason') or 'no copy outlives the erasure'})",
        ),
        ("Root of trust", str(f.get("root_of_trust"))),
        ("Audit head", str(f.get("audit_head"))),
    ]
    if log:
        rows += [
            ("", "Transparency log (RFC 9162)"),
            (
                "Leaf",
                f"{log.get('leaf_index')} of {head.get('tree_size')} entries, signed {head.get('timestamp')}",
            ),
            ("Leaf hash", str(log.get("leaf_hash"))),
            ("Root hash", str(head.get("root_hash"))),
        ]
    key = str(f.get("public_key"))
    rows += [
        ("", "How to check this certificate"),
        ("Public key", key),
        ("Fingerprint", f"SHA-256 {key_fingerprint(key)}"),
        ("Signature", str(f.get("signature"))),
        ("Command", f"cenotaph verify-cert {json_name} --public-key {key}"),
        (
            "Note",
            "This page is a rendering. The signed JSON certificate is what verifies; compare the "
            "public key's fingerprint with the one the store publishes (GET /v1/public-key).",
        ),
    ]
    return rows


def _requester(who: Mapping[str, Any]) -> str:
    parts = []
    if who.get("name"):
        parts.append(str(who["name"]))
    parts.append(
        f"API key {who['key_id']}" if who.get("key_id") else "the store's operator (library or command line)"
    )
    return "; ".join(parts)


def _latin1(text: str) -> str:
    """The core PDF fonts hold Latin-1 only: anything else is shown as '?', never dropped silently."""
    return text.encode("latin-1", "replace").decode("latin-1")
