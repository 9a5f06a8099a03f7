"""Erasure certificates: ``attest`` issues one, ``verify-cert`` checks one without any store.

A certificate is content-free and signed with the store's Ed25519 key; :func:`certificate_claims`
says in plain words what a valid one proves and what it does not (``demo`` prints the same).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
from rich.console import Group, RenderableType
from rich.text import Text

import cenotaph
from cenotaph.errors import CertificateError, ErasureNotProvableError
from cenotaph.model import LayerState, Mode
from cenotaph.operations import write_all

from .interrupts import held, on_interrupt
from .options import DataLocation, data_option, open_existing_store
from .output import emit, generic_table, table_option
from .spelling import speak_cli

__all__ = ["attest", "certificate_claims", "certificate_summary", "verify_cert"]

PUBLIC_KEY_HEX = re.compile(r"[0-9a-fA-F]{64}")
MAX_CERTIFICATE_BYTES = 1 << 20  # a certificate is a few kilobytes
SUMMARY_FIELDS = (
    "request_id",
    "target_kind",
    "mode",
    "forget_version",
    "requested_at",
    "verified_at",
    "horizon",
    "horizon_reason",
    "root_of_trust",
    "audit_head",
    "public_key",
)


@click.command()
@click.argument("request_id")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Write the certificate to FILE (exactly its canonical JSON) and print where it went.",
)
@click.option(
    "--pdf",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Also write a one-page PDF for people (NIST SP 800-88 fields, the verification command, the "
    "public key's fingerprint) to FILE.",
)
@click.option("--requester-key-id", metavar="ID", help="The API key id that requested the erasure.")
@click.option("--requester-name", metavar="NAME", help="A requester's name, shown only when given here.")
@data_option
@table_option
def attest(
    request_id: str,
    out: Path | None,
    pdf: Path | None,
    requester_key_id: str | None,
    requester_name: str | None,
    data: DataLocation,
    table: bool,
) -> None:
    """Issue a signed certificate of a verified erasure.

    Prints the certificate: canonical JSON, content-free (no scope, key, subject or value),
    signed with the store's Ed25519 key, with the NIST SP 800-88 Rev. 2 fields (method, tool,
    verification, media, requester) and the proof its forget is in the audit log's Merkle tree;
    check it anywhere with `cenotaph verify-cert`. With --out FILE it is written to FILE
    instead; with --pdf FILE a one-page PDF of it is written too. Exits 1 naming every gap if the
    erasure is not verified yet (run `cenotaph purge`), and always for an operational forget.
    """
    if out is not None and not out.parent.is_dir():
        raise click.BadParameter("the directory to write FILE into does not exist", param_hint="--out")
    if pdf is not None and (pdf.is_dir() or not pdf.parent.is_dir()):
        raise click.BadParameter("name a file in an existing directory", param_hint="--pdf")
    # make room for FILE before attesting: attest appends to the audit log, so it must not run
    # for a certificate that then cannot be written
    staged = None if out is None else _stage(out)
    try:
        with open_existing_store(data) as store:
            try:
                with held():
                    certificate = store.attest(
                        request_id, requester_key_id=requester_key_id, requester_name=requester_name
                    )
                    on_interrupt(
                        "interrupted after the certificate was issued (and audited); run "
                        f"`cenotaph attest {request_id}` again to print it"
                    )
            except ErasureNotProvableError as exc:
                raise click.ClickException(_not_provable(store, request_id, exc)) from None
    except BaseException:
        if staged is not None:
            os.close(staged[0])
            staged[1].unlink(missing_ok=True)
        raise
    text = certificate.to_json()
    if pdf is not None:
        _write_pdf(
            pdf, cenotaph.certificate_pdf(certificate, json_name=out.name if out else f"{request_id}.json")
        )
        if out is None:
            click.echo(f"wrote the PDF to {pdf.resolve()}", err=True)
    if staged is None or out is None:
        if table:
            emit(certificate_summary(certificate.to_dict()), table=True, render=certificate_table)
        else:
            click.echo(text)
        return
    fd, tmp = staged
    try:
        write_all(fd, text.encode("utf-8"))
        os.fsync(fd)
        os.close(fd)
        os.replace(tmp, out)  # FILE is replaced only by a whole certificate
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise click.BadParameter(f"cannot write FILE ({exc.strerror})", param_hint="--out") from None
    doc = {
        "request_id": certificate["request_id"],
        "out": str(out.resolve()),
        **({"pdf": str(pdf.resolve())} if pdf is not None else {}),
        "public_key": certificate["public_key"],
        "horizon": certificate["horizon"],
        "verify": f"cenotaph verify-cert {out} --public-key {certificate['public_key']}",
    }
    emit(doc, table=table)


def _write_pdf(path: Path, content: bytes) -> None:
    """Replace FILE with the whole PDF, or leave it as it was."""
    try:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise click.BadParameter(f"cannot write FILE ({exc.strerror})", param_hint="--pdf") from None
    try:
        write_all(fd, content)
        os.fsync(fd)
        os.close(fd)
        os.replace(name, path)
    except OSError as exc:
        Path(name).unlink(missing_ok=True)
        raise click.BadParameter(f"cannot write FILE ({exc.strerror})", param_hint="--pdf") from None


def _stage(out: Path) -> tuple[int, Path]:
    """A temporary file beside FILE (the certificate goes there, then replaces FILE)."""
    if out.is_dir():
        raise click.BadParameter("FILE is a directory; name a file", param_hint="--out")
    try:
        fd, name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    except OSError as exc:
        raise click.BadParameter(f"cannot write FILE ({exc.strerror})", param_hint="--out") from None
    return fd, Path(name)


def _not_provable(store: cenotaph.Store, request_id: str, exc: ErasureNotProvableError) -> str:
    gaps = "; ".join(exc.gaps) if exc.gaps else str(exc)
    hint = ""
    request = store.erasure(request_id)
    if request.mode == Mode.COMPLIANCE:
        status = request.status()
        step = speak_cli(status.next_step or "")
        hint = (
            f" (purging again will not change this: {step})"
            if status.stuck
            else f" ({step}, then attest again)"
        )
    return f"erasure {request_id} is not provable: {gaps}{hint}"


@click.command("verify-cert")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option(
    "--public-key",
    "public_key",
    required=True,
    metavar="HEX",
    help="The issuing store's public key, 64 hex characters (`cenotaph status` prints it).",
)
@table_option
def verify_cert(file: str, public_key: str, table: bool) -> None:
    """Verify an erasure certificate; needs no data directory.

    FILE is the certificate `cenotaph attest` printed (`-` reads stdin). Checks the Ed25519
    signature over every field against --public-key, which must come from a channel you trust,
    not from the certificate itself. Prints {"valid": true, ...} with what the certificate
    proves and what it does not; exits 1 with the reason if it was altered or issued by another
    key.
    """
    key = public_key.strip()
    if not PUBLIC_KEY_HEX.fullmatch(key):
        raise click.BadParameter(
            "expected 64 hex characters (the store's public key)", param_hint="--public-key"
        )
    try:
        with click.open_file(file, "rb") as stream:  # `-` is stdin
            data = stream.read(MAX_CERTIFICATE_BYTES + 1)
    except OSError as exc:
        raise click.BadParameter(f"cannot read it ({exc.strerror})", param_hint="FILE") from None
    if len(data) > MAX_CERTIFICATE_BYTES:
        raise click.BadParameter("larger than any certificate (over 1 MiB)", param_hint="FILE")
    try:
        certificate = cenotaph.verify_certificate(data, key)
    except CertificateError as exc:
        raise click.ClickException(f"the certificate is not valid: {exc}") from None
    doc = {"valid": True, **certificate_summary(certificate.to_dict())}
    emit(doc, table=table, render=certificate_table)


def certificate_summary(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The fields people ask about, and what the certificate proves and does not."""
    return {name: fields.get(name) for name in SUMMARY_FIELDS} | certificate_claims(fields)


