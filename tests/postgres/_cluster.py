"""A throwaway PostgreSQL primary and streaming replica for tests.

``Cluster.create()`` runs ``initdb`` into a fresh temporary directory, starts the primary on a
free loopback port (``listen_addresses=127.0.0.1``, its unix socket inside that directory,
``wal_level=replica``), clones a replica from it with ``pg_basebackup -R -X stream`` and starts
that on another port. ``destroy()`` stops both (immediate shutdown) and removes the directory;
use the cluster as a context manager (or from a fixture's ``finally``) so that happens even
when a test fails.

As root, every server binary runs as the ``postgres`` OS user (``initdb`` refuses root), with
the directory chowned to it. The binaries come from ``pg_config --bindir`` or
/usr/lib/postgresql/<version>/bin.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import psycopg

__all__ = ["Cluster", "ClusterUnavailable", "Server", "find_bindir", "lsn_value"]

RUN_AS = "postgres"  # the OS user the servers run as when the tests run as root
START_TIMEOUT_S = 60


class ClusterUnavailable(RuntimeError):
    """This machine cannot run a throwaway cluster (no binaries, no postgres user)."""


def find_bindir() -> Path | None:
    """The directory of initdb, pg_ctl and pg_basebackup, if PostgreSQL is installed."""
    candidates: list[Path] = []
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True)
        candidates.append(Path(out.stdout.strip()))
    candidates.extend(sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True))
    return next((d for d in candidates if (d / "initdb").is_file() and (d / "pg_ctl").is_file()), None)


def lsn_value(lsn: str) -> int:
    """A WAL position ``X/Y`` as a number, for comparing two of them."""
    high, low = lsn.split("/")
    return (int(high, 16) << 32) + int(low, 16)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    """One running server of the cluster."""

    name: str
    datadir: Path
    port: int

    @property
    def dsn(self) -> str:
        return f"postgresql://{RUN_AS}@127.0.0.1:{self.port}/postgres"

    @property
    def log(self) -> Path:
        return self.datadir.parent / f"{self.name}.log"

    def pid(self) -> int | None:
        """The postmaster's process id while it runs."""
        try:
            return int((self.datadir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def query(self, sql: str) -> list[tuple[object, ...]]:
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
            cursor = conn.execute(sql)
            return cursor.fetchall() if cursor.description else []


class Cluster:
    """A primary and one streaming replica, each on its own loopback port."""

    def __init__(self, root: Path, bindir: Path) -> None:
        self.root = root
        self.bindir = bindir
        self.primary = Server("primary", root / "primary", _free_port())
        self.replica = Server("replica", root / "replica", _free_port())
        self._started: list[Server] = []

    # -- lifecycle ---------------------------------------------------------------------
    @classmethod
    def create(cls) -> Cluster:
        """A running primary and replica (raises ClusterUnavailable if this machine has none)."""
        bindir = find_bindir()
        if bindir is None:
            raise ClusterUnavailable(
                "no PostgreSQL server binaries (pg_config --bindir, /usr/lib/postgresql)"
            )
        owner = None
        if os.geteuid() == 0:
            try:
                owner = pwd.getpwnam(RUN_AS)
            except KeyError:
                raise ClusterUnavailable(f"running as root and there is no {RUN_AS!r} user") from None
        root = Path(tempfile.mkdtemp(prefix="cenotaph-pg-"))
        if owner is not None:
            os.chown(root, owner.pw_uid, owner.pw_gid)
        cluster = cls(root, bindir)
        try:
            cluster._start()
        except BaseException:
            cluster.destroy()
            raise
        return cluster

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.bindir / tool), *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", RUN_AS, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=START_TIMEOUT_S, check=False)
        if done.returncode != 0:
            raise RuntimeError(
                f"{tool} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}"
            )

    def _configure(self, server: Server, *lines: str) -> None:
        settings = [
            f"port = {server.port}",
            "listen_addresses = '127.0.0.1'",
            f"unix_socket_directories = '{server.datadir}'",
            *lines,
        ]
        with (server.datadir / "postgresql.conf").open("a") as conf:
            conf.write("\n# cenotaph test cluster\n" + "\n".join(settings) + "\n")

    def _start_server(self, server: Server) -> None:
        self._run("pg_ctl", "-D", str(server.datadir), "-l", str(server.log), "-w", "-t", "60", "start")
        self._started.append(server)

    def _start(self) -> None:
        primary, replica = self.primary, self.replica
        self._run("initdb", "-D", str(primary.datadir), "-A", "trust", "-U", RUN_AS, "--no-sync")
        self._configure(
            primary,
            "wal_level = replica",
            "max_wal_senders = 4",
            "fsync = off",
            "shared_buffers = 16MB",
            "max_connections = 30",
        )
        with (primary.datadir / "pg_hba.conf").open("a") as hba:
            hba.write("host replication all 127.0.0.1/32 trust\n")
        self._start_server(primary)
        self._run(
            "pg_basebackup",
            *("-h", "127.0.0.1", "-p", str(primary.port), "-U", RUN_AS),
            *("-D", str(replica.datadir), "-R", "-X", "stream", "-c", "fast", "--no-sync"),
        )
        self._configure(replica, "hot_standby = on")
        self._start_server(replica)

    def destroy(self) -> None:
        """Stop both servers (immediately) and remove every file of the cluster."""
        for server in reversed(self._started):
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self._run("pg_ctl", "-D", str(server.datadir), "-m", "immediate", "-w", "stop")
        self._started.clear()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.destroy()

    # -- replication ---------------------------------------------------------------------
    def current_lsn(self) -> str:
        """The primary's current WAL position (take it after the commit to wait for)."""
        return str(self.primary.query("SELECT pg_current_wal_lsn()")[0][0])

    def replay_lsn(self) -> str:
        """How far the replica has replayed."""
        return str(self.replica.query("SELECT pg_last_wal_replay_lsn()")[0][0])

    def replayed(self, lsn: str) -> bool:
        return lsn_value(self.replay_lsn()) >= lsn_value(lsn)

    def wait_replayed(self, lsn: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.replayed(lsn):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the replica did not replay past {lsn} in {timeout} s")
            time.sleep(0.02)

    def wait_received(self, lsn: str, timeout: float = 30.0) -> None:
        """Wait until the replica has received (not necessarily replayed) the WAL up to ``lsn``."""
        deadline = time.monotonic() + timeout
        while lsn_value(str(self.replica.query("SELECT pg_last_wal_receive_lsn()")[0][0])) < lsn_value(lsn):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the replica did not receive WAL up to {lsn} in {timeout} s")
            time.sleep(0.02)  # a poll interval; the condition decides

    def pause_replay(self, timeout: float = 30.0) -> None:
        """Stop the replica applying WAL (it keeps receiving it); returns once it has paused."""
        self.replica.query("SELECT pg_wal_replay_pause()")
        deadline = time.monotonic() + timeout
        while self.replica.query("SELECT pg_get_wal_replay_pause_state()")[0][0] != "paused":
            if time.monotonic() > deadline:
                raise TimeoutError("the replica did not pause replay")
            time.sleep(0.02)

    def resume_replay(self) -> None:
        self.replica.query("SELECT pg_wal_replay_resume()")
