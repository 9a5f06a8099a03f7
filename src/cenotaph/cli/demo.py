"""``cenotaph demo``: an agent memory that must forget a patient's note, played on a temporary store
and narrated step by step.

Every claim it prints is checked as it goes: if the store ever behaved otherwise, the demo stops
with exit code 1 and says which step failed.
"""

from __future__ import annotations

import json
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import click
from rich.console import Console
from rich.markup import escape

import cenotaph
from cenotaph.errors import (
    CenotaphError,
    CertificateError,
    DerivedFromForgottenError,
    ForgottenError,
    ScopeClosureError,
    StaleWriteError,
)
from cenotaph.model import ErasureState, Mode
from cenotaph.operations import directory_format, scan_for_texts

from .certificates import certificate_claims
from .output import console

__all__ = ["demo"]

E = TypeVar("E", bound=CenotaphError)

USER = "tenant:acme/user:alice"
SESSION = f"{USER}/session:s1"
SUMMARY = "User mentioned a cardiology appointment"
STATE_MEANING: dict[str, str] = {
    ErasureState.TOMBSTONED: "hidden from every read, not yet erased",
    ErasureState.SHREDDED: "keys destroyed, so no copy in the live store can be decrypted; ciphertext awaits purge",
    ErasureState.PURGED: "keys destroyed, rows removed, WAL truncated; the verification scan is pending",
    ErasureState.VERIFIED: "keys destroyed, rows removed, WAL truncated, every file scanned and no trace found",
}


class DemoFailed(click.ClickException):
    """The store did not behave as the narration claims; exit 1 naming the step."""


@click.command()
@click.option("--keep", is_flag=True, help="Keep the temporary data directory and print where it is.")
def demo(keep: bool) -> None:
    """Play an erasure scenario on a temporary store, narrated.

    Takes a few seconds: a medical note in a session, a summary derived from it, a refused
    scope-leak forget, a compliance forget that cascades, refused late and racing writes, a clean
    access request, a look at the bytes on disk, the erasure status, a signed erasure certificate
    verified (and a tampered copy refused) with what it proves and what it does not, then a key
    rotation that reaches the erasure horizon and a second certificate stating it. Touches no
    existing data directory or keyring.
    """
    out = console()
    directory = Path(tempfile.mkdtemp(prefix="cenotaph-demo-"))
    try:
        started = time.monotonic()
        Scenario(out, directory).run()
        out.print(f"\n[bold]Demo finished[/] in {time.monotonic() - started:.1f}s.")
    finally:
        if keep:
            out.print(f"Kept the demo data directory: {escape(str(directory))}", soft_wrap=True)
        else:
            shutil.rmtree(directory)


