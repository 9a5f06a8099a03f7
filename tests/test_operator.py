"""What a new operator trips on: where options go, how values get in, what tables and
interruptions say, and which input is refused.

The CLI runs in-process with ``CliRunner`` (the helpers of ``test_cli``), or as a real process
where a shell's view matters (stdin, signals, exit codes).
"""

from __future__ import annotations

import json
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from tests.test_cli import ENV_VARS, USER, assert_one_line_error, ok_json, run, subprocess_env

import cenotaph
from cenotaph.cli.main import cli
from cenotaph.validation import MAX_VALUE_BYTES


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    directory = tmp_path / "data"
    assert run("init", "--data", str(directory)).exit_code == 0
    return directory


# -- --data and --table before or after the command -----------------------------------------
def test_data_and_table_go_before_the_command_too(data: Path) -> None:
    d = str(data)
    ok_json("--data", d, "write", USER, "k", "v")
    assert ok_json("--data", d, "read", USER, "k")["value"] == "v"
    assert ok_json("read", USER, "k", "--data", d)["value"] == "v"
    assert ok_json("--data", d, "read", USER, "k", "--data", d)["value"] == "v"  # the same, twice
    for args in (("--table", "--data", d, "read", USER, "k"), ("--data", d, "read", USER, "k", "--table")):
        result = run(*args)
        assert result.exit_code == 0 and "┃" in result.stdout, result.output
    assert ok_json("--data", d, "audit", "verify")["ok"] is True  # a group's subcommand too
    assert "┃" in run("--table", "--data", d, "audit", "verify").stdout


