"""The keyring's files as an operator handles them: a lost keyring.json is reported, never
re-created; ``cenotaph keyring seal|move|export|import`` are crash-safe and refuse the attacks.
"""

from __future__ import annotations

import json
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from tests.test_cli import assert_one_line_error, ok_json, run, run_process

import cenotaph
from cenotaph.cli.main import cli
from cenotaph.crypto.provider import KEYRING_ENV, MASTER_KEY_ENV, LocalKeyring
from cenotaph.errors import KeyProviderError

USER = "tenant:acme/user:alice"
MASTER = "11" * 32
OTHER_MASTER = "22" * 32


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CENOTAPH_DATA", KEYRING_ENV, MASTER_KEY_ENV, "CENOTAPH_DEBUG"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    directory = tmp_path / "data"
    with cenotaph.open(directory) as store:
        store.write(USER, "note", "cardiology appointment on Tuesday")
    return directory


# -- a lost keyring.json ------------------------------------------------------------------------
def test_a_missing_keyring_file_is_reported_not_recreated(data: Path) -> None:
    (data / "keyring" / "keyring.json").unlink()
    with pytest.raises(KeyProviderError, match=r"no keyring\.json in .*keyring"):
        cenotaph.open(data)
    assert not (data / "keyring" / "keyring.json").exists()
    line = assert_one_line_error(run("read", USER, "note", "--data", str(data)), 1)
    assert "keyring.json" in line and "backup" in line
    assert not (data / "keyring" / "keyring.json").exists()