class Scenario:
    """A multi-tenant assistant whose memory must forget a patient's note, one method per step."""

    def __init__(self, out: Console, directory: Path) -> None:
        self.out = out
        self.directory = directory
        self.canary = "canary-" + secrets.token_hex(8)
        self.note_text = f"Alice has a cardiology appointment on 14 March ({self.canary})"
        # The default layout (the keyring inside the data directory), given explicitly so the
        # caller's $CENOTAPH_KEYRING is never used.
        self.keyring = directory / "data" / "keyring"
        self.store = cenotaph.open(directory / "data", key_provider=cenotaph.LocalKeyring(self.keyring))

    def run(self) -> None:
        try:
            note = self.remember()
            self.summarize()
            self.scope_leak()
            request = self.forget_session()
            self.late_writes(note)
            self.racing_writer(note)
            self.access_request()
            self.bytes_on_disk()
            self.honest_status(request)
            self.certificate(request)
            self.horizon(request)
        finally:
            self.store.close()

    # -- narration helpers ------------------------------------------------------------
    def step(self, number: int, title: str) -> None:
        self.out.print()
        self.out.rule(f"[bold]{number}. {title}", align="left")

    def say(self, text: str) -> None:
        self.out.print(text)

    def check(self, holds: bool, claim: str) -> None:
        if not holds:
            raise DemoFailed(f"the demo's claim did not hold: {claim}")
        self.out.print(f"  [green]✓[/] {claim}")

    def refused(self, error: type[E], action: Callable[[], object]) -> E:
        try:
            action()
        except error as exc:
            self.out.print(f"  [green]✓ refused[/] with {type(exc).__name__}: [italic]{escape(str(exc))}[/]")
            return exc
        raise DemoFailed(f"the store accepted what it should refuse with {error.__name__}")

    # -- the steps ----------------------------------------------------------------------
    def remember(self) -> cenotaph.Record:
        self.step(1, "An assistant remembers")
        note = self.store.write(SESSION, "medical-note", self.note_text)
        self.store.write(USER, "diet", "vegetarian")
        self.say(
            f"Wrote a medical note into the session scope [cyan]{SESSION}[/] (version {note.version}) "
            f"and a preference (diet: vegetarian) into the user scope [cyan]{USER}[/]. The note carries "
            f"a canary, [magenta]{self.canary}[/], to look for on disk later."
        )
        return note

    def summarize(self) -> None:
        self.step(2, "A summary is derived from the note")
        with self.store.session(SESSION) as session:
            note = session.read(SESSION, "medical-note")
            summary = session.write(USER, "session-summary", SUMMARY)
        self.say(
            f"Inside store.session(...) the agent read the note and wrote [italic]{SUMMARY!r}[/] into the "
            "user scope, where it would outlive the session: how derived copies survive a naive delete."
        )
        self.check(
            note is not None and summary.derived_from == (note.id,),
            "the session recorded the note as the summary's source (derived_from)",
        )

    def scope_leak(self) -> None:
        self.step(3, "Scope-leak protection")
        self.store.write(SESSION, "diet", "vegetarian")
        self.say(
            "The agent also copied the diet preference into the session. Forgetting only that copy would "
            "not work: a read in the session falls through to the user scope's copy."
        )
        self.refused(ScopeClosureError, lambda: self.store.forget(SESSION, "diet"))
        copy = self.store.read(SESSION, "diet", fallthrough=False)
        self.check(copy is not None, "nothing was changed: the forget failed closed")
        self.say("[dim]To forget both copies: cenotaph forget SCOPE KEY --include-ancestors[/]")

    def forget_session(self) -> cenotaph.ErasureRequest:
        self.step(4, "The user asks to forget the session (compliance mode)")
        request = self.store.forget(SESSION, mode=Mode.COMPLIANCE)
        state = request.status().state
        self.say(
            f"Erasure request [bold]{request.id}[/] at version {request.version}, mode {request.mode}: "
            f"state [bold]{state}[/] ({STATE_MEANING.get(state, 'see its layers')})."
        )
        self.check(self.store.read(SESSION, "medical-note") is None, "the note is gone")
        self.check(
            self.store.read(USER, "session-summary") is None, "the summary derived from it is gone too"
        )
        diet = self.store.read(USER, "diet")
        self.check(diet is not None and diet.value == "vegetarian", "the user's own preference stays")
        return request

    def late_writes(self, note: cenotaph.Record) -> None:
        self.step(5, "Late writes cannot bring it back")
        self.say("The summarizer runs late and writes the summary again, derived from the note:")
        self.refused(
            DerivedFromForgottenError,
            lambda: self.store.write(USER, "session-summary", SUMMARY, derived_from=[note.id]),
        )
        self.say("A plain rewrite of the note into the forgotten session scope:")
        exc = self.refused(ForgottenError, lambda: self.store.write(SESSION, "medical-note", self.note_text))
        self.check(not isinstance(exc, DerivedFromForgottenError), "the session's tombstone refused it")

    def racing_writer(self, note: cenotaph.Record) -> None:
        self.step(6, "A racing writer with a stale read")
        self.say(
            f"Another worker read the note at version {note.version}, before the forget, and writes it back "
            "with base_version set to what it read, even carrying a fresh reauthorization token:"
        )
        token = self.store.reauthorize(SESSION)
        self.refused(
            StaleWriteError,
            lambda: self.store.write(
                SESSION, "medical-note", self.note_text, base_version=note.version, reauthorization=token
            ),
        )
        self.say("The tombstone dominates the write: never last-writer-wins.")

    def access_request(self) -> None:
        self.step(7, "The access request is clean")
        export = self.store.export_subject(USER)
        text = json.dumps(export, ensure_ascii=False)
        keys = ", ".join(r["key"] for r in export["records"]) or "none"
        self.say(
            f"Alice asks what the store holds about her: store.export_subject({USER!r}) returns "
            f"{len(export['records'])} record(s) ({keys}) and {len(export['derived_records'])} derived record(s)."
        )
        self.check(
            "cardiology" not in text and self.canary not in text,
            'the export has no trace of the note or the summary ("cardiology" is not in its JSON)',
        )
        self.check(
            any(r["key"] == "diet" for r in export["records"]), "her own preference is in it, as it should be"
        )

    def bytes_on_disk(self) -> None:
        self.step(8, "What the bytes say")
        # Straight from the database file, as anyone who copied it would read it.
        targets = directory_format().tombstone_targets(self.directory / "data")
        self.check(
            bool(targets) and all(len(t) == 32 for t in targets),
            f"the tombstones table holds {len(targets)} row(s), each target a 32-byte HMAC token, "
            f"e.g. {targets[0].hex()[:16] if targets else '-'}…",
        )
        self.say(
            "HMAC-SHA256 under an erasure secret kept with the keys, never in the database: no scope, key "
            "or subject can be read back or confirmed by guessing from a stolen database file."
        )
        scan = scan_for_texts(self.directory, self.canary, self.note_text)
        self.say(
            f"Searched all {scan.files} files ({scan.bytes:,} bytes: database, WAL, keyring) for the canary "
            "and the note, as UTF-8, UTF-16 and hex:"
        )
        self.check(scan.positive_control, "the same search finds a planted copy (positive control)")
        self.check(scan.matches == 0, f"grep of the canary in all files finds {scan.matches}")

    def honest_status(self, request: cenotaph.ErasureRequest) -> None:
        self.step(9, "The erasure status, honestly")
        status = request.status()
        layers = ", ".join(f"{name} {layer.state}" for name, layer in sorted(status.layers.items()))
        self.say(f"State: [bold]{status.state}[/]. Layers: {layers}.")
        if status.gaps:
            self.say("Still open before cenotaph will call this erasure verified or sign a certificate:")
            for gap in status.gaps:
                self.say(f"  [yellow]•[/] {escape(gap)}")
            self.say("Physical purge (store.purge(), `cenotaph purge`) removes and verifies what is left.")
        else:
            self.say("No gaps: every layer of the live store is done, with the evidence listed per layer.")
        if status.horizon is None:
            horizon = status.layers.get("horizon")
            reason = horizon.evidence.get("reason") if horizon is not None else None
            self.say(
                "Erasure horizon: [yellow]not reached[/]: a copy made before the forget (a backup, an old "
                "key file) could still be decrypted until its KEK epoch is destroyed"
                + (f" ({escape(str(reason))})." if reason else ".")
            )
        else:
            self.say(f"Erasure horizon reached at {status.horizon.isoformat()}.")

    def certificate(self, request: cenotaph.ErasureRequest) -> None:
        self.step(10, "The erasure certificate")
        status = request.status()
        if status.state != ErasureState.VERIFIED:
            self.say("Not verified yet, so purging first (store.purge(), `cenotaph purge`).")
            status = request.wait(timeout=30)
        self.check(
            status.state == ErasureState.VERIFIED, "the erasure is verified: no gaps in the live store"
        )
        certificate = self.store.attest(request.id)
        self.say(
            "store.attest(...) signs a content-free certificate with the store's Ed25519 key (no scope, "
            "key, subject or value in it; the target is a keyed token):"
        )
        self.out.print_json(certificate.to_json())
        verified = cenotaph.verify_certificate(certificate.to_json(), self.store.public_key)
        self.check(
            verified == certificate,
            "cenotaph.verify_certificate(cert.to_json(), store.public_key) accepts it "
            "(`cenotaph verify-cert FILE --public-key HEX` does the same, with no data directory)",
        )
        self.say("The same certificate with one number changed (forget_version + 1):")
        tampered = certificate.to_dict() | {"forget_version": int(certificate["forget_version"]) + 1}
        self.refused(CertificateError, lambda: cenotaph.verify_certificate(tampered, self.store.public_key))
        self.claims(certificate)
        self.say(
            f"[dim]In this demo the keyring is {escape(str(self.keyring))}, inside the data directory (the "
            "default): the root of trust is that file.[/]"
        )

    def claims(self, certificate: cenotaph.Certificate) -> None:
        claims = certificate_claims(certificate.fields)
        self.say("[bold]What it proves:[/]")
        for claim in claims["proves"]:
            self.say(f"  [green]•[/] {escape(claim)}")
        self.say("[bold]What it does not prove:[/]")
        for claim in claims["does_not_prove"]:
            self.say(f"  [yellow]•[/] {escape(claim)}")

    def horizon(self, request: cenotaph.ErasureRequest) -> None:
        self.step(11, "Reaching the erasure horizon")
        report = self.store.rotate_keys()
        self.say(
            f"store.rotate_keys() (`cenotaph rotate-keys`) rewrapped {report.rewrapped} live key(s) under KEK "
            f"epoch {report.new_epoch} and destroyed epoch(s) {list(report.destroyed_epochs)}; no backup "
            "was registered to retain any."
        )
        status = request.status()
        self.check(
            status.horizon is not None,
            f"erasure horizon reached at {status.horizon.isoformat() if status.horizon else '-'}",
        )
        second = self.store.attest(request.id)
        cenotaph.verify_certificate(second.to_json(), self.store.public_key)
        self.check(
            second["horizon"] is not None,
            f"a second certificate, verified, states it: horizon {second['horizon']}",
        )
        self.say(f"  [green]•[/] {escape(str(second['horizon_reason']))}")