def certificate_claims(fields: Mapping[str, Any]) -> dict[str, list[str]]:
    """What a valid certificate with these fields proves, and what it does not, in plain words."""
    key = str(fields.get("public_key", ""))
    target = str(fields.get("target", ""))
    layers = fields.get("layers")
    done = sorted(
        name
        for name, layer in (layers.items() if isinstance(layers, Mapping) else ())
        if isinstance(layer, Mapping) and layer.get("state") == LayerState.DONE
    )
    scan = fields.get("scan")
    scan = scan if isinstance(scan, Mapping) else {}
    proves = [
        f"the holder of signing key {key[:16]}… attests that erasure request {fields.get('request_id')} "
        f"({fields.get('mode')} forget of a {fields.get('target_kind')}, version "
        f"{fields.get('forget_version')}) was verified at {fields.get('verified_at')}",
        "these layers of the live store were done: " + (", ".join(done) or "none"),
        f"a scan of {scan.get('files')} file(s) ({scan.get('bytes')} bytes) for {scan.get('probes')} "
        f"probe(s) of the erased data found {scan.get('matches')} match(es)"
        + (", and found a planted copy (positive control)" if scan.get("positive_control") is True else ""),
    ]
    if scan.get("nothing_to_erase") is True:
        proves.append(
            "the forget found nothing of its target left to erase (no record, no key: an erasure "
            "repeated, or of a target this store never held), and after the purge no record of the "
            "target written before the forget was left in the database"
        )
    not_proven = []
    horizon = fields.get("horizon")
    if horizon:
        proves.append(
            f"the erasure horizon was reached at {horizon}: every KEK epoch that wrapped a destroyed key "
            "is destroyed in the key provider, so copies of the data made before the forget (backups) "
            "cannot be decrypted with its keys"
        )
        not_proven.append(
            "that nobody kept the old keys: a copy of the keyring taken before the rotation still holds "
            "the destroyed epochs"
        )
    else:
        not_proven.append(
            f"that older copies are unreadable: the erasure horizon is not reached "
            f"({fields.get('horizon_reason')}); a backup taken before the forget could still be "
            "decrypted with this keyring until `cenotaph rotate-keys` destroys those KEK epochs"
        )
    root = fields.get("root_of_trust")
    if root == "local-file":
        not_proven.append(
            'that the signer is trustworthy: the root of trust is a local keyring file ("local-file"), by '
            "default inside the data directory; whoever can read it can decrypt the store and sign "
            "certificates like this one"
        )
    else:
        not_proven.append(f"more than its root of trust ({root!r}) is worth: whoever controls it can sign")
    log = fields.get("log")
    if isinstance(log, Mapping) and isinstance(log.get("tree_head"), Mapping):
        head = log["tree_head"]
        proves.append(
            f"the forget's audit entry is leaf {log.get('leaf_index')} of the audit log's Merkle tree of "
            f"{head.get('tree_size')} entries whose root the same key signed at {head.get('timestamp')}"
        )
        not_proven.append(
            "that the log was never rewritten: a head signed by the store proves consistency only to "
            "someone who kept an earlier head (`cenotaph audit witness`)"
        )
    not_proven += [
        f"which data it was: the target is a keyed token ({target[:16]}…) that only the keyring's holder "
        "can match to a scope, key or subject",
        "anything about copies outside this store: exports, logs, prompts or a model's context that "
        "already held the data",
    ]
    return {"proves": proves, "does_not_prove": not_proven}


def certificate_table(doc: Mapping[str, Any]) -> RenderableType:
    """A certificate summary (:func:`certificate_summary`, maybe with ``valid``) for people."""
    fields = {k: v for k, v in doc.items() if k not in ("proves", "does_not_prove")}
    proves = Text("proves:\n", style="bold green")
    for claim in doc.get("proves", []):
        proves.append(f"  • {claim}\n", style="default")
    not_proven = Text("does not prove:\n", style="bold yellow")
    for claim in doc.get("does_not_prove", []):
        not_proven.append(f"  • {claim}\n", style="default")
    return Group(generic_table(fields, "erasure certificate"), proves, not_proven)