def test_a_keyring_whose_file_is_gone_but_whose_ledger_remains_refuses_to_start_over(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    with cenotaph.open(tmp_path / "data", key_provider=LocalKeyring(keys)) as store:
        store.write(USER, "k", 1)
    (keys / "keyring.json").unlink()
    with pytest.raises(KeyProviderError, match="was in use"):
        LocalKeyring(keys)  # e.g. the API given a keyring directory directly
    assert not (keys / "keyring.json").exists()


def test_a_new_directory_still_gets_a_new_keyring(tmp_path: Path) -> None:
    with cenotaph.open(tmp_path / "fresh") as store:
        store.write(USER, "k", 1)
    assert (tmp_path / "fresh" / "keyring" / "keyring.json").is_file()
    assert ok_json("init", "--data", str(tmp_path / "other"))["created"] is True


# -- helpers for the commands -------------------------------------------------------------------
def keyring_cli(*args: str, **env: str) -> Any:
    return CliRunner(env=env or None).invoke(cli, list(args))


def secrets_in(keyring_json: Path) -> list[str]:
    """Every secret an unsealed keyring.json holds, as the hex text it is stored as."""
    doc = json.loads(keyring_json.read_text())
    return [doc["erasure_secret"], doc["signing_key"], *doc["epochs"].values()]


def files_holding(root: Path, needles: list[str]) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file():
            body = path.read_bytes()
            found += [f"{path.name}" for n in needles if n.encode() in body or bytes.fromhex(n) in body]
    return found


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def readable(data: Path, **env: str) -> bool:
    result = keyring_cli("read", USER, "note", "--data", str(data), **env)
    return result.exit_code == 0 and bool(
        json.loads(result.stdout)["value"] == "cardiology appointment on Tuesday"
    )


# -- seal -----------------------------------------------------------------------------------
def test_seal_seals_the_keyring_in_place(data: Path) -> None:
    keyring_json = data / "keyring" / "keyring.json"
    clear = secrets_in(keyring_json)
    result = keyring_cli("keyring", "seal", "--data", str(data), CENOTAPH_MASTER_KEY=MASTER)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["sealed"] is True and doc["changed"] is True and "rotate-keys" in doc["next"]
    assert set(json.loads(keyring_json.read_text())) == {"format", "sealed"}
    assert not files_holding(data / "keyring", clear)  # no key in the clear, staged copies included
    assert readable(data, CENOTAPH_MASTER_KEY=MASTER)
    assert keyring_cli("read", USER, "note", "--data", str(data)).exit_code == 1  # needs the key now
    again = keyring_cli("keyring", "seal", "--data", str(data), CENOTAPH_MASTER_KEY=MASTER)
    assert json.loads(again.stdout)["changed"] is False


def test_seal_changes_the_master_key(data: Path) -> None:
    keyring_cli("keyring", "seal", "--data", str(data), CENOTAPH_MASTER_KEY=MASTER)
    result = keyring_cli(
        "keyring",
        "seal",
        "--data",
        str(data),
        CENOTAPH_MASTER_KEY=MASTER,
        CENOTAPH_NEW_MASTER_KEY=OTHER_MASTER,
    )
    assert result.exit_code == 0, result.output
    assert readable(data, CENOTAPH_MASTER_KEY=OTHER_MASTER)
    assert not readable(data, CENOTAPH_MASTER_KEY=MASTER)


def test_seal_with_the_wrong_master_key_changes_nothing(data: Path) -> None:
    keyring_cli("keyring", "seal", "--data", str(data), CENOTAPH_MASTER_KEY=MASTER)
    before = snapshot(data / "keyring")
    for env in (
        {"CENOTAPH_MASTER_KEY": OTHER_MASTER},
        {"CENOTAPH_MASTER_KEY": OTHER_MASTER, "CENOTAPH_NEW_MASTER_KEY": "33" * 32},
    ):
        result = keyring_cli("keyring", "seal", "--data", str(data), **env)
        assert result.exit_code == 1 and "does not open" in result.stderr, result.output
    assert snapshot(data / "keyring") == before
    assert readable(data, CENOTAPH_MASTER_KEY=MASTER)


@pytest.mark.parametrize("master", [None, "", "abc", "11" * 31, "zz" * 32])
def test_seal_needs_a_well_formed_master_key(data: Path, master: str | None) -> None:
    before = snapshot(data / "keyring")
    env = {} if master is None else {"CENOTAPH_MASTER_KEY": master}
    result = keyring_cli("keyring", "seal", "--data", str(data), **env)
    assert result.exit_code in (1, 2) and result.stderr.startswith("error: ")
    assert "CENOTAPH_MASTER_KEY" in result.stderr and (master or "@@") not in result.stderr.replace(
        "error", ""
    )
    assert snapshot(data / "keyring") == before


# -- move -----------------------------------------------------------------------------------
def test_move_takes_the_keyring_out_of_the_data_directory(data: Path, tmp_path: Path) -> None:
    clear = secrets_in(data / "keyring" / "keyring.json")
    dest = tmp_path / "vault"
    result = keyring_cli("keyring", "move", str(dest), "--data", str(data))
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["to"] == str(dest.resolve()) and "CENOTAPH_KEYRING=" in doc["next"]
    assert not (data / "keyring").exists() and not files_holding(data, clear)
    assert readable(data, CENOTAPH_KEYRING=str(dest))
    assert stat.S_IMODE(dest.stat().st_mode) == 0o700
    line = assert_one_line_error(run("read", USER, "note", "--data", str(data)), 2)
    assert "CENOTAPH_KEYRING" in line  # without it the store says where to look, and creates nothing
    assert not (data / "keyring").exists()


def test_move_a_sealed_keyring(data: Path, tmp_path: Path) -> None:
    keyring_cli("keyring", "seal", "--data", str(data), CENOTAPH_MASTER_KEY=MASTER)
    result = keyring_cli(
        "keyring", "move", str(tmp_path / "vault"), "--data", str(data), CENOTAPH_MASTER_KEY=MASTER
    )
    assert result.exit_code == 0 and json.loads(result.stdout)["sealed"] is True
    assert readable(data, CENOTAPH_KEYRING=str(tmp_path / "vault"), CENOTAPH_MASTER_KEY=MASTER)


def test_move_refuses_targets_that_would_misplace_the_keys(data: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "attacker"
    elsewhere.mkdir()
    (tmp_path / "link").symlink_to(elsewhere, target_is_directory=True)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    (tmp_path / "afile").write_text("x")
    before = snapshot(data)
    for dest, reason in (
        (tmp_path / "link", "symbolic link"),
        (data / "inside", "inside the data directory"),
        (data / "keyring" / "sub", "inside the data directory"),
        (tmp_path / "full", "not empty"),
        (tmp_path / "afile", "is a file"),
        (tmp_path / "no" / "parent", "does not exist"),
    ):
        result = keyring_cli("keyring", "move", str(dest), "--data", str(data))
        assert result.exit_code == 2, (dest, result.output)
        assert reason in result.stderr, (dest, result.stderr)
    assert snapshot(data) == before and not any(elsewhere.iterdir())
    assert readable(data)


@pytest.mark.parametrize("point", ["keyring.copied", "keyring.unkeyed"])
def test_a_move_killed_half_way_always_leaves_a_keyring_and_finishes_when_run_again(
    data: Path, tmp_path: Path, point: str
) -> None:
    dest = tmp_path / "vault"
    killed = run_process("keyring", "move", str(dest), "--data", str(data), CENOTAPH_FAULT=point)
    assert killed.returncode == -9, killed.stderr
    # one whole keyring exists at this moment: the copy, or (before the copy was finished) the source
    assert readable(data, CENOTAPH_KEYRING=str(dest))
    if point == "keyring.copied":
        assert readable(data)  # the source is untouched until the copy was opened
    else:
        assert not (data / "keyring" / "keyring.json").exists()  # no key left behind
    again = keyring_cli("keyring", "move", str(dest), "--data", str(data))
    assert again.exit_code == 0, again.output
    assert not (data / "keyring").exists()
    assert readable(data, CENOTAPH_KEYRING=str(dest))


# -- export and import ----------------------------------------------------------------------
def test_export_refuses_an_unsealed_keyring(data: Path, tmp_path: Path) -> None:
    for env in ({}, {"CENOTAPH_MASTER_KEY": MASTER}):
        result = keyring_cli("keyring", "export", str(tmp_path / "out.json"), "--data", str(data), **env)
        assert result.exit_code == 1 and "not sealed" in result.stderr, result.output
    assert not (tmp_path / "out.json").exists()


def test_export_import_and_restore_after_the_data_directory_is_lost(data: Path, tmp_path: Path) -> None:
    clear = secrets_in(data / "keyring" / "keyring.json")
    keyring_cli("keyring", "seal", "--data", str(data), CENOTAPH_MASTER_KEY=MASTER)
    keyring_cli("rotate-keys", "--data", str(data), CENOTAPH_MASTER_KEY=MASTER)
    backup = keyring_cli("backup", str(tmp_path / "backup"), "--data", str(data), CENOTAPH_MASTER_KEY=MASTER)
    assert backup.exit_code == 0, backup.output
    out = tmp_path / "offsite" / "keyring-export.json"
    out.parent.mkdir()
    result = keyring_cli("keyring", "export", str(out), "--data", str(data), CENOTAPH_MASTER_KEY=MASTER)
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert not files_holding(out.parent, clear)
    shutil.rmtree(data)  # the data directory, keyring and all, is gone
    imported = keyring_cli("keyring", "import", str(out), str(tmp_path / "keys"), CENOTAPH_MASTER_KEY=MASTER)
    assert imported.exit_code == 0, imported.output
    restored = keyring_cli(
        "restore",
        str(tmp_path / "backup"),
        "--data",
        str(tmp_path / "restored"),
        "--keyring",
        str(tmp_path / "keys"),
        CENOTAPH_MASTER_KEY=MASTER,
    )
    assert restored.exit_code == 0, restored.output
    assert readable(
        tmp_path / "restored", CENOTAPH_KEYRING=str(tmp_path / "keys"), CENOTAPH_MASTER_KEY=MASTER
    )


def test_export_never_replaces_or_follows_a_link(data: Path, tmp_path: Path) -> None:
    keyring_cli("keyring", "seal", "--data", str(data), CENOTAPH_MASTER_KEY=MASTER)
    existing = tmp_path / "existing.json"
    existing.write_text("keep me")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me too")
    (tmp_path / "link.json").symlink_to(victim)
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "would-be-created.json")
    for out, reason in (
        (existing, "exists"),
        (tmp_path / "link.json", "symbolic link"),
        (dangling, "symbolic link"),
        (data / "export.json", "inside the data directory"),
    ):
        result = keyring_cli("keyring", "export", str(out), "--data", str(data), CENOTAPH_MASTER_KEY=MASTER)
        assert result.exit_code == 2 and reason in result.stderr, (out, result.output)
    assert existing.read_text() == "keep me" and victim.read_text() == "keep me too"
    assert not (tmp_path / "would-be-created.json").exists() and not (data / "export.json").exists()


def test_import_refuses_the_wrong_key_a_tampered_export_and_a_used_directory(
    data: Path, tmp_path: Path
) -> None:
    keyring_cli("keyring", "seal", "--data", str(data), CENOTAPH_MASTER_KEY=MASTER)
    out = tmp_path / "export.json"
    assert (
        keyring_cli("keyring", "export", str(out), "--data", str(data), CENOTAPH_MASTER_KEY=MASTER).exit_code
        == 0
    )
    result = keyring_cli(
        "keyring", "import", str(out), str(tmp_path / "k1"), CENOTAPH_MASTER_KEY=OTHER_MASTER
    )
    assert result.exit_code == 1 and "does not open" in result.stderr
    doc = json.loads(out.read_text())
    flipped = bytearray(bytes.fromhex(doc["sealed"]))
    flipped[40] ^= 1
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps({**doc, "sealed": flipped.hex()}))
    result = keyring_cli("keyring", "import", str(tampered), str(tmp_path / "k2"), CENOTAPH_MASTER_KEY=MASTER)
    assert result.exit_code == 1 and "altered" in result.stderr
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("x")
    result = keyring_cli("keyring", "import", str(out), str(tmp_path / "used"), CENOTAPH_MASTER_KEY=MASTER)
    assert result.exit_code == 2 and "not empty" in result.stderr
    (tmp_path / "linked").symlink_to(tmp_path / "target-dir", target_is_directory=True)
    result = keyring_cli("keyring", "import", str(out), str(tmp_path / "linked"), CENOTAPH_MASTER_KEY=MASTER)
    assert result.exit_code == 2 and "symbolic link" in result.stderr
    assert (
        not (tmp_path / "k1").exists()
        and not (tmp_path / "k2").exists()
        and not (tmp_path / "target-dir").exists()
    )
    garbage = tmp_path / "garbage.json"
    garbage.write_text("not json")
    result = keyring_cli("keyring", "import", str(garbage), str(tmp_path / "k3"), CENOTAPH_MASTER_KEY=MASTER)
    assert result.exit_code == 2 and "not a cenotaph keyring export" in result.stderr


def test_move_run_again_after_it_finished_is_harmless(data: Path, tmp_path: Path) -> None:
    dest = tmp_path / "vault"
    assert keyring_cli("keyring", "move", str(dest), "--data", str(data)).exit_code == 0
    again = keyring_cli("keyring", "move", str(dest), "--data", str(data))
    assert again.exit_code == 0, again.output
    assert readable(data, CENOTAPH_KEYRING=str(dest))


def test_move_never_mistakes_another_keyring_for_its_own_copy(data: Path, tmp_path: Path) -> None:
    """A keyring whose keyring.json was lost is not "already moved" to an unrelated keyring: its
    ledger (the record of every forget) stays."""
    other = tmp_path / "other"
    with cenotaph.open(tmp_path / "other-data", key_provider=LocalKeyring(other)) as store:
        store.write(USER, "k", 1)
    (data / "keyring" / "keyring.json").unlink()
    ledger = (data / "keyring" / "ledger.jsonl").read_bytes()
    result = keyring_cli("keyring", "move", str(other), "--data", str(data))
    assert result.exit_code == 1 and "another keyring" in result.stderr, result.output
    assert (data / "keyring" / "ledger.jsonl").read_bytes() == ledger