def test_data_before_the_command_wins_over_the_environment(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CENOTAPH_DATA", str(tmp_path / "elsewhere"))
    ok_json("--data", str(data), "write", USER, "k", "v")
    assert not (tmp_path / "elsewhere").exists()
    monkeypatch.setenv("CENOTAPH_DATA", str(data))
    assert ok_json("read", USER, "k")["value"] == "v"  # the environment still works alone


def test_data_given_twice_must_agree(data: Path, tmp_path: Path) -> None:
    line = assert_one_line_error(run("--data", str(data), "read", USER, "k", "--data", str(tmp_path)), 2)
    assert "before and after" in line


@pytest.mark.parametrize(
    ("args", "option"),
    [(("--data", "somewhere", "demo"), "--data"), (("--table", "demo"), "--table")],
)
def test_a_global_option_a_command_lacks_is_refused(args: tuple[str, ...], option: str) -> None:
    line = assert_one_line_error(run(*args), 2)
    assert f"`cenotaph demo` has no {option} option" in line


def test_the_readme_synopsis_works_in_a_real_shell(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    for args in (["--data", data, "init"], ["--data", data, "write", USER, "k", "v"]):
        done = subprocess.run(
            [sys.executable, "-m", "cenotaph.cli.main", *args],
            capture_output=True,
            text=True,
            env=subprocess_env(),
            timeout=120,
        )
        assert done.returncode == 0, done.stderr


# -- tables ----------------------------------------------------------------------------------
def _table(*args: str, columns: int) -> str:
    result = CliRunner(env={"COLUMNS": str(columns)}).invoke(cli, [*args, "--table"])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_a_table_never_breaks_an_id_or_a_key_on_a_narrow_terminal(data: Path) -> None:
    d = ("--data", str(data))
    key = "a-rather-long-key-name-that-someone-will-copy-" + "x" * 20
    record = ok_json("write", f"{USER}/session:s1", key, "word " * 60, *d)
    ok_json("write", USER, "gone", "v", *d)
    request = ok_json("forget", USER, "gone", "--mode", "operational", *d)
    public_key = ok_json("status", *d)["public_key"]
    for args, wanted in (
        (("read", f"{USER}/session:s1", key), (record["id"], key, f"{USER}/session:s1")),
        (("list", f"{USER}/session:s1"), ()),
        (("status",), (public_key, request["id"])),
        (("status", request["id"]), (request["id"],)),
        (("reauthorize", USER, key), ()),
    ):
        out = _table(*args, *d, columns=40)
        for text in wanted:
            assert text in out, f"{text!r} was broken across lines in `cenotaph {' '.join(args)}`:\n{out}"
    token = json.loads(run("reauthorize", USER, *d).stdout)["token"]
    assert token.startswith("crt_") and len(token) > 40


def test_free_text_still_wraps_in_a_table(data: Path) -> None:
    d = ("--data", str(data))
    ok_json("write", USER, "k", "word " * 60, *d)
    out = _table("read", USER, "k", *d, columns=80)
    lines = out.splitlines()
    assert len(lines) > 6 and max(len(line) for line in lines) < 160  # the value wrapped at spaces
    assert all(line.count("word") <= 10 for line in lines)


def test_purge_table_on_a_clean_store_does_not_alarm(data: Path) -> None:
    out = _table("purge", "--data", str(data), columns=100)
    assert "positive_control" not in out and "false" not in out
    assert "not run" in out
    doc = ok_json("purge", "--data", str(data))  # JSON keeps the report as the store made it
    assert doc["scan"]["probes"] == 0


def test_purge_table_shows_a_real_scan_and_its_positive_control(data: Path) -> None:
    with cenotaph.open(data, auto_purge="off") as store:
        store.write(USER, "k", "secret")
        store.forget(USER, "k")
    out = _table("purge", "--data", str(data), columns=120)
    assert "found the planted probe" in out and "not run" not in out and "verified" in out


# -- write: values from stdin, from a file, and values that look like options ----------------
def test_write_takes_the_value_from_stdin(data: Path) -> None:
    d = ("--data", str(data))
    result = CliRunner().invoke(cli, ["write", USER, "k", "-", *d], input="line one\nline two\n")
    assert result.exit_code == 0, result.output
    assert ok_json("read", USER, "k", *d)["value"] == "line one\nline two\n"  # byte for byte
    result = CliRunner().invoke(cli, ["write", USER, "j", "-", "--json", *d], input='{"a": [1, 2]}\n')
    assert result.exit_code == 0, result.output
    assert ok_json("read", USER, "j", *d)["value"] == {"a": [1, 2]}


def test_write_takes_the_value_from_a_file_up_to_the_limit(data: Path, tmp_path: Path) -> None:
    d = ("--data", str(data))
    big = tmp_path / "big.txt"
    text = "é" * ((MAX_VALUE_BYTES - 2) // 2)  # 2 bytes each in UTF-8; the JSON quotes make the rest
    big.write_text(text, encoding="utf-8")
    ok_json("write", USER, "big", "--file", str(big), *d)
    assert ok_json("read", USER, "big", *d)["value"] == text
    big.write_text(text + "é", encoding="utf-8")
    line = assert_one_line_error(run("write", USER, "big2", "--file", str(big), *d), 2)
    assert "1 MiB" in line or str(MAX_VALUE_BYTES) in line
    assert run("read", USER, "big2", *d).exit_code == 1


def test_a_value_over_the_argv_limit_goes_through_a_real_pipe(data: Path) -> None:
    value = "x" * (600 << 10)  # far past what one argv string may hold (128 KiB on Linux)
    done = subprocess.run(
        [sys.executable, "-m", "cenotaph.cli.main", "write", USER, "big", "-", "--data", str(data)],
        input=value,
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert ok_json("read", USER, "big", "--data", str(data))["value"] == value


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (("--file", "/no/such/file"), "does not exist"),
        (("v", "--file", "{file}"), "either VALUE or --file"),
        ((), "VALUE"),
        (("--file", "{binary}"), "UTF-8"),
    ],
)
def test_write_value_sources_refuse_bad_input(
    data: Path, tmp_path: Path, args: tuple[str, ...], reason: str
) -> None:
    (tmp_path / "f.txt").write_text("v")
    (tmp_path / "b.bin").write_bytes(b"\xff\xfe\x00bin")
    filled = [a.format(file=tmp_path / "f.txt", binary=tmp_path / "b.bin") for a in args]
    line = assert_one_line_error(run("write", USER, "k", *filled, "--data", str(data)), 2)
    assert reason in line
    assert run("read", USER, "k", "--data", str(data)).exit_code == 1


def test_a_value_starting_with_a_dash_is_a_value(data: Path) -> None:
    d = ("--data", str(data))
    for key, value in (("n", "-5"), ("s", "-x marks the spot"), ("f", "-3.25")):
        assert ok_json("write", USER, key, value, *d)["value"] == value
    assert ok_json("write", USER, "j", "-5", "--json", *d)["value"] == -5
    assert (
        ok_json("write", *d, USER, "dd", "--", "--looks-like-an-option")["value"] == "--looks-like-an-option"
    )
    assert ok_json("write", USER, "m", "-m", "--metadata", '{"n": -1}', *d)["value"] == "-m"
    # a mistyped long option is still an error, not a value
    line = assert_one_line_error(run("write", USER, "t", "--jsn", *d), 2)
    assert "--jsn" in line
    assert run("read", USER, "t", *d).exit_code == 1


# -- Ctrl-C ------------------------------------------------------------------------------------
def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt(args: list[str], pause: tuple[str, Path] | None = None) -> tuple[int, str]:
    """Run the CLI as a real process and send it SIGINT (Ctrl-C): at the named fault point when
    ``pause`` is given (the process waits there until the marker file goes), else while it reads
    stdin. Returns (exit code, stderr)."""
    env = {} if pause is None else {"CENOTAPH_PAUSE": f"{pause[0]}:{pause[1]}"}
    process = subprocess.Popen(
        [sys.executable, "-m", "cenotaph.cli.main", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env(**env),
        # a shell starts background jobs with SIGINT ignored, and a child inherits that: the CLI
        # must meet Ctrl-C as a terminal delivers it, whoever ran the tests
        preexec_fn=_default_sigint,
    )
    try:
        if pause is None:
            _wait_reading_stdin(process)
        else:
            deadline = time.monotonic() + 60
            while not pause[1].exists():
                assert process.poll() is None, process.communicate()
                assert time.monotonic() < deadline, "the process never reached the fault point"
                time.sleep(0.02)
        process.send_signal(signal.SIGINT)
        if pause is not None:
            _wait_signal_taken(process)  # the CLI holds it until the step it is in has committed
            pause[1].unlink()  # let it go on from the fault point
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    return process.returncode, stderr


def _wait_signal_taken(process: subprocess.Popen[str]) -> None:
    """Until no signal is pending for the process (Linux: ``ShdPnd`` in /proc/PID/status): a
    thread of it has taken the SIGINT, so its handler has run before the paused main thread looks
    at the marker again."""
    status = Path(f"/proc/{process.pid}/status")
    if not status.exists():
        time.sleep(0.3)  # no way to look: give the signal time to arrive instead
        return
    deadline = time.monotonic() + 60
    while True:
        fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        if int(fields["ShdPnd"], 16) == 0 and int(fields["SigPnd"], 16) == 0:
            return
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the process never took the signal"
        time.sleep(0.01)  # a poll interval; the condition decides


def _wait_reading_stdin(process: subprocess.Popen[str]) -> None:
    """Until the process sits in read(0, ...) (Linux: /proc/PID/syscall), so the signal lands
    there and not while the interpreter is still starting."""
    syscall = Path(f"/proc/{process.pid}/syscall")
    read = {"x86_64": "0", "aarch64": "63"}.get(platform.machine())  # the read syscall's number
    if read is None or not syscall.exists():
        time.sleep(2)  # no way to look: give the interpreter time to get there instead
        return
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        if syscall.read_text().split()[:2] == [read, "0x0"]:  # read(0, ...)
            return
        time.sleep(0.02)
    raise AssertionError("the process never blocked reading stdin")


def test_ctrl_c_before_anything_changed_says_so(data: Path) -> None:
    code, stderr = _interrupt(["write", USER, "k", "-", "--data", str(data)])
    assert code == 130, stderr
    assert stderr.splitlines() == ["interrupted: nothing was written"]
    assert run("read", USER, "k", "--data", str(data)).exit_code == 1


def test_ctrl_c_during_a_forget_waits_for_its_commit_and_says_what_to_run(data: Path, tmp_path: Path) -> None:
    ok_json("write", USER, "k", "v", "--data", str(data))
    code, stderr = _interrupt(
        ["forget", USER, "k", "--data", str(data)], ("forget.committed", tmp_path / "p")
    )
    assert code == 130, stderr
    [line] = stderr.splitlines()
    assert line.startswith("interrupted after the forget committed") and "`cenotaph purge`" in line
    assert run("read", USER, "k", "--data", str(data)).exit_code == 1  # the forget stands
    [request] = ok_json("status", "--data", str(data))["requests"]
    assert request["id"] in line and request["state"] == "shredded"  # and the purge never ran
    assert ok_json("purge", "--data", str(data))["requests"] == {request["id"]: "verified"}


def test_ctrl_c_during_a_purge_says_it_resumes(data: Path, tmp_path: Path) -> None:
    with cenotaph.open(data, auto_purge="off") as store:
        store.write(USER, "k", "v")
        request = store.forget(USER, "k")
    code, stderr = _interrupt(["purge", "--data", str(data)], ("purge.rows", tmp_path / "p"))
    assert code == 130, stderr
    assert stderr.splitlines() == [
        "interrupted: the purge stopped part-way; what it finished stays done, and `cenotaph purge` "
        "resumes the rest"
    ]
    assert ok_json("purge", "--data", str(data))["requests"] == {request.id: "verified"}
