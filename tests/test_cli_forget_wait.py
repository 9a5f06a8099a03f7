"""`cenotaph forget` and `forget-subject` wait until the erasure is verified, unless `--no-wait`
(then they return at `shredded`, and `cenotaph purge` or the next process that keeps the store
open finishes the job); a wait that cannot succeed prints the request with its gaps and exits
non-zero."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from cenotaph.cli.main import cli

USER = "tenant:acme/user:alice"
SESSION = f"{USER}/session:s1"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CENOTAPH_DATA", "CENOTAPH_KEYRING", "CENOTAPH_MASTER_KEY", "CENOTAPH_DEBUG"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    directory = tmp_path / "data"
    assert run("init", "--data", str(directory)).exit_code == 0
    assert (
        run("write", SESSION, "note", "a note long enough to be probed", "--data", str(directory)).exit_code
        == 0
    )
    return directory


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def state(result: Result) -> Any:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)["status"]["state"]


def test_forget_waits_until_verified(data: Path) -> None:
    assert state(run("forget", SESSION, "note", "--data", str(data))) == "verified"


def test_forget_subject_waits_until_verified(data: Path) -> None:
    assert state(run("forget-subject", USER, "--data", str(data))) == "verified"


@pytest.mark.parametrize("command", [["forget", SESSION, "note"], ["forget-subject", USER]])
def test_no_wait_returns_at_shredded_and_purge_finishes(data: Path, command: list[str]) -> None:
    doc = run(*command, "--no-wait", "--data", str(data))
    assert state(doc) == "shredded"
    request_id = json.loads(doc.stdout)["id"]
    status = json.loads(run("status", request_id, "--data", str(data)).stdout)["status"]
    assert status["state"] == "shredded", "no command but purge moves it on"
    assert json.loads(run("purge", "--data", str(data)).stdout)["requests"][request_id] == "verified"
    assert run("read", SESSION, "note", "--data", str(data)).exit_code == 1


def test_an_operational_forget_does_not_wait(data: Path) -> None:
    assert state(run("forget", SESSION, "note", "--mode", "operational", "--data", str(data))) == "tombstoned"


def test_a_wait_that_cannot_succeed_prints_the_request_then_fails(data: Path) -> None:
    (data / "pasted.txt").write_text("a note long enough to be probed\n")
    result = run("forget", SESSION, "note", "--data", str(data))
    assert result.exit_code != 0
    doc = json.loads(result.stdout)
    assert doc["status"]["state"] == "purged" and doc["status"]["stuck"] is True
    assert "pasted.txt" in result.stderr and "pasted.txt" in json.dumps(doc["status"]["gaps"])
