"""Child processes of the PostgreSQL process tests: start a scenario, read its lines, kill, reap.

A scenario is a function of :mod:`tests.postgres._scenarios` run in a child Python process
(``python -m tests.postgres._scenarios NAME``) with keyword arguments sent as JSON on the first
line of its stdin; it prints lines as it goes and its JSON return value as its last line. This
is the protocol of the shared child-process kit (``tests/kit/proc.py``), so the scenarios move
there by registering their names. Every child runs in its own process group and, however the
``with`` block ends, the group is SIGKILLed and the child reaped::

    with spawn("pg-race-writer", dsn=dsn, ...) as child:
        child.wait_for("ready")
    ...
    child.result()          # its last line, decoded
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cenotaph.faults import FAULT_ENV

ROOT = Path(__file__).resolve().parents[2]  # the directory holding tests/ and src/
STDERR_TAIL = 3000


class Child:
    """One running scenario: its printed lines, its exit status once reaped."""

    def __init__(self, scenario: str, args: dict[str, Any], fault: str | None) -> None:
        self.scenario = scenario
        self.lines: list[str] = []
        self.returncode: int | None = None
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "src"), env.get("PYTHONPATH", "")])
        env.pop(FAULT_ENV, None)
        if fault is not None:
            env[FAULT_ENV] = fault
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.postgres._scenarios", scenario],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=env,
            cwd=ROOT,
            start_new_session=True,
        )
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(args) + "\n")
        self.proc.stdin.close()

    def readline(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().rstrip("\n")
        if line:
            self.lines.append(line)
        return line

    def wait_for(self, prefix: str) -> str:
        """The next line starting with ``prefix``; fails if the child ends first."""
        while True:
            line = self.readline()
            if line.startswith(prefix):
                return line
            if line == "":
                self.finish()
                raise AssertionError(
                    f"{self.scenario} ended ({self.returncode}) before {prefix!r}: {self.stderr}"
                )

    @property
    def stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-STDERR_TAIL:]

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL

    def finish(self, timeout: float = 180) -> int:
        """Read the rest of its output and wait for it to end (SIGKILL past ``timeout``)."""
        if self.returncode is None:
            assert self.proc.stdout is not None
            timer = threading.Timer(timeout, self._killpg)
            timer.daemon = True
            timer.start()
            try:  # not communicate(): it reads the raw pipe, dropping lines readline() buffered
                with self.proc.stdout:
                    self.lines.extend(line for line in self.proc.stdout.read().splitlines() if line)
                # exited but not reaped: its pid (the group's id) cannot be reused yet
                os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOWAIT)
            finally:
                timer.cancel()
            self._killpg()  # anything it started (a scan worker) goes with it
            self.returncode = self.proc.wait()
        return self.returncode

    def result(self) -> Any:
        """Its last line decoded; the child must have exited 0."""
        assert self.finish() == 0, f"{self.scenario} failed ({self.returncode}):\n{self.stderr}"
        assert self.lines, f"{self.scenario} printed nothing: {self.stderr}"
        return json.loads(self.lines[-1])

    def _killpg(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def close(self) -> None:
        if self.returncode is None:
            self._killpg()
            with contextlib.suppress(OSError, ValueError):
                self.finish(timeout=30)
        self._stderr.close()


@contextlib.contextmanager
def spawn(scenario: str, *, fault: str | None = None, **args: Any) -> Iterator[Child]:
    """Start ``scenario(**args)`` in a child (SIGKILLing itself at ``fault``, a
    ``cenotaph.faults`` point); killed and reaped when the block ends."""
    child = Child(scenario, args, fault)
    try:
        yield child
    finally:
        child.close()
