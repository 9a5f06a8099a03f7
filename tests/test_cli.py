"""The ``cenotaph`` CLI (SPEC §7): JSON by default, ``--table`` for people, exit 2 with one line on bad input.

Most tests drive the click group in-process with ``CliRunner``; a few run the real entry point in a
subprocess (``python -m cenotaph.cli.main``) so the exit codes and stderr are the ones a shell sees.
"""

from __future__ import annotations

import json
import os
import re
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
ENV_VARS = ("CENOTAPH_DATA", "CENOTAPH_KEYRING", "CENOTAPH_MASTER_KEY", "CENOTAPH_DEBUG")


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
    assert "base_version" in assert_one_line_error(result, 1)
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


def test_reauthorize_takes_key_or_subject_not_both(data: Path) -> None:
    result = run("reauthorize", USER, "k", "--subject", "s", "--data", str(data))
    assert "not both" in assert_one_line_error(result, 2)


def test_forget_refuses_a_scope_leak_and_names_no_value(data: Path) -> None:
    d = ("--data", str(data))
    ok_json("write", USER, "diet", "secret-value-in-the-user-scope", *d)
    ok_json("write", SESSION, "diet", "secret-value-in-the-session", *d)
    line = assert_one_line_error(run("forget", SESSION, "diet", *d), 1)
    assert "include_ancestors" in line and "secret-value" not in line
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
    assert set(one["status"]) == {"state", "layers", "horizon", "gaps"}
    summary = ok_json("status", *d)
    assert summary["erasures"]["total"] == 1
    assert [r["id"] for r in summary["requests"]] == [request["id"]]
    assert summary["requests"][0]["state"] == one["status"]["state"]
    assert_one_line_error(run("status", "er_nonexistent", *d), 2)


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


def test_doctor_fails_on_a_missing_data_directory(tmp_path: Path) -> None:
    result = run("doctor", "--data", str(tmp_path / "nowhere"))
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["ok"] is False
    checks = {c["name"]: c for c in doc["checks"]}
    assert checks["data directory"]["status"] == "fail"
    assert checks["sqlite secure_delete"]["status"] == "ok"  # the SQLite build is still checked
    assert not (tmp_path / "nowhere").exists()


# -- output modes --------------------------------------------------------------------------
TABLE_CASES = [
    ("init",),
    ("write", USER, "k2", "v"),
    ("read", USER, "k"),
    ("list", USER),
    ("forget", USER, "k"),
    ("forget-subject", "tenant:acme/user:bob"),
    ("reauthorize", USER),
    ("status",),
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
    ("status", "er_unknown"),
    ("no-such-command",),
]


@pytest.mark.parametrize("args", BAD_INPUT, ids=lambda a: " ".join(a)[:40])
def test_bad_input_exits_2_with_one_line(data: Path, args: tuple[str, ...]) -> None:
    result = run(*args, "--data", str(data))
    assert_one_line_error(result, 2)
    assert result.stdout == ""


def test_bad_json_names_the_position_not_the_text(data: Path) -> None:
    line = assert_one_line_error(
        run("write", USER, "k", '{"secret": oops}', "--json", "--data", str(data)), 2
    )
    assert "not valid JSON" in line and "line 1 column" in line and "oops" not in line


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
    ):
        assert phrase in out, phrase
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


def _readme_cli_section() -> str | None:
    if not README.is_file():
        return None
    match = re.search(r"^## CLI\b.*?(?=^## |\Z)", README.read_text(encoding="utf-8"), re.M | re.S)
    return None if match is None else match.group(0)


def test_every_command_is_in_the_readme_cli_section() -> None:
    section = _readme_cli_section()
    if section is None:
        pytest.xfail("README CLI section pending")
    missing = [
        name for name, _ in all_commands() if not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", section)
    ]
    assert not missing, f"commands missing from README.md's ## CLI section: {missing}"
