"""The ``cenotaph`` CLI: JSON by default, ``--table`` for people, exit 2 with one line on bad input.

Most tests drive the click group in-process with ``CliRunner``; a few run the real entry point in a
subprocess (``python -m cenotaph.cli.main``) so the exit codes and stderr are the ones a shell sees.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

import cenotaph
from cenotaph.cli.main import COMMANDS, cli

USER = "tenant:acme/user:alice"
SESSION = f"{USER}/session:s1"
README = Path(__file__).resolve().parents[1] / "README.md"
ENV_VARS = ("CENOTAPH_DATA", "CENOTAPH_KEYRING", "CENOTAPH_MASTER_KEY", "CENOTAPH_REPLICAS", "CENOTAPH_DEBUG")


# -- helpers -------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """An initialised data directory."""
    directory = tmp_path / "data"
    result = run("init", "--data", str(directory))
    assert result.exit_code == 0, result.stderr
    return directory


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def ok_json(*args: str) -> Any:
    result = run(*args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def assert_one_line_error(result: Result, code: int) -> str:
    assert result.exit_code == code, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.stderr + result.stdout
    return lines[0]


def subprocess_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    env.update(extra)
    return env


def run_process(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cenotaph.cli.main", *args],
        capture_output=True,
        text=True,
        env=subprocess_env(**env),
        timeout=120,
    )


def all_commands() -> Iterator[tuple[str, click.Command]]:
    """Every command, with its full name (``audit verify`` for a group's subcommand)."""

    def walk(group: click.Group, prefix: str) -> Iterator[tuple[str, click.Command]]:
        for name, command in sorted(group.commands.items()):
            full = f"{prefix}{name}"
            yield full, command
            if isinstance(command, click.Group):
                yield from walk(command, full + " ")

    yield from walk(cli, "")


# -- init ----------------------------------------------------------------------------------
def test_init_creates_the_store_and_warns_about_the_keyring_inside(tmp_path: Path) -> None:
    directory = tmp_path / "data"
    result = run("init", "--data", str(directory))
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["data"] == str(directory.resolve())
    assert doc["keyring"] == str((directory / "keyring").resolve())
    assert doc["keyring_inside_data"] is True
    assert doc["created"] is True
    assert "CENOTAPH_KEYRING" in doc["warning"] and "CENOTAPH_MASTER_KEY" in doc["warning"]
    assert result.stderr.startswith("warning: ") and len(result.stderr.splitlines()) == 1
    assert stat.S_IMODE((directory / "keyring").stat().st_mode) == 0o700
    again = ok_json("init", "--data", str(directory))
    assert again["created"] is False


def test_init_with_the_keyring_elsewhere_has_no_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CENOTAPH_KEYRING", str(tmp_path / "keys"))
    result = run("init", "--data", str(tmp_path / "data"))
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["keyring_inside_data"] is False and doc["warning"] is None
    assert result.stderr == ""
    assert (tmp_path / "keys").is_dir() and not (tmp_path / "data" / "keyring").exists()


def test_init_with_another_store_s_keyring_says_so_and_makes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A keyring belongs to one store: init on a new directory with a keyring that has history (a
    mistyped --data) is a mistake said plainly, not "the database was altered", and leaves no
    directory or database behind."""
    monkeypatch.setenv("CENOTAPH_KEYRING", str(tmp_path / "keys"))
    ok_json("init", "--data", str(tmp_path / "data"))
    ok_json("write", USER, "k", "v", "--data", str(tmp_path / "data"))
    ok_json("forget", USER, "k", "--data", str(tmp_path / "data"))
    line = assert_one_line_error(run("init", "--data", str(tmp_path / "typo")), 2)
    assert "holds no cenotaph store" in line and "new keyring" in line and "altered" not in line
    assert not (tmp_path / "typo").exists()


def test_data_defaults_to_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CENOTAPH_DATA", str(tmp_path / "env-data"))
    ok_json("init")
    ok_json("write", USER, "k", "v")
    assert ok_json("read", USER, "k")["value"] == "v"
    assert (tmp_path / "env-data" / "cenotaph.db").is_file()


# -- write, read, list ---------------------------------------------------------------------
def test_write_then_read_round_trips(data: Path) -> None:
    written = ok_json("write", SESSION, "note", "cardiology on Tuesday", "--data", str(data))
    assert written["value"] == "cardiology on Tuesday" and written["scope"] == SESSION
    assert written["subjects"] == [USER]
    read = ok_json("read", SESSION, "note", "--data", str(data))
    assert read == written


def test_write_options(data: Path) -> None:
    d = ("--data", str(data))
    source = ok_json("write", USER, "source", "s", *d)
    rec = ok_json(
        "write", USER, "prefs", '{"diet": "vegetarian", "n": [1, 2]}', "--json",
        "--ttl", "3600", "--subject", "idp:123", "--subject", "idp:456",
        "--derived-from", source["id"], "--metadata", '{"origin": "chat"}', *d,
    )  # fmt: skip
    assert rec["value"] == {"diet": "vegetarian", "n": [1, 2]}
    assert rec["expires_at"] is not None
    assert {"idp:123", "idp:456", USER} <= set(rec["subjects"])
    assert rec["derived_from"] == [source["id"]]
    assert rec["metadata"] == {"origin": "chat"}
    # --json absent: the same text is a string
    assert ok_json("write", USER, "raw", "[1, 2]", *d)["value"] == "[1, 2]"
    # a write with the current version as base_version lands
    again = ok_json("write", USER, "prefs", "x", "--base-version", str(rec["version"]), *d)
    assert again["value"] == "x"


def test_stale_base_version_is_refused(data: Path) -> None:
    d = ("--data", str(data))
    first = ok_json("write", USER, "k", "one", *d)
    ok_json("write", USER, "k", "two", *d)
    result = run("write", USER, "k", "three", "--base-version", str(first["version"]), *d)
    assert "--base-version" in assert_one_line_error(result, 1)
    assert ok_json("read", USER, "k", *d)["value"] == "two"


def test_read_not_found_prints_null_and_exits_1(data: Path) -> None:
    result = run("read", USER, "missing", "--data", str(data))
    assert result.exit_code == 1
    assert json.loads(result.stdout) is None
    assert result.stderr == ""


def test_read_falls_through_unless_told_not_to(data: Path) -> None:
    d = ("--data", str(data))
    ok_json("write", USER, "diet", "vegetarian", *d)
    assert ok_json("read", SESSION, "diet", *d)["scope"] == USER
    result = run("read", SESSION, "diet", "--no-fallthrough", *d)
    assert result.exit_code == 1 and json.loads(result.stdout) is None


def test_list_with_and_without_descendants(data: Path) -> None:
    d = ("--data", str(data))
    ok_json("write", USER, "b", "1", *d)
    ok_json("write", USER, "a", "2", *d)
    ok_json("write", SESSION, "c", "3", *d)
    assert [r["key"] for r in ok_json("list", USER, *d)] == ["a", "b"]
    assert [(r["scope"], r["key"]) for r in ok_json("list", USER, "--descendants", *d)] == [
        (USER, "a"),
        (USER, "b"),
        (SESSION, "c"),
    ]
    assert ok_json("list", "tenant:other", *d) == []


# -- forget and friends --------------------------------------------------------------------
def test_forget_then_read_fails_and_writes_are_refused(data: Path) -> None:
    d = ("--data", str(data))
    ok_json("write", SESSION, "note", "cardiology", *d)
    request = ok_json("forget", SESSION, "note", *d)
    assert request["id"].startswith("er_")
    assert request["mode"] == "compliance" and request["target_kind"] == "key"
    assert isinstance(request["version"], int)
    assert request["status"]["state"] in ("shredded", "purged", "verified")
    result = run("read", SESSION, "note", *d)
    assert result.exit_code == 1 and json.loads(result.stdout) is None
    refused = assert_one_line_error(run("write", SESSION, "note", "again", *d), 1)
    assert "forgotten" in refused and "cardiology" not in refused


def test_reauthorize_lets_one_write_through(data: Path) -> None:
    d = ("--data", str(data))
    ok_json("write", SESSION, "note", "old", *d)
    ok_json("forget", SESSION, *d)
    token = ok_json("reauthorize", SESSION, *d)["token"]
    rec = ok_json("write", SESSION, "note", "new", "--reauthorization", token, *d)
    assert ok_json("read", SESSION, "note", *d)["id"] == rec["id"]


def test_one_reauthorization_with_key_and_subject_reopens_a_key_forgotten_both_ways(data: Path) -> None:
    d = ("--data", str(data))
    ok_json("write", USER, "k", "old", *d)
    ok_json("forget", USER, "k", *d)
    ok_json("forget-subject", USER, *d)
    token = ok_json("reauthorize", USER, "k", *d)["token"]  # the key alone: the subject still blocks
    refused = run("write", USER, "k", "new", "--reauthorization", token, *d)
    assert "does not cover" in assert_one_line_error(refused, 1)
    token = ok_json("reauthorize", USER, "k", "--subject", USER, *d)["token"]
    ok_json("write", USER, "k", "new", "--reauthorization", token, *d)
    assert ok_json("read", USER, "k", *d)["value"] == "new"


def test_forget_refuses_a_scope_leak_and_names_no_value(data: Path) -> None:
    d = ("--data", str(data))
    ok_json("write", USER, "diet", "secret-value-in-the-user-scope", *d)
    ok_json("write", SESSION, "diet", "secret-value-in-the-session", *d)
    line = assert_one_line_error(run("forget", SESSION, "diet", *d), 1)
    assert "--include-ancestors" in line and "include_ancestors=" not in line and "secret-value" not in line
    assert ok_json("read", SESSION, "diet", "--no-fallthrough", *d)["value"] == "secret-value-in-the-session"
    ok_json("forget", SESSION, "diet", "--include-ancestors", *d)
    assert run("read", SESSION, "diet", *d).exit_code == 1


def test_operational_forget_stays_tombstoned(data: Path) -> None:
    d = ("--data", str(data))
    ok_json("write", USER, "k", "v", *d)
    request = ok_json("forget", USER, "k", "--mode", "operational", *d)
    assert request["mode"] == "operational"
    assert request["status"]["state"] == "tombstoned"
    assert any("operational" in gap for gap in request["status"]["gaps"])


def test_forget_subject(data: Path) -> None:
    d = ("--data", str(data))
    ok_json("write", SESSION, "note", "n", *d)
    ok_json("write", "tenant:acme/doc:d1", "mention", "m", "--subject", USER, *d)
    request = ok_json("forget-subject", USER, *d)
    assert request["target_kind"] == "subject" and request["mode"] == "compliance"
    assert run("read", SESSION, "note", *d).exit_code == 1
    assert run("read", "tenant:acme/doc:d1", "mention", *d).exit_code == 1


def test_status_of_one_request_and_of_the_store(data: Path) -> None:
    d = ("--data", str(data))
    empty = ok_json("status", *d)
    assert empty["erasures"]["total"] == 0 and empty["requests"] == []
    ok_json("write", USER, "k", "v", *d)
    request = ok_json("forget", USER, "k", *d)
    one = ok_json("status", request["id"], *d)
    assert one["id"] == request["id"] and one["version"] == request["version"]
    assert set(one["status"]) == {"state", "layers", "horizon", "gaps", "stuck", "next_step", "retained_by"}
    summary = ok_json("status", *d)
    assert summary["erasures"]["total"] == 1
    assert [r["id"] for r in summary["requests"]] == [request["id"]]
    assert summary["requests"][0]["state"] == one["status"]["state"]
    assert_one_line_error(run("status", "er_nonexistent", *d), 1)  # not found


# -- doctor --------------------------------------------------------------------------------
def test_doctor_passes_on_a_fresh_store_with_the_s8_warning(data: Path) -> None:
    doc = ok_json("doctor", "--data", str(data))
    checks = {c["name"]: c for c in doc["checks"]}
    assert doc["ok"] is True
    assert checks["sqlite secure_delete"]["status"] == "ok"
    assert checks["sqlite journal_mode"]["status"] == "ok"
    assert checks["keyring directory mode"]["status"] == "ok"
    assert checks["keyring file modes"]["status"] == "ok"
    assert checks["root of trust"]["status"] == "warn"
    assert {"python", "sqlite version", "data directory", "keyring opens"} <= set(checks)


def test_doctor_fails_on_loose_keyring_permissions(data: Path) -> None:
    os.chmod(data / "keyring" / "keyring.json", 0o644)
    result = run("doctor", "--data", str(data))
    assert result.exit_code == 1
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["keyring file modes"]["status"] == "fail"
    assert "keyring.json" in checks["keyring file modes"]["detail"]


def test_doctor_checks_the_open_store_integrity_audit_and_pending_erasures(data: Path) -> None:
    with cenotaph.open(data, auto_purge="off") as store:
        store.write(SESSION, "note", "cardiology")
        request = store.forget(SESSION)  # compliance, left at shredded: nothing purged yet
    doc = ok_json("doctor", "--data", str(data))
    checks = {c["name"]: c for c in doc["checks"]}
    assert checks["database integrity"]["status"] == "ok"
    assert checks["audit chain"]["status"] == "ok"
    assert checks["erasure requests"]["status"] == "warn"
    assert request.id in checks["erasure requests"]["detail"]
    assert "cenotaph purge" in checks["erasure requests"]["detail"]
    with contextlib.closing(sqlite3.connect(data / "cenotaph.db")) as db:  # no store open here
        db.execute("DELETE FROM audit WHERE seq = (SELECT MAX(seq) FROM audit)")
        db.commit()
    result = run("doctor", "--data", str(data))
    assert result.exit_code == 1
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["audit chain"]["status"] == "fail"


def test_doctor_fails_on_a_missing_data_directory(tmp_path: Path) -> None:
    result = run("doctor", "--data", str(tmp_path / "nowhere"))
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["ok"] is False
    checks = {c["name"]: c for c in doc["checks"]}
    assert checks["data directory"]["status"] == "fail"
    assert checks["sqlite secure_delete"]["status"] == "ok"  # the SQLite build is still checked
    assert not (tmp_path / "nowhere").exists()


def test_doctor_on_a_relative_read_only_data_directory(data: Path) -> None:
    """A relative --data whose files nobody may write: the read-only database is opened through a
    file: URI, which a relative path cannot become; doctor once crashed there."""
    from tests.test_read_only import as_unprivileged, make_read_only

    base = Path(tempfile.mkdtemp(prefix="cenotaph-doctor-"))  # one `nobody` can reach
    try:
        base.chmod(0o755)
        target = base / "store"
        with cenotaph.open(target, auto_purge="off") as store:
            store.write(USER, "k", "v")
        run("doctor", "--data", str(data))  # what doctor imports, loaded before the child drops root
        make_read_only(target)

        def doctor_here() -> tuple[int, str, str]:
            os.chdir(base)
            result = CliRunner().invoke(cli, ["doctor", "--data", "store"])
            return result.exit_code, result.stdout, result.stderr

        code, out, err = as_unprivileged(doctor_here)
        assert "internal error" not in err and "Traceback" not in err, err
        assert code == 0, (out, err)
        doc = json.loads(out)
        checks = {c["name"]: c for c in doc["checks"]}
        assert doc["data"] == str(target.resolve())
        assert (
            checks["data directory"]["status"] == "warn" and "read-only" in checks["data directory"]["detail"]
        )
        assert checks["sqlite secure_delete"]["status"] == "ok"
    finally:
        for path in [base, *base.rglob("*")]:
            path.chmod(stat.S_IMODE(path.stat().st_mode) | 0o700)
        shutil.rmtree(base)


# -- output modes --------------------------------------------------------------------------
TABLE_CASES = [
    ("init",),
    ("write", USER, "k2", "v"),
    ("read", USER, "k"),
    ("list", USER),
    ("search", USER, "v"),
    ("export", USER),
    ("forget", USER, "k"),
    ("forget-subject", "tenant:acme/user:bob"),
    ("reauthorize", USER),
    ("status",),
    ("purge",),
    ("rotate-keys",),
    ("audit", "verify"),
    ("doctor",),
]


@pytest.mark.parametrize("args", TABLE_CASES, ids=lambda a: a[0])
def test_table_renders_for_people(data: Path, args: tuple[str, ...]) -> None:
    ok_json("write", USER, "k", "v", "--data", str(data))
    result = run(*args, "--table", "--data", str(data))
    assert result.exit_code == 0, result.stderr
    assert "┃" in result.stdout or "│" in result.stdout  # a rich table, not JSON
    with pytest.raises(ValueError):
        json.loads(result.stdout)


def test_table_shows_an_erasure_request_and_its_layers(data: Path) -> None:
    ok_json("write", USER, "k", "v", "--data", str(data))
    out = run("forget", USER, "k", "--table", "--data", str(data)).stdout
    assert "erasure request" in out and "layers" in out and "tombstone" in out


def test_read_not_found_with_table(data: Path) -> None:
    result = run("read", USER, "missing", "--table", "--data", str(data))
    assert result.exit_code == 1 and result.stdout.strip() == "not found"


# -- bad input -----------------------------------------------------------------------------
BAD_INPUT = [
    ("write", "not a scope", "k", "v"),
    ("write", "tenant:acme//user:x", "k", "v"),
    ("write", USER, "k", "{not json", "--json"),
    ("write", USER, "k", "v", "--metadata", "[1,"),
    ("write", USER, "k", "v", "--metadata", "[1]"),
    ("write", USER, "k", "v", "--ttl", "-5"),
    ("write", USER, "k", "v", "--base-version", "minus-one"),
    ("write", USER, "k", "v", "--derived-from", "no-such-record"),
    ("write", USER),
    ("write", USER, "k", "v", "--no-such-option"),
    ("read", "user", "k"),
    ("list", ""),
    ("forget", USER, "k", "--mode", "sometimes"),
    ("forget-subject", ""),
    ("search", USER, ""),
    ("search", USER, "q", "-k", "0"),
    ("search", USER, "q", "-k", "many"),
    ("search", USER, "q", "--filter", "{bad"),
    ("search", USER, "q", "--filter", "[1]"),
    ("search", USER, "q", "--filter", '{"topic": {"$regex": "x"}}'),
    ("search", "not a scope", "q"),
    ("export", ""),
    ("attest",),
    ("backup",),
    ("restore", "/no/such/backup"),
    ("audit", "bogus"),
    ("no-such-command",),
]


@pytest.mark.parametrize("args", BAD_INPUT, ids=lambda a: " ".join(a)[:40])
def test_bad_input_exits_2_with_one_line(data: Path, args: tuple[str, ...]) -> None:
    result = run(*args, "--data", str(data))
    assert_one_line_error(result, 2)
    assert result.stdout == ""


NOT_FOUND = [("status", "er_unknown"), ("attest", "er_unknown"), ("release-backup", "bk_unknown")]


@pytest.mark.parametrize("args", NOT_FOUND, ids=lambda a: " ".join(a))
def test_an_id_nothing_has_exits_1_not_found_as_the_help_says(data: Path, args: tuple[str, ...]) -> None:
    result = run(*args, "--data", str(data))
    line = assert_one_line_error(result, 1)
    assert "no " in line and "with that id" in line and result.stdout == ""


def test_bad_json_names_the_position_not_the_text(data: Path) -> None:
    line = assert_one_line_error(
        run("write", USER, "k", '{"secret": oops}', "--json", "--data", str(data)), 2
    )
    assert "not valid JSON" in line and "line 1 column" in line and "oops" not in line
    line = assert_one_line_error(
        run("write", USER, "k", '{"a": {"x": 1, "x": 2}}', "--json", "--data", str(data)), 2
    )
    assert "same key twice" in line
    line = assert_one_line_error(run("search", USER, "q", "--filter", "{bad", "--data", str(data)), 2)
    assert "--filter" in line and "--filter_" not in line  # the option's name, not the variable's
    assert run("read", USER, "k", "--data", str(data)).exit_code == 1  # nothing was written


def test_a_missing_store_is_bad_input_and_is_not_created(tmp_path: Path) -> None:
    for args in (("read", USER, "k"), ("write", USER, "k", "v"), ("status",)):
        line = assert_one_line_error(run(*args, "--data", str(tmp_path / "typo")), 2)
        assert "cenotaph init" in line
    assert not (tmp_path / "typo").exists()


def test_a_missing_keyring_is_bad_input(data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CENOTAPH_KEYRING", str(tmp_path / "wrong-keyring"))
    assert "CENOTAPH_KEYRING" in assert_one_line_error(run("list", USER, "--data", str(data)), 2)
    assert not (tmp_path / "wrong-keyring").exists()


def test_an_unexpected_error_is_one_line_without_its_message(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("value-that-must-not-leak")

    monkeypatch.setattr(cenotaph.Store, "read", broken)
    line = assert_one_line_error(run("read", USER, "k", "--data", str(data)), 1)
    assert "RuntimeError" in line and "value-that-must-not-leak" not in line


# -- demo ----------------------------------------------------------------------------------
def test_demo_narrates_the_scenario_and_cleans_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = run("demo")
    assert result.exit_code == 0, result.stdout + result.stderr
    out = " ".join(result.stdout.split())
    for phrase in (
        "User mentioned a cardiology appointment",
        "ScopeClosureError",
        "the note is gone",
        "the summary derived from it is gone too",
        "DerivedFromForgottenError",
        "ForgottenError",
        "StaleWriteError",
        "32-byte HMAC token",
        "grep of the canary in all files finds 0",
        "State:",
        "the export has no trace of the note or the summary",
        '"cardiology" is not in its JSON',
        "cenotaph.verify_certificate(cert.to_json(), store.public_key) accepts it",
        "refused with CertificateError",
        "What it proves:",
        "What it does not prove:",
        "root of trust is a local keyring file",
        "erasure horizon is not reached",
        "erasure horizon reached at",
        "a second certificate, verified, states it",
    ):
        assert phrase in out, phrase
    assert '"signature":' in out and '"root_of_trust": "local-file"' in out  # the certificate itself
    assert list(tmp_path.iterdir()) == []


def test_demo_keep_leaves_the_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = run("demo", "--keep")
    assert result.exit_code == 0
    kept = re.search(r"Kept the demo data directory: (\S+)", result.stdout)
    assert kept is not None and Path(kept.group(1)).is_dir()
    assert Path(kept.group(1)).parent == tmp_path


def test_demo_ignores_the_callers_keyring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CENOTAPH_KEYRING", str(tmp_path / "production-keyring"))
    assert run("demo").exit_code == 0
    assert not (tmp_path / "production-keyring").exists()


# -- a real process ------------------------------------------------------------------------
def test_subprocess_round_trip_and_forget(tmp_path: Path) -> None:
    d = ("--data", str(tmp_path / "data"))
    assert run_process("init", *d).returncode == 0
    written = run_process("write", SESSION, "note", "cardiology", *d)
    assert written.returncode == 0, written.stderr
    assert json.loads(written.stdout)["value"] == "cardiology"
    read = run_process("read", SESSION, "note", *d)
    assert read.returncode == 0 and json.loads(read.stdout)["value"] == "cardiology"
    forget = run_process("forget", SESSION, *d)
    assert forget.returncode == 0 and json.loads(forget.stdout)["id"].startswith("er_")
    gone = run_process("read", SESSION, "note", *d)
    assert gone.returncode == 1 and json.loads(gone.stdout) is None
    refused = run_process("write", SESSION, "note", "again", *d)
    assert refused.returncode == 1
    assert len(refused.stderr.splitlines()) == 1 and "Traceback" not in refused.stderr


@pytest.mark.parametrize(
    "args",
    [("write", "bad scope", "k", "v"), ("write", USER, "k", "{", "--json"), ("write",), ("bogus",)],
    ids=["scope", "json", "usage", "command"],
)
def test_subprocess_bad_input_exits_2_with_one_line(tmp_path: Path, args: tuple[str, ...]) -> None:
    d = ("--data", str(tmp_path / "data"))
    assert run_process("init", *d).returncode == 0
    result = run_process(*args, *d)
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("error: ")
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_subprocess_demo_exits_0_quickly(tmp_path: Path) -> None:
    result = run_process("demo", TMPDIR=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "grep of the canary in all files finds 0" in " ".join(result.stdout.split())
    assert result.stderr == ""
    assert list(tmp_path.iterdir()) == []


def test_subprocess_help_and_version() -> None:
    result = run_process("--help")
    assert result.returncode == 0
    for name, _ in all_commands():
        assert name.split()[0] in result.stdout
    version = run_process("--version")
    assert version.returncode == 0 and cenotaph.__version__ in version.stdout


# -- documentation -------------------------------------------------------------------------
def test_every_command_is_registered_and_has_help() -> None:
    assert {c.name for c in COMMANDS} == set(cli.commands)
    assert cli.help
    for name, command in all_commands():
        assert command.help and command.help.strip(), f"`cenotaph {name}` has no help text"
        for param in command.params:
            if isinstance(param, click.Option):
                assert param.help, f"`cenotaph {name} {param.opts[0]}` has no help text"


def _readme_cli_section() -> str:
    """The README's ``## CLI`` section; a missing README or a renamed heading fails the test."""
    text = README.read_text(encoding="utf-8")
    match = re.search(r"^## CLI\b.*?(?=^## |\Z)", text, re.M | re.S)
    assert match is not None, "README.md has no '## CLI' section: the command reference must stay there"
    return match.group(0)


def test_every_command_is_in_the_readme_cli_section() -> None:
    section = _readme_cli_section()
    missing = [
        name for name, _ in all_commands() if not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", section)
    ]
    assert not missing, f"commands missing from README.md's ## CLI section: {missing}"


# -- search and export ---------------------------------------------------------------------
def test_search_returns_hits_best_first(data: Path) -> None:
    d = ("--data", str(data))
    ok_json("write", USER, "diet", "vegetarian food, no meat", "--metadata", '{"topic": "food"}', *d)
    ok_json("write", USER, "sport", "tennis on sundays", "--metadata", '{"topic": "sport"}', *d)
    ok_json("write", SESSION, "lunch", "vegetarian lunch today", *d)
    hits = ok_json("search", USER, "vegetarian food", *d)
    keys = [h["record"]["key"] for h in hits]
    assert keys[0] == "diet" and "lunch" not in keys  # the session is a descendant: not searched
    assert set(hits[0]) == {"record", "score"} and 0 < hits[0]["score"] <= 1
    both = ok_json("search", USER, "vegetarian food", "--descendants", *d)
    assert {"diet", "lunch"} <= {h["record"]["key"] for h in both}
    assert [h["score"] for h in both] == sorted((h["score"] for h in both), reverse=True)
    assert len(ok_json("search", USER, "vegetarian food", "--descendants", "-k", "1", *d)) == 1
    # the session falls through to the user scope unless told not to
    assert {"diet", "lunch"} <= {h["record"]["key"] for h in ok_json("search", SESSION, "vegetarian", *d)}
    only = ok_json("search", SESSION, "vegetarian", "--no-fallthrough", *d)
    assert [h["record"]["key"] for h in only] == ["lunch"]
    filtered = ok_json("search", USER, "vegetarian tennis", "--filter", '{"topic": "sport"}', *d)
    assert [h["record"]["key"] for h in filtered] == ["sport"]
    assert ok_json("search", f"{USER}/session:empty", "vegetarian", "--no-fallthrough", *d) == []


def test_search_skips_forgotten_records(data: Path) -> None:
    d = ("--data", str(data))
    ok_json("write", SESSION, "note", "cardiology appointment", *d)
    ok_json("forget", SESSION, *d)
    assert ok_json("search", USER, "cardiology appointment", "--descendants", *d) == []


def test_export_is_the_access_request_and_holds_no_forgotten_data(data: Path) -> None:
    d = ("--data", str(data))
    note = ok_json("write", SESSION, "note", "cardiology appointment", *d)
    ok_json("write", USER, "summary", "mentions the heart", "--derived-from", note["id"], *d)
    ok_json("write", USER, "diet", "vegetarian", *d)
    before = ok_json("export", USER, *d)
    assert before["subject"] == USER
    assert {r["key"] for r in before["records"]} == {"note", "diet"}
    assert [r["key"] for r in before["derived_records"]] == ["summary"]
    ok_json("forget", SESSION, *d)
    result = run("export", USER, *d)
    assert result.exit_code == 0
    assert "cardiology" not in result.stdout and "heart" not in result.stdout
    after = json.loads(result.stdout)
    assert [r["key"] for r in after["records"]] == ["diet"] and after["derived_records"] == []
    erased = ok_json("forget-subject", USER, *d)
    requests = ok_json("export", USER, *d)["erasure_requests"]
    assert [(r["id"], r["mode"]) for r in requests] == [(erased["id"], "compliance")]


# -- purge, attest, verify-cert ------------------------------------------------------------
def forget_without_purge(data: Path, scope: str = SESSION, mode: str = "compliance") -> str:
    """A forget through the API with auto-purge off, so its purge is left to `cenotaph purge`."""
    with cenotaph.open(data, auto_purge="off") as store:
        store.write(scope, "note", "cardiology appointment on Tuesday")
        request = store.forget(scope, mode=mode)
        assert request.status().state in ("tombstoned", "shredded")
        return request.id


def test_purge_verifies_pending_erasures(data: Path) -> None:
    request_id = forget_without_purge(data)
    result = run("purge", "--data", str(data))
    assert result.exit_code == 0 and result.stderr == ""
    report = json.loads(result.stdout)
    assert report["requests"] == {request_id: "verified"}
    assert report["reclaimed"] > 0 and report["wal_truncated"] is True
    assert report["scan"]["files"] > 0 and report["scan"]["matches"] == 0
    assert report["scan"]["positive_control"] is True
    assert ok_json("status", request_id, "--data", str(data))["status"]["state"] == "verified"


def test_purge_reports_progress_only_to_a_terminal(data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import cenotaph.cli.progress as progress

    forget_without_purge(data)
    seen: list[object] = []
    original = cenotaph.Store.purge

    def spy(self: cenotaph.Store, *, progress: object = None) -> cenotaph.PurgeReport:
        seen.append(progress)
        return original(self, progress=progress)  # type: ignore[arg-type]

    monkeypatch.setattr(cenotaph.Store, "purge", spy)
    ok_json("purge", "--data", str(data))
    assert seen == [None]  # not a terminal: no bar, no callback
    monkeypatch.setattr(progress, "stderr_is_tty", lambda: True)
    result = run("purge", "--data", str(data))
    assert result.exit_code == 0
    assert callable(seen[-1])
    assert json.loads(result.stdout)["wal_truncated"] is True  # stdout holds the report only


def test_attest_prints_the_canonical_certificate(data: Path) -> None:
    d = ("--data", str(data))
    ok_json("write", SESSION, "note", "cardiology", *d)
    request = ok_json("forget", SESSION, *d)
    result = run("attest", request["id"], *d)
    assert result.exit_code == 0, result.stderr
    text = result.stdout.rstrip("\n")
    public_key = ok_json("status", *d)["public_key"]
    certificate = cenotaph.verify_certificate(text, public_key)
    assert certificate.to_json() == text  # exactly the canonical JSON
    assert certificate["request_id"] == request["id"] and certificate["mode"] == "compliance"
    assert certificate["root_of_trust"] == "local-file"
    assert "cardiology" not in text and SESSION not in text  # content-free


def test_attest_out_writes_the_file(data: Path, tmp_path: Path) -> None:
    d = ("--data", str(data))
    ok_json("write", USER, "k", "v", *d)
    request = ok_json("forget", USER, "k", *d)
    out = tmp_path / "cert.json"
    doc = ok_json("attest", request["id"], "--out", str(out), *d)
    text = out.read_text(encoding="utf-8")
    certificate = cenotaph.verify_certificate(text, doc["public_key"])
    assert certificate.to_json() == text
    assert doc["request_id"] == request["id"] and doc["out"] == str(out.resolve())
    assert doc["horizon"] is None and "verify-cert" in doc["verify"]
    line = assert_one_line_error(
        run("attest", request["id"], "--out", str(tmp_path / "no" / "c.json"), *d), 2
    )
    assert "--out" in line


def test_attest_to_an_unwritable_file_changes_nothing(data: Path, tmp_path: Path) -> None:
    """attest appends to the audit log; a certificate that cannot be written must not leave an
    entry (or a file) behind."""
    d = ("--data", str(data))
    ok_json("write", USER, "k", "v", *d)
    request = ok_json("forget", USER, "k", *d)

    def events() -> list[str]:
        with contextlib.closing(sqlite3.connect(data / "cenotaph.db")) as db:
            return [json.loads(e)["event"] for (e,) in db.execute("SELECT entry FROM audit ORDER BY seq")]

    before = events()
    locked = tmp_path / "locked"
    locked.mkdir()
    target = locked / "c.json"
    target.write_text("keep me")
    (locked / "dir.json").mkdir()
    for out in (locked / "dir.json", "/proc/version"):
        line = assert_one_line_error(run("attest", request["id"], "--out", str(out), *d), 2)
        assert "--out" in line
    not_provable = ok_json("forget", USER, "other", "--mode", "operational", *d)
    assert_one_line_error(run("attest", not_provable["id"], "--out", str(target), *d), 1)
    assert target.read_text() == "keep me"  # an existing file is only replaced by a certificate
    fresh_out = tmp_path / "never.json"
    assert_one_line_error(run("attest", not_provable["id"], "--out", str(fresh_out), *d), 1)
    assert not fresh_out.exists()
    assert events() == [*before, "forget"]  # the operational forget's own entry; none by attest


def test_arguments_that_are_not_utf8_are_bad_input_not_internal_errors(data: Path) -> None:
    ok_json("write", USER, "k", "v", "--data", str(data))
    base = [os.fsencode(sys.executable), b"-m", b"cenotaph.cli.main"]
    for args in (
        [b"attest", b"er_\xff", b"--data", os.fsencode(data)],
        [b"status", b"er_\xff", b"--data", os.fsencode(data)],
        [
            b"write",
            USER.encode(),
            b"k2",
            b'"v"',
            b"--reauthorization",
            b"crt_\xff",
            b"--data",
            os.fsencode(data),
        ],
        [b"read", USER.encode(), b"k\xff", b"--data", os.fsencode(data)],
    ):
        proc = subprocess.run(base + args, capture_output=True, env=subprocess_env(), timeout=120)
        err = proc.stderr.decode(errors="replace")
        assert proc.returncode == 2, (args, err)
        assert err.startswith("error: ") and "internal error" not in err and "Traceback" not in err


def test_attest_refuses_what_is_not_provable(data: Path) -> None:
    d = ("--data", str(data))
    pending = forget_without_purge(data)
    line = assert_one_line_error(run("attest", pending, *d), 1)
    assert "not provable" in line and "cenotaph purge" in line and "cardiology" not in line
    ok_json("purge", *d)
    assert run("attest", pending, *d).exit_code == 0
    operational = forget_without_purge(data, scope=f"{USER}/session:s2", mode="operational")
    line = assert_one_line_error(run("attest", operational, *d), 1)
    assert "operational" in line and "cenotaph purge" not in line


@pytest.fixture
def certificate_file(data: Path, tmp_path: Path) -> tuple[Path, str]:
    """A certificate written by `cenotaph attest --out`, and the public key of its store."""
    d = ("--data", str(data))
    ok_json("write", SESSION, "note", "cardiology", *d)
    request = ok_json("forget", SESSION, *d)
    out = tmp_path / "cert.json"
    doc = ok_json("attest", request["id"], "--out", str(out), *d)
    return out, doc["public_key"]


def test_verify_cert_needs_no_data_directory(
    certificate_file: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, key = certificate_file
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    doc = ok_json("verify-cert", str(path), "--public-key", key)
    certificate = json.loads(path.read_text())
    assert doc["valid"] is True and doc["request_id"] == certificate["request_id"]
    assert doc["public_key"] == key and doc["horizon"] is None
    assert any("horizon" in claim for claim in doc["does_not_prove"])
    assert any("local keyring file" in claim for claim in doc["does_not_prove"])
    assert any("0 match(es)" in claim for claim in doc["proves"])
    assert list(elsewhere.iterdir()) == []  # no ./cenotaph-data, no keyring
    # upper-case hex and stdin work too
    via_stdin = CliRunner().invoke(
        cli, ["verify-cert", "-", "--public-key", key.upper()], input=path.read_bytes()
    )
    assert via_stdin.exit_code == 0 and json.loads(via_stdin.stdout)["valid"] is True
    table = run("verify-cert", str(path), "--public-key", key, "--table")
    assert table.exit_code == 0 and "does not prove" in table.stdout


@pytest.mark.parametrize(
    "change",
    [
        lambda c: c | {"forget_version": c["forget_version"] + 1},
        lambda c: c | {"horizon": "2020-01-01T00:00:00+00:00"},
        lambda c: c | {"scan": {**c["scan"], "matches": 0, "files": c["scan"]["files"] + 1}},
        lambda c: {k: v for k, v in c.items() if k != "root_of_trust"},
        lambda c: c | {"extra": "field"},
    ],
    ids=["version", "horizon", "scan", "removed-field", "added-field"],
)
def test_verify_cert_detects_a_tampered_file(certificate_file: tuple[Path, str], change: Any) -> None:
    path, key = certificate_file
    path.write_text(json.dumps(change(json.loads(path.read_text()))))
    line = assert_one_line_error(run("verify-cert", str(path), "--public-key", key), 1)
    assert "not valid" in line
    assert run("verify-cert", str(path), "--public-key", key).stdout == ""


def test_verify_cert_refuses_another_stores_key_and_garbage(
    certificate_file: tuple[Path, str], tmp_path: Path
) -> None:
    path, _ = certificate_file
    other = tmp_path / "other"
    run("init", "--data", str(other))
    other_key = ok_json("status", "--data", str(other))["public_key"]
    assert "another store" in assert_one_line_error(
        run("verify-cert", str(path), "--public-key", other_key), 1
    )
    garbage = tmp_path / "garbage.json"
    garbage.write_bytes(b"\xff\xfe not json")
    assert_one_line_error(run("verify-cert", str(garbage), "--public-key", other_key), 1)


@pytest.mark.parametrize(
    "args",
    [
        ("--public-key", "abc"),
        ("--public-key", "g" * 64),
        ("--public-key", "a" * 63),
        ("--public-key", ""),
        (),
    ],
    ids=["short", "not-hex", "odd", "empty", "missing"],
)
def test_verify_cert_bad_key_exits_2(certificate_file: tuple[Path, str], args: tuple[str, ...]) -> None:
    path, _ = certificate_file
    result = run("verify-cert", str(path), *args)
    assert_one_line_error(result, 2)
    assert result.stdout == ""


def test_verify_cert_missing_file_exits_2(tmp_path: Path) -> None:
    assert_one_line_error(run("verify-cert", str(tmp_path / "nope.json"), "--public-key", "a" * 64), 2)
    assert_one_line_error(run("verify-cert", str(tmp_path), "--public-key", "a" * 64), 2)


# -- status, rotation, backups and restore --------------------------------------------------
def test_status_lists_each_request_with_state_and_horizon(data: Path) -> None:
    d = ("--data", str(data))
    ok_json("write", USER, "k", "v", *d)
    request = ok_json("forget", USER, "k", *d)
    row = ok_json("status", *d)["requests"][0]
    assert row["id"] == request["id"] and row["state"] == "verified" and row["horizon"] is None
    report = ok_json("rotate-keys", *d)
    assert report["destroyed_epochs"] == [1] and report["retained_epochs"] == []
    assert report["new_epoch"] == 2 and report["rewrapped"] >= 1
    row = ok_json("status", *d)["requests"][0]
    assert row["horizon"] is not None
    certificate = json.loads(run("attest", request["id"], *d).stdout)
    assert certificate["horizon"] == row["horizon"]


def test_backup_retains_epochs_until_released(data: Path, tmp_path: Path) -> None:
    d = ("--data", str(data))
    ok_json("write", USER, "k", "v", *d)
    info = ok_json("backup", str(tmp_path / "bk"), *d)
    assert info["id"].startswith("bk_") and info["path"] == str((tmp_path / "bk").resolve())
    assert info["epochs"] == [1] and info["bytes"] > 0
    assert ok_json("status", *d)["backups"] == {info["id"]: [1]}
    request = ok_json("forget", USER, "k", *d)
    rotation = ok_json("rotate-keys", *d)
    assert rotation["retained_epochs"] == [1] and rotation["destroyed_epochs"] == []
    assert ok_json("status", request["id"], *d)["status"]["horizon"] is None
    released = ok_json("release-backup", info["id"], *d)
    assert released["released"] == info["id"] and released["epochs"] == [1]
    assert ok_json("status", *d)["backups"] == {}
    assert 1 in ok_json("rotate-keys", *d)["destroyed_epochs"]
    assert ok_json("status", request["id"], *d)["status"]["horizon"] is not None
    assert_one_line_error(run("release-backup", info["id"], *d), 1)  # released already: not found


def test_backup_into_a_non_empty_directory_is_bad_input(data: Path, tmp_path: Path) -> None:
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "file").write_text("x")
    assert_one_line_error(run("backup", str(tmp_path / "full"), "--data", str(data)), 2)


def test_backup_forget_restore_resurrects_nothing(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = ("--data", str(data))
    ok_json("write", SESSION, "note", "cardiology appointment", *d)
    ok_json("write", USER, "diet", "vegetarian", *d)
    backup_dir = tmp_path / "bk"
    ok_json("backup", str(backup_dir), *d)
    request = ok_json("forget", SESSION, *d)
    target = tmp_path / "restored"
    keyring = data / "keyring"
    doc = ok_json("restore", str(backup_dir), "--data", str(target), "--keyring", str(keyring))
    assert doc["data"] == str(target.resolve()) and doc["keyring"] == str(keyring.resolve())
    assert doc["public_key"] == ok_json("status", *d)["public_key"]
    assert [(r["id"], r["state"]) for r in doc["requests"]] == [(request["id"], "verified")]
    assert "horizon" in doc["requests"][0]
    assert f"CENOTAPH_KEYRING={keyring.resolve()}" in doc["next"]
    assert not (target / "keyring").exists()  # no key material was copied
    # later commands on the restored directory use the source's keyring
    monkeypatch.setenv("CENOTAPH_KEYRING", str(keyring))
    t = ("--data", str(target))
    assert run("read", SESSION, "note", *t).exit_code == 1
    assert ok_json("read", USER, "diet", *t)["value"] == "vegetarian"
    assert [r["key"] for r in ok_json("list", USER, "--descendants", *t)] == ["diet"]
    assert ok_json("search", USER, "cardiology appointment", "--descendants", *t) == []
    assert "cardiology" not in run("export", USER, *t).stdout
    refused = assert_one_line_error(run("write", SESSION, "note", "again", *t), 1)
    assert "forgotten" in refused
    assert b"cardiology" not in b"".join(p.read_bytes() for p in target.rglob("*") if p.is_file())


def test_an_interrupted_restore_is_refused_by_every_command_then_finished_by_restore(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = ("--data", str(data))
    ok_json("write", SESSION, "note", "cardiology appointment", *d)
    ok_json("backup", str(tmp_path / "bk"), *d)
    ok_json("forget", SESSION, *d)
    target, keyring = tmp_path / "restored", str(data / "keyring")
    args = ("restore", str(tmp_path / "bk"), "--data", str(target), "--keyring", keyring)
    killed = run_process(*args, CENOTAPH_FAULT="restore.copied")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    monkeypatch.setenv("CENOTAPH_KEYRING", keyring)
    t = ("--data", str(target))
    for command in (("status",), ("read", SESSION, "note"), ("audit", "verify")):
        line = assert_one_line_error(run(*command, *t), 1)
        assert "restore" in line and "has not finished" in line
    finished = run_process(*args)
    assert finished.returncode == 0, finished.stderr
    assert run("read", SESSION, "note", *t).exit_code == 1  # not found: the forget was replayed
    assert ok_json("audit", "verify", *t)["ok"] is True


def test_restore_takes_the_keyring_from_the_environment(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ok_json("write", USER, "k", "v", "--data", str(data))
    ok_json("backup", str(tmp_path / "bk"), "--data", str(data))
    monkeypatch.setenv("CENOTAPH_KEYRING", str(data / "keyring"))
    doc = ok_json("restore", str(tmp_path / "bk"), "--data", str(tmp_path / "restored"))
    assert doc["keyring"] == str((data / "keyring").resolve())
    assert ok_json("read", USER, "k", "--data", str(tmp_path / "restored"))["value"] == "v"


def test_restore_without_a_keyring_is_bad_input(data: Path, tmp_path: Path) -> None:
    ok_json("backup", str(tmp_path / "bk"), "--data", str(data))
    target = tmp_path / "restored"
    line = assert_one_line_error(run("restore", str(tmp_path / "bk"), "--data", str(target)), 2)
    assert "keyring" in line and "CENOTAPH_KEYRING" in line
    line = assert_one_line_error(
        run("restore", str(tmp_path / "bk"), "--data", str(target), "--keyring", str(tmp_path / "nope")), 2
    )
    assert "--keyring" in line
    assert not target.exists()


def test_restore_refuses_bad_sources_and_targets(data: Path, tmp_path: Path) -> None:
    k = ("--keyring", str(data / "keyring"))
    ok_json("backup", str(tmp_path / "bk"), "--data", str(data))
    not_a_backup = tmp_path / "plain"
    not_a_backup.mkdir()
    assert_one_line_error(run("restore", str(not_a_backup), "--data", str(tmp_path / "t1"), *k), 2)
    assert not (tmp_path / "t1").exists()
    full = tmp_path / "full"
    full.mkdir()
    (full / "precious").write_text("keep me")
    assert_one_line_error(run("restore", str(tmp_path / "bk"), "--data", str(full), *k), 2)
    assert [p.name for p in full.iterdir()] == ["precious"]


def test_restore_with_another_stores_keyring_fails_and_leaves_nothing(data: Path, tmp_path: Path) -> None:
    ok_json("write", USER, "k", "v", "--data", str(data))
    ok_json("backup", str(tmp_path / "bk"), "--data", str(data))
    other = tmp_path / "other"
    ok_json("init", "--data", str(other))
    target = tmp_path / "restored"
    line = assert_one_line_error(
        run("restore", str(tmp_path / "bk"), "--data", str(target), "--keyring", str(other / "keyring")), 1
    )
    assert "key provider" in line
    assert not target.exists()  # a retry can use the same target
    empty = tmp_path / "empty-target"
    empty.mkdir()
    assert_one_line_error(
        run("restore", str(tmp_path / "bk"), "--data", str(empty), "--keyring", str(other / "keyring")), 1
    )
    assert list(empty.iterdir()) == []
    ok_json("restore", str(tmp_path / "bk"), "--data", str(empty), "--keyring", str(data / "keyring"))


# -- audit ---------------------------------------------------------------------------------
def test_audit_verify_on_a_fresh_and_a_used_store(data: Path) -> None:
    d = ("--data", str(data))
    fresh = ok_json("audit", "verify", *d)
    assert fresh["ok"] is True and fresh["entries"] == fresh["anchored_seq"]
    ok_json("write", USER, "k", "v", *d)
    ok_json("forget", USER, "k", *d)
    used = ok_json("audit", "verify", *d)
    assert used["ok"] is True and used["entries"] > fresh["entries"]
    assert used["anchored_seq"] == used["entries"] and len(used["head"]) == 64


def tamper_audit(data: Path, how: str) -> None:
    """Edit the audit table directly, as someone with the database file could."""
    with contextlib.closing(sqlite3.connect(data / "cenotaph.db")) as db:
        seq, entry = db.execute("SELECT seq, entry FROM audit ORDER BY seq LIMIT 1").fetchone()
        if how == "edit":
            doc = json.loads(entry)
            doc["at"] = "2000-01-01T00:00:00Z"
            db.execute("UPDATE audit SET entry = ? WHERE seq = ?", (json.dumps(doc), seq))
        elif how == "garbage":
            db.execute("UPDATE audit SET entry = ? WHERE seq = ?", ("{not json", seq))
        elif how == "truncate":
            db.execute("DELETE FROM audit WHERE seq = (SELECT MAX(seq) FROM audit)")
        db.commit()


@pytest.mark.parametrize("how", ["edit", "garbage", "truncate"])
def test_audit_verify_exits_1_after_tampering(tmp_path: Path, how: str) -> None:
    d = ("--data", str(tmp_path / "data"))
    assert run_process("init", *d).returncode == 0
    assert run_process("write", SESSION, "note", "cardiology", *d).returncode == 0
    assert run_process("forget", SESSION, *d).returncode == 0
    clean = run_process("audit", "verify", *d)
    assert clean.returncode == 0 and json.loads(clean.stdout)["ok"] is True
    tamper_audit(tmp_path / "data", how)  # the CLI processes have exited
    result = run_process("audit", "verify", *d)
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("error: ")
    assert "altered" in result.stderr and "Traceback" not in result.stderr


def test_audit_alone_shows_its_help() -> None:
    result = run("audit")
    assert result.exit_code == 2
    assert "verify" in result.stderr and "Traceback" not in result.stderr


# -- relative paths ------------------------------------------------------------------------
def test_a_relative_data_directory_is_scanned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    d = ("--data", "rel-data")
    ok_json("init", *d)
    ok_json("write", SESSION, "note", "cardiology", *d)
    request = ok_json("forget", SESSION, *d)
    scan = request["status"]["layers"]["scan"]["evidence"]
    assert scan["files"] > 0 and scan["bytes"] > 0  # a scan of no file would prove nothing


# -- more real processes -------------------------------------------------------------------
def test_subprocess_attest_then_verify_cert(tmp_path: Path) -> None:
    d = ("--data", str(tmp_path / "data"))
    assert run_process("init", *d).returncode == 0
    assert run_process("write", SESSION, "note", "cardiology", *d).returncode == 0
    request_id = json.loads(run_process("forget", SESSION, *d).stdout)["id"]
    key = json.loads(run_process("status", *d).stdout)["public_key"]
    attested = run_process("attest", request_id, *d)
    assert attested.returncode == 0 and attested.stderr == ""
    cert = tmp_path / "cert.json"
    cert.write_text(attested.stdout)
    checked = run_process("verify-cert", str(cert), "--public-key", key)
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["request_id"] == request_id
    piped = subprocess.run(
        [sys.executable, "-m", "cenotaph.cli.main", "verify-cert", "-", "--public-key", key],
        input=attested.stdout.replace('"forget_version":', '"forget_version":1'),
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=120,
    )
    assert piped.returncode == 1 and len(piped.stderr.splitlines()) == 1
    bad = run_process("verify-cert", str(cert), "--public-key", "xyz")
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1 and bad.stdout == ""


def test_subprocess_purge_draws_a_bar_on_a_terminal_only(tmp_path: Path) -> None:
    pty = pytest.importorskip("pty")
    data_dir = tmp_path / "data"
    assert run_process("init", "--data", str(data_dir)).returncode == 0
    forget_without_purge(data_dir)
    controller, terminal = pty.openpty()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "cenotaph.cli.main", "purge", "--data", str(data_dir)],
            stdout=subprocess.PIPE,
            stderr=terminal,
            text=True,
            env=subprocess_env(TERM="xterm", COLUMNS="100"),
            timeout=120,
        )
        os.close(terminal)
        terminal = -1
        drawn = b""
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        os.close(controller)
        if terminal != -1:
            os.close(terminal)
    assert result.returncode == 0
    report = json.loads(result.stdout)  # stdout is exactly the report
    assert list(report["requests"].values()) == ["verified"]
    assert b"scanning for residue" in drawn
