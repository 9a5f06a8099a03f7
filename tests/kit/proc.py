"""One kit for the child processes of crash and race tests: start a scenario, watch, kill, reap.

A *scenario* is a named function of :data:`tests.kit.scenarios.SCENARIOS` that runs in a child
Python process (``python -m tests.kit.child NAME``) with keyword arguments sent as JSON. It may
print lines as it goes (:func:`tests.kit.scenarios.say`: one ``os.write`` per line, so a SIGKILL
never tears one) and return a JSON-able value, printed as its last line. Every child starts in
its own process group and is always reaped: when the ``with`` block ends, however it ends, the
whole group (a scan worker the child started too) gets SIGKILL, and no zombie is left::

    with spawn("crash-writer", directory=str(tmp_path), prefix="tenant:c0", seed=0, auto_purge="off") as child:
        child.wait_for("ready")                   # a ready/mark line
        child.read_lines(50)                      # let it work a moment...
        child.kill()                              # ...then SIGKILL it and everything it started
    assert child.returncode == -signal.SIGKILL
    child.lines                                   # every line it printed, in order

    # SIGKILL at a fault point (cenotaph.faults, env CENOTAPH_FAULT): the child kills itself there
    done = run("erasure-forget", data=str(data), mode="auto", fault="forget.ledgered")
    assert done.killed and done.lines[0] == "opened"

    result = run_json("oracle-sql", db=str(db), query="SELECT 1", params=[], immutable=True)

:func:`run` waits for the child to end (or kills it at ``timeout``); :func:`run_json` also checks
that it exited 0 and returns its last line decoded. Waiting for a line has no timeout of its own:
pytest-timeout ends a hung test, and its exception, like any failure, unwinds through ``spawn``'s
cleanup, so no child outlives its test. Children run with this checkout's ``tests`` importable
and the test's environment (``env`` replaces it; ``fault`` sets or clears ``CENOTAPH_FAULT``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cenotaph.faults import FAULT_ENV

ROOT = Path(__file__).resolve().parents[2]  # the directory that holds tests/ (the child's import root)
STDERR_TAIL = 2000  # characters of a child's stderr kept in failure messages


def child_env(fault: str | None = None, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment (or ``env``), importing ``tests`` from this checkout, with
    ``CENOTAPH_FAULT`` set to ``fault`` (or removed)."""
    out = dict(os.environ if env is None else env)
    out["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [out.get("PYTHONPATH")])])
    out.pop(FAULT_ENV, None)
    if fault is not None:
        out[FAULT_ENV] = fault
    return out


class Child:
    """A running scenario in its own process group; read it line by line, kill it, reap it."""

    def __init__(
        self,
        scenario: str,
        args: Mapping[str, Any],
        *,
        fault: str | None = None,
        env: Mapping[str, str] | None = None,
        keep_stdin: bool = False,
    ) -> None:
        self.scenario = scenario
        self.lines: list[str] = []
        self.returncode: int | None = None
        # a file, not a pipe: a chatty child never blocks; closed by close()
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.kit.child", scenario],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=child_env(fault, env),
            cwd=ROOT,
            start_new_session=True,
        )
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(dict(args)) + "\n")  # the first line of stdin: its arguments
        self.proc.stdin.flush()
        if not keep_stdin:
            self.proc.stdin.close()

    # -- watching ------------------------------------------------------------------------------
    def readline(self) -> str:
        """The next line the child printed ('' once its stdout is closed)."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().rstrip("\n")
        if line:
            self.lines.append(line)
        return line

    def read_lines(self, count: int) -> int:
        """Read up to ``count`` more lines; how many there were before stdout closed."""
        for n in range(count):
            if self.readline() == "":
                return n
        return count

    def wait_for(self, prefix: str) -> str:
        """The first further line that starts with ``prefix``; fails if the child ends first."""
        while True:
            line = self.readline()
            if line.startswith(prefix):
                return line
            if line == "":
                self.finish()
                raise AssertionError(
                    f"{self.scenario} ended ({self.returncode}) before printing {prefix!r}: {self.stderr}"
                )

    def send(self, text: str) -> None:
        """Write to the child's stdin (``keep_stdin=True``)."""
        assert self.proc.stdin is not None and not self.proc.stdin.closed
        self.proc.stdin.write(text)
        self.proc.stdin.flush()

    def close_stdin(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()

    @property
    def alive(self) -> bool:
        return self.returncode is None and not self._exited()

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL

    @property
    def stderr(self) -> str:
        """The tail of what the child wrote to stderr so far."""
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-STDERR_TAIL:]

    def result(self) -> Any:
        """The child's last line, decoded as JSON (a scenario's return value)."""
        assert self.lines, f"{self.scenario} printed nothing: {self.stderr}"
        return json.loads(self.lines[-1])

    # -- ending --------------------------------------------------------------------------------
    def kill(self) -> int:
        """SIGKILL the child and everything it started, collect what it printed, reap it."""
        self._killpg()
        return self.finish()

    def finish(self, timeout: float = 120) -> int:
        """Read the rest of its output, wait for it to end (SIGKILL past ``timeout``), kill what
        is left of its process group, reap it. Its exit status (``-9`` when killed)."""
        if self.returncode is not None:
            return self.returncode
        self.close_stdin()
        assert self.proc.stdout is not None
        timer = threading.Timer(timeout, self._killpg)
        timer.daemon = True
        timer.start()
        try:
            with self.proc.stdout:
                # not communicate(): it reads the raw pipe and would drop lines readline() buffered
                self.lines.extend(line for line in self.proc.stdout.read().splitlines() if line)
            self._wait_unreaped()
        finally:
            timer.cancel()
            timer.join()
        self._killpg()  # a grandchild (a scan worker) left in its group; the pid is not reusable yet
        self.returncode = self.proc.wait()
        return self.returncode

    def _wait_unreaped(self) -> None:
        """Wait until the child exited, without reaping it (its pid, the group's id, stays taken)."""
        while not self._exited():
            time.sleep(0.002)

    def _exited(self) -> bool:
        """Whether the child has exited; never reaps it (``Popen.poll`` would)."""
        if self.proc.returncode is not None:
            return True
        try:
            info = os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)
        except ChildProcessError:  # reaped already
            return True
        return info is not None and info.si_pid == self.proc.pid

    def _killpg(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def close(self) -> None:
        """End it whatever state it is in (idempotent): SIGKILL if still running, then reap."""
        if self.returncode is None:
            if not self._exited():
                self._killpg()
            with contextlib.suppress(OSError, ValueError):
                self.finish(timeout=30)
            if self.returncode is None:  # pragma: no cover - finish could not reap it
                self.proc.kill()
                self.returncode = self.proc.wait()
        self._stderr.close()


@contextlib.contextmanager
def spawn(
    scenario: str,
    *,
    fault: str | None = None,
    env: Mapping[str, str] | None = None,
    keep_stdin: bool = False,
    **args: Any,
) -> Iterator[Child]:
    """Start ``scenario(**args)`` in a child; it is killed and reaped when the block ends."""
    child = Child(scenario, args, fault=fault, env=env, keep_stdin=keep_stdin)
    try:
        yield child
    finally:
        child.close()


@dataclass(frozen=True)
class Finished:
    """What a child that ran to its end (or was killed) left behind."""

    scenario: str
    returncode: int
    lines: list[str]
    stderr: str

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL

    def result(self) -> Any:
        assert self.lines, f"{self.scenario} printed nothing: {self.stderr}"
        return json.loads(self.lines[-1])


def run(
    scenario: str,
    *,
    fault: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
    **args: Any,
) -> Finished:
    """Run ``scenario(**args)`` in a child until it ends (SIGKILL after ``timeout`` seconds)."""
    with spawn(scenario, fault=fault, env=env, **args) as child:
        child.finish(timeout)
        return Finished(scenario, child.proc.returncode, child.lines, child.stderr)


def run_json(scenario: str, *, timeout: float = 120, **args: Any) -> Any:
    """Run ``scenario(**args)`` in a child that must exit 0; its return value (last line)."""
    done = run(scenario, timeout=timeout, **args)
    assert done.returncode == 0, f"child {scenario} failed ({done.returncode}):\n{done.stderr}"
    return done.result()
