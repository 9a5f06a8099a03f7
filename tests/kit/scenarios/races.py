"""Writers and forgetters racing on one (scope, key) per trial (tests/test_races.py).

:func:`write_key` and :func:`forget_key` run in the test's own threads too; :func:`race_writer`
and :func:`race_forgetter` are the scenarios of separate processes, released together by the
parent's ``go`` file and returning their outcomes as one JSON document.
"""

from __future__ import annotations

import random
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
def _barrier(directory: str, name: str) -> None:
    """Say we are ready, then wait for the parent's go file."""
    (Path(directory) / f"ready-{name}").touch()
    go = Path(directory) / "go"
    deadline = time.monotonic() + 60
    while not go.exists():
        if time.monotonic() > deadline:
            raise SystemExit("no go file within 60 s")
        time.sleep(0.0005)


def race_writer(
    directory: str,
    name: str,
    prefix: str,
    trials: int,
    threads: int,
    seed: int,
    auto_purge: str,
    chunk: int = 0,
) -> dict[str, Any]:
    """Each trial: ATTEMPTS writes of its key (see :func:`write_key`), ``threads`` trials at once.
    (``chunk`` is the forgetter's; the writers take the same arguments.)"""
    store = cenotaph.open(directory, auto_purge=auto_purge)
    _barrier(directory, name)
    started = now_ns()

    def one(index: int) -> list[dict[str, Any]]:
        rng = random.Random(f"{seed}/{name}/{index}")
        return write_key(store, trial_scope(prefix, index), TRIAL_KEY, name, ATTEMPTS, rng)

    with ThreadPoolExecutor(threads) as pool:
        writes = [w for batch in pool.map(one, range(trials)) for w in batch]
    store.close()
    return {"role": "writer", "name": name, "writes": writes, "elapsed_ns": now_ns() - started}


def race_forgetter(
    directory: str,
    name: str,
    prefix: str,
    trials: int,
    threads: int,
    seed: int,
    auto_purge: str,
    chunk: int = 0,
) -> dict[str, Any]:
    """Forget each trial's key once the writers' progress (read through the store) reaches a
    random point, so the forget lands anywhere from before the first write to after the last.
    With ``auto_purge="sync"`` every compliance forget also purges and scans before it returns. With
    ``chunk``, forgets of more than ``chunk`` records commit their head first and their records
    ``chunk`` at a time (``erasure.purge.chunks``), racing the writers between chunks."""
    if chunk:
        from cenotaph.ledger import journal as ledger

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
    return {
        "role": "forgetter",
        "name": name,
        "forgets": forgets,
        "wait_timeouts": waits["timeouts"],
        "elapsed_ns": now_ns() - started,
    }
