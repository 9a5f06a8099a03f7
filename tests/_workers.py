"""Worker code for the race and crash tests (tests/test_races.py, tests/test_crash.py).

Two uses:

- imported (by file path) by test_races.py, whose thread races call :func:`write_key` and
  :func:`forget_key` directly;
- run as a script in a child process: ``python tests/_workers.py ROLE ARGS...``. Race roles print
  one JSON document on stdout; crash roles print one line per completed call (flushed with a
  single ``os.write``, so a SIGKILL never tears a line) and are killed by the parent.

Nothing here is a test by itself; every assertion lives in the test modules.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import cenotaph
from cenotaph.errors import ForgottenError, StaleWriteError

ATTEMPTS = 6  # write attempts per writer per trial


def now_ns() -> int:
    """CLOCK_MONOTONIC: system-wide on Linux, so comparable across processes."""
    return time.monotonic_ns()


def trial_scope(prefix: str, index: int) -> str:
    """Each trial has its own session scope, so a scope forget covers exactly one trial."""
    return f"{prefix}/session:t{index}"


TRIAL_KEY = "fact"


# -- one trial: writers and a forgetter on one (scope, key) -------------------------------------
def write_key(
    store: cenotaph.Store,
    scope: str,
    key: str,
    writer: str,
    attempts: int,
    rng: random.Random,
    on_attempt: Callable[[], None] | None = None,
) -> list[dict[str, Any]]:
    """``attempts`` writes of ``key``, about half of them compare-and-set on the version last
    seen, about a quarter into a child scope of ``scope`` (created by the write, racing the
    forget's enumeration of the subtree).

    Returns one outcome per attempt: ``trial`` (the raced ``scope|key``), ``slot`` (what this
    attempt wrote). Outcomes never raise: an unexpected exception is reported (``error`` = its
    class name) for the test to fail on.
    """
    out: list[dict[str, Any]] = []
    last_seen: dict[str, int] = {}
    for n in range(attempts):
        cas = rng.random() < 0.5
        target = scope if rng.random() < 0.75 else f"{scope}/turn:{writer}"
        outcome: dict[str, Any] = {
            "trial": f"{scope}|{key}",
            "slot": f"{target}|{key}",
            "w": writer,
            "n": n,
            "cas": cas,
        }
        outcome["start"] = now_ns()
        try:
            base = None
            if cas:
                outcome["read_start"] = now_ns()
                current = store.read(target, key, fallthrough=False)
                outcome["read_found"] = current is not None
                if current is not None:
                    last_seen[target] = current.version
                base = last_seen.get(target)  # None (plain write) until something was seen
            outcome["base"] = base
            record = store.write(target, key, {"w": writer, "n": n}, base_version=base)
        except ForgottenError as exc:
            outcome.update(ok=False, error="ForgottenError", error_version=exc.version)
        except StaleWriteError:
            outcome.update(ok=False, error="StaleWriteError")
        except Exception as exc:
            outcome.update(ok=False, error=type(exc).__name__, detail=str(exc)[:300])
        else:
            last_seen[target] = record.version
            outcome.update(ok=True, version=record.version, value=record.value)
        outcome["end"] = now_ns()
        out.append(outcome)
        if on_attempt is not None:
            on_attempt()
    return out


def forget_key(store: cenotaph.Store, scope: str, key: str, target: str, mode: str) -> dict[str, Any]:
    """Forget the trial's key (``target == "key"``) or its whole session scope (``"scope"``)."""
    outcome: dict[str, Any] = {"trial": f"{scope}|{key}", "target": target, "mode": mode}
    outcome["start"] = now_ns()
    try:
        request = store.forget(scope, key if target == "key" else None, mode=mode)
    except Exception as exc:
        outcome.update(ok=False, error=type(exc).__name__, detail=str(exc)[:300])
    else:
        outcome.update(ok=True, version=request.version, request_id=request.id)
    outcome["end"] = now_ns()
    return outcome


# -- process races ----------------------------------------------------------------------------
def _barrier(directory: Path, name: str) -> None:
    """Say we are ready, then wait for the parent's go file."""
    (directory / f"ready-{name}").touch()
    go = directory / "go"
    deadline = time.monotonic() + 60
    while not go.exists():
        if time.monotonic() > deadline:
            raise SystemExit("no go file within 60 s")
        time.sleep(0.0005)


def race_writer(
    directory: Path, name: str, prefix: str, trials: int, threads: int, seed: int, auto_purge: bool
) -> None:
    store = cenotaph.open(directory, auto_purge=auto_purge)
    _barrier(directory, name)
    started = now_ns()

    def one(index: int) -> list[dict[str, Any]]:
        rng = random.Random(f"{seed}/{name}/{index}")
        return write_key(store, trial_scope(prefix, index), TRIAL_KEY, name, ATTEMPTS, rng)

    with ThreadPoolExecutor(threads) as pool:
        writes = [w for batch in pool.map(one, range(trials)) for w in batch]
    store.close()
    _emit({"role": "writer", "name": name, "writes": writes, "elapsed_ns": now_ns() - started})


def race_forgetter(
    directory: Path,
    name: str,
    prefix: str,
    trials: int,
    threads: int,
    seed: int,
    auto_purge: bool,
    chunk: int = 0,
) -> None:
    """Forget each trial's key once the writers' progress (read through the store) reaches a
    random point, so the forget lands anywhere from before the first write to after the last.
    With ``auto_purge`` every compliance forget also purges and scans before it returns. With
    ``chunk``, forgets of more than ``chunk`` records commit their head first and their records
    ``chunk`` at a time (``erasure.applier``), racing the writers between chunks."""
    if chunk:
        from cenotaph.erasure import ledger

        ledger.CHUNK_RECORDS = chunk
    store = cenotaph.open(directory, auto_purge=auto_purge)
    _barrier(directory, name)
    started = now_ns()
    waits = {"timeouts": 0}

    def one(index: int) -> dict[str, Any]:
        rng = random.Random(f"{seed}/{name}/{index}")
        scope = trial_scope(prefix, index)
        threshold = rng.randint(-1, ATTEMPTS - 1)  # -1: do not wait at all
        target = rng.choice(("key", "key", "scope"))
        mode = rng.choice(("compliance", "operational"))
        deadline = time.monotonic() + 5
        while threshold >= 0:
            seen = store.list(scope, include_descendants=True)
            if max((r.value["n"] for r in seen), default=-1) >= threshold:
                break
            if time.monotonic() > deadline:
                waits["timeouts"] += 1
                break
            time.sleep(0.0003)
        return forget_key(store, scope, TRIAL_KEY, target, mode)

    with ThreadPoolExecutor(threads) as pool:
        forgets = list(pool.map(one, range(trials)))
    store.close()
    _emit(
        {
            "role": "forgetter",
            "name": name,
            "forgets": forgets,
            "wait_timeouts": waits["timeouts"],
            "elapsed_ns": now_ns() - started,
        }
    )


def _emit(doc: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(doc))
    sys.stdout.flush()


# -- crash children ---------------------------------------------------------------------------
def _line(text: str) -> None:
    """One whole line per os.write: a SIGKILL can stop us between lines, never inside one."""
    os.write(1, (text + "\n").encode())


def crash_writer(directory: Path, prefix: str, seed: int, auto_purge: bool) -> None:
    """Write (single and batched, two threads) and forget until killed; print what returned.

    Lines: ``w SCOPE KEY VERSION VALUE`` after a write returned, ``f SCOPE KEY VERSION`` after a
    forget returned, ``F SCOPE KEY`` just before a forget is called (it may or may not happen).
    """
    store = cenotaph.open(directory, auto_purge=auto_purge)
    _line("ready")
    scope = f"{prefix}/user:u/session:s"

    def singles() -> None:
        rng = random.Random(f"{seed}/a")
        i = 0
        while True:
            key = f"a{i}"
            value = rng.randrange(1 << 30)
            record = store.write(scope, key, value)
            _line(f"w {scope} {key} {record.version} {value}")
            if i % 5 == 4:
                victim = f"a{i - 2}"
                _line(f"F {scope} {victim}")
                request = store.forget(scope, victim, mode=rng.choice(("compliance", "operational")))
                _line(f"f {scope} {victim} {request.version}")
            i += 1

    def batches() -> None:
        rng = random.Random(f"{seed}/b")
        i = 0
        while True:
            items = [{"scope": scope, "key": f"b{i}_{j}", "value": rng.randrange(1 << 30)} for j in range(3)]
            records = store.write_many(items)
            for item, record in zip(items, records, strict=True):
                _line(f"w {scope} {item['key']} {record.version} {item['value']}")
            i += 1

    for fn in (singles, batches):
        threading.Thread(target=fn, daemon=True).start()
    time.sleep(120)  # the parent kills us long before this


def crash_after_forget(directory: Path, scope: str, mode: str) -> None:
    """Forget, reauthorize, print what returned, then wait to be killed."""
    store = cenotaph.open(directory)
    store.write(scope, "gone", "secret")
    store.write(scope, "again", "first")
    store.write(scope, "kept", "stays")
    request = store.forget(scope, "gone", mode=mode)
    _line(f"forgot {request.id} {request.version}")
    second = store.forget(scope, "again", mode=mode)
    token = store.reauthorize(scope, "again")
    _line(f"token {second.version} {token}")
    _line("returned")
    time.sleep(120)


def crash_in_forget(directory: Path, scope: str, key: str, mode: str, when: str) -> None:
    """Forget and SIGKILL ourselves mid-forget.

    ``when == "after-ledger"``: after the ledger entry is fsynced in the key provider, before the
    database transaction commits (W7: the forget must be applied on the next open).
    ``when == "before-ledger"``: before anything reaches the ledger (the forget must not happen).
    """
    from cenotaph.crypto.provider import LocalKeyring
    from cenotaph.erasure.forget import ForgetPlan
    from cenotaph.erasure.ledger import Ledger

    if when == "after-ledger":
        original = Ledger.commit_plan

        def commit_then_die(self: Ledger, *args: Any, **kwargs: Any) -> None:
            original(self, *args, **kwargs)
            plan = next(a for a in (*args, *kwargs.values()) if isinstance(a, ForgetPlan))
            _line(f"plan {plan.request_id} {plan.version}")
            os.kill(os.getpid(), signal.SIGKILL)

        Ledger.commit_plan = commit_then_die  # type: ignore[method-assign]
    elif when == "before-ledger":
        append = LocalKeyring.append_ledger

        def die_on_forget(self: LocalKeyring, entry: Any) -> None:
            if entry.get("kind") != "forget":  # other entries (audit anchors, ...) pass through
                append(self, entry)
                return
            _line(f"plan {entry['request_id']} {entry['plan']['version']}")
            os.kill(os.getpid(), signal.SIGKILL)

        LocalKeyring.append_ledger = die_on_forget  # type: ignore[method-assign]
    else:
        raise SystemExit(f"unknown when={when!r}")
    store = cenotaph.open(directory)
    _line("opened")
    store.forget(scope, None if key == "-" else key, mode=mode)
    _line("returned")  # never reached


def main(argv: list[str]) -> None:
    role, args = argv[0], argv[1:]
    if role == "race-writer":
        race_writer(Path(args[0]), args[1], args[2], int(args[3]), int(args[4]), int(args[5]), args[6] == "1")
    elif role == "race-forgetter":
        chunk = int(args[7]) if len(args) > 7 else 0
        race_forgetter(
            Path(args[0]), args[1], args[2], int(args[3]), int(args[4]), int(args[5]), args[6] == "1", chunk
        )
    elif role == "crash-writer":
        crash_writer(Path(args[0]), args[1], int(args[2]), args[3] == "1")
    elif role == "crash-after-forget":
        crash_after_forget(Path(args[0]), args[1], args[2])
    elif role == "crash-in-forget":
        crash_in_forget(Path(args[0]), args[1], args[2], args[3], args[4])
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
