"""W1 under concurrency: a write racing a forget commits before it (and is forgotten) or fails.

Every trial is one fresh ``(scope, key)``: two writers write it repeatedly (about half of the
writes compare-and-set on the version they last saw, about a quarter go to a child scope the
write creates) while a forgetter forgets it (the key or its whole session scope, compliance or
operational, at a random point of the writers' progress). Both forgets cover the child scopes (W2).
Afterwards, for every trial:

- every write that returned has ``version < v_f`` (it committed before the forget);
- every other write raised ``ForgottenError`` (with ``.version == v_f``) or ``StaleWriteError``;
- no write that started after the forget returned succeeded, no read (of a writer, often through
  another Store or process) that started after it returned found the key, and no write that
  ended before the forget started saw a tombstone;
- ``read`` of every slot written returns ``None`` from a store that raced and from a freshly
  opened one, and ``list(scope, include_descendants=True)`` is empty;
- versions are unique across all writes and forgets (one logical clock, serialised).

A "resurrection" is a trial where a write landed after the forget or the key was found after the
forget returned; the count is printed and must be 0. Trials run as threads on one shared ``Store``, as threads each with their own ``Store`` on
one directory, and as separate OS processes. ``CENOTAPH_RACE_TRIALS`` sets the total (default
1000, split 35/35/30); ``-m slow`` runs a 20,000-trial soak (``CENOTAPH_SOAK_TRIALS``).
"""

from __future__ import annotations

import os
import random
import sqlite3
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.kit.checks import present
from tests.kit.proc import spawn
from tests.kit.scenarios import races as workers

import cenotaph
from cenotaph.errors import ForgottenError, StaleWriteError

TOTAL_TRIALS = int(os.environ.get("CENOTAPH_RACE_TRIALS", "1000"))
SOAK_TRIALS = int(os.environ.get("CENOTAPH_SOAK_TRIALS", "20000"))
KEYS_PER_ROUND = 50  # thread races: trials raced at once (3 threads each)
PROCESS_KEYS_PER_ROUND = 100  # process races: trials per set of processes
WRITERS = 2
# Trials per variant whose stores purge (and scan) inside every compliance forget, racing the
# purge's row removal and WAL truncation against the writers. A multi-process run of these found
# an in-process scan releasing SQLite's POSIX locks (database corruption).
PURGE_TRIALS = 20
KEY = workers.TRIAL_KEY


def _split(total: int) -> tuple[int, int, int]:
    """(shared-store threads, own-store threads, processes) trials."""
    shared = round(total * 0.35)
    own = round(total * 0.35)
    return shared, own, max(total - shared - own, 1)


# -- checking -------------------------------------------------------------------------------------
@dataclass
class Tally:
    trials: int = 0
    interleaved: int = 0  # a write succeeded and a later one hit the tombstone
    overlapping: int = 0  # a write's call overlapped the forget's call in time
    ok_writes: int = 0
    forgotten: int = 0
    stale: int = 0
    late_reads: int = 0  # reads that started after the forget returned (must all miss)
    resurrections: int = 0
    problems: list[str] = field(default_factory=list)

    def add(self, other: Tally) -> None:
        for name in ("trials", "interleaved", "overlapping", "ok_writes", "forgotten", "stale", "late_reads"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.resurrections += other.resurrections
        self.problems.extend(other.problems)

    def line(self, label: str, seconds: float) -> str:
        return (
            f"[{label}] trials={self.trials} resurrections={self.resurrections} "
            f"interleaved={self.interleaved} overlapping={self.overlapping} ok_writes={self.ok_writes} "
            f"forgotten_errors={self.forgotten} stale_errors={self.stale} late_reads={self.late_reads} "
            f"problems={len(self.problems)} time={seconds:.1f}s"
        )


def _check(
    writes: list[dict[str, Any]], forgets: list[dict[str, Any]], readers: list[cenotaph.Store]
) -> Tally:
    tally = Tally()
    by_trial: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for w in writes:
        by_trial[w["trial"]].append(w)
    versions: dict[int, str] = {}

    def claim(version: int, what: str) -> None:
        if version in versions:
            tally.problems.append(f"version {version} returned twice: {versions[version]} and {what}")
        versions[version] = what

    for forget in forgets:
        tally.trials += 1
        trial = forget["trial"]
        if not forget["ok"]:
            tally.problems.append(f"{trial}: forget failed: {forget['error']}: {forget.get('detail')}")
            continue
        v_f = forget["version"]
        claim(v_f, f"forget of {trial}")
        resurrected = False
        saw_ok = saw_forgotten = overlapped = False
        attempts = by_trial.pop(trial, [])
        for w in attempts:
            overlapped = overlapped or (w["start"] < forget["end"] and w["end"] > forget["start"])
            where = f"{trial} ({w['slot']})"
            if "read_start" in w and w["read_start"] > forget["end"]:
                tally.late_reads += 1
                if w["read_found"]:
                    resurrected = True
                    tally.problems.append(f"{where}: a read that started after the forget returned found it")
            if w["ok"]:
                tally.ok_writes += 1
                saw_ok = True
                claim(w["version"], f"write {w['w']}#{w['n']} of {where}")
                if w["version"] >= v_f:
                    resurrected = True
                    tally.problems.append(f"{where}: write returned version {w['version']} >= v_f {v_f}")
                if w["start"] > forget["end"]:
                    resurrected = True
                    tally.problems.append(
                        f"{where}: a write that started after the forget returned succeeded"
                    )
            elif w["error"] == "ForgottenError":
                tally.forgotten += 1
                saw_forgotten = True
                if w["error_version"] != v_f:
                    tally.problems.append(
                        f"{where}: ForgottenError.version {w['error_version']} != v_f {v_f}"
                    )
                if w["end"] < forget["start"]:
                    tally.problems.append(f"{where}: ForgottenError before the forget began")
            elif w["error"] == "StaleWriteError":
                tally.stale += 1
            else:
                tally.problems.append(f"{where}: unexpected {w['error']}: {w.get('detail')}")
        tally.interleaved += saw_ok and saw_forgotten
        tally.overlapping += overlapped
        scope = trial.split("|")[0]
        slots = {trial, *(w["slot"] for w in attempts)}
        for reader in readers:
            for slot in sorted(slots):
                if reader.read(*slot.split("|")) is not None:
                    resurrected = True
                    tally.problems.append(f"{slot}: readable after the forget returned")
            if reader.list(scope, include_descendants=True):
                tally.problems.append(f"{trial}: list() not empty after the forget")
        tally.resurrections += resurrected
    for trial in by_trial:
        tally.problems.append(f"{trial}: writes without a forget outcome")
    return tally


def _assert_clean(tally: Tally, label: str, started: float) -> None:
    print(tally.line(label, time.monotonic() - started))
    assert tally.problems == [], "\n".join(tally.problems[:30])
    assert tally.resurrections == 0
    # The races really raced: in a good share of trials the forget landed between two writes.
    assert tally.interleaved > 0, "no trial interleaved a forget between writes; the race is vacuous"


# -- thread races -----------------------------------------------------------------------------------
def _rounds(trials: int, per_round: int, purge_trials: int) -> list[tuple[int, str]]:
    """(size, auto_purge) of each round: first ``purge_trials`` trials whose compliance forgets
    purge and scan before returning (slow: a scan per forget), the rest without."""
    out: list[tuple[int, str]] = []
    purging = min(purge_trials, trials)
    if purging:
        out.append((purging, "sync"))
    left = trials - purging
    while left > 0:
        out.append((min(per_round, left), "off"))
        left -= out[-1][0]
    return out


def _thread_round(
    directory: Path,
    prefix: str,
    trials: int,
    seed: int,
    shared: cenotaph.Store | None,
    auto_purge: str,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Race ``trials`` trials at once: per trial WRITERS writer threads and one forgetter thread.

    With ``shared`` every thread uses it; otherwise every thread opens its own Store on
    ``directory`` (before the start barrier) and closes it afterwards.
    """
    rng = random.Random(seed)
    barrier = threading.Barrier(trials * (WRITERS + 1))
    writes: list[dict[str, Any]] = []
    forgets: list[dict[str, Any]] = []
    errors: list[BaseException] = []
    out_lock = threading.Lock()

    @dataclass
    class Progress:
        done: int = 0
        cond: threading.Condition = field(default_factory=threading.Condition)

        def bump(self) -> None:
            with self.cond:
                self.done += 1
                self.cond.notify_all()

    def run(body: Any) -> None:
        try:
            with ExitStack() as stack:
                store = shared
                if store is None:
                    store = stack.enter_context(cenotaph.open(directory, auto_purge=auto_purge))
                barrier.wait(timeout=120)
                body(store)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads: list[threading.Thread] = []
    for index in range(trials):
        scope = workers.trial_scope(prefix, index)
        progress = Progress()
        threshold = rng.randint(0, WRITERS * workers.ATTEMPTS)
        target = rng.choice(("key", "key", "scope"))
        mode = rng.choice(("compliance", "operational"))
        for writer in range(WRITERS):
            wrng = random.Random(rng.random())

            def write_body(
                store: cenotaph.Store, scope: str = scope, w: int = writer, r: Any = wrng, p: Any = progress
            ) -> None:
                got = workers.write_key(store, scope, KEY, f"w{w}", workers.ATTEMPTS, r, p.bump)
                with out_lock:
                    writes.extend(got)

            threads.append(threading.Thread(target=run, args=(write_body,)))

        def forget_body(
            store: cenotaph.Store,
            scope: str = scope,
            p: Any = progress,
            threshold: int = threshold,
            target: str = target,
            mode: str = mode,
        ) -> None:
            with p.cond:
                p.cond.wait_for(lambda: p.done >= threshold, timeout=60)
            got = workers.forget_key(store, scope, KEY, target, mode)
            with out_lock:
                forgets.append(got)

        threads.append(threading.Thread(target=run, args=(forget_body,)))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert not any(t.is_alive() for t in threads), "a race thread hung"
    assert not errors, f"race thread crashed: {errors[0]!r}"
    return writes, forgets


def _thread_races(base: Path, trials: int, own_stores: bool, seed: int, purge_trials: int) -> Tally:
    tally = Tally()
    for r, (size, auto_purge) in enumerate(_rounds(trials, KEYS_PER_ROUND, purge_trials)):
        directory = base / f"round{r}"  # a fresh directory per round keeps the ledger short
        prefix = f"tenant:race/user:r{r}"
        with cenotaph.open(directory, auto_purge=auto_purge) as first:
            shared = None if own_stores else first
            writes, forgets = _thread_round(directory, prefix, size, seed * 1000 + r, shared, auto_purge)
            with cenotaph.open(directory) as fresh:
                tally.add(_check(writes, forgets, [first, fresh]))
    return tally


@pytest.mark.parametrize(
    ("own_stores", "share", "seed", "label"),
    [(False, 0, 11, "threads/shared-store"), (True, 1, 23, "threads/store-per-thread")],
    ids=["shared-store", "store-per-thread"],
)
def test_thread_race(tmp_path: Path, own_stores: bool, share: int, seed: int, label: str) -> None:
    started = time.monotonic()
    trials = _split(TOTAL_TRIALS)[share]
    tally = _thread_races(tmp_path, trials, own_stores=own_stores, seed=seed, purge_trials=PURGE_TRIALS)
    assert tally.trials == trials
    _assert_clean(tally, label, started)


# -- process races ----------------------------------------------------------------------------------
def _run_workers(directory: Path, roles: list[tuple[str, str]], args: dict[str, Any]) -> list[dict[str, Any]]:
    """Start one process per (role, name), release them together, collect their JSON."""
    directory.mkdir(parents=True, exist_ok=True)
    cenotaph.open(directory).close()  # create the store once, so the workers do not race on init
    with ExitStack() as stack:
        procs = [
            stack.enter_context(spawn(role, directory=str(directory), name=name, **args))
            for role, name in roles
        ]
        deadline = time.monotonic() + 60
        while not all((directory / f"ready-{name}").exists() for _, name in roles):
            assert all(p.alive for p in procs), "a worker died before the barrier"
            assert time.monotonic() < deadline, "workers did not get ready"
            time.sleep(0.005)
        (directory / "go").touch()
        docs = []
        for p in procs:
            code = p.finish(timeout=240)
            assert code == 0, f"worker failed ({code}): {p.stderr}"
            docs.append(p.result())
        return docs


def _process_races(base: Path, trials: int, seed: int, purge_trials: int, chunk: int = 0) -> Tally:
    """``chunk``: the forgetter applies forgets ``chunk`` records at a time (see test below)."""
    tally = Tally()
    timeouts = 0
    for r, (size, auto_purge) in enumerate(_rounds(trials, PROCESS_KEYS_PER_ROUND, purge_trials)):
        directory = base / f"round{r}"
        prefix = f"tenant:race/user:p{r}"
        roles = [*(("race-writer", f"w{i}") for i in range(WRITERS)), ("race-forgetter", "f")]
        args = {
            "prefix": prefix,
            "trials": size,
            "threads": 4,
            "seed": seed * 1000 + r,
            "auto_purge": auto_purge,
            "chunk": chunk,
        }
        docs = _run_workers(directory, roles, args)
        writes = [w for d in docs if d["role"] == "writer" for w in d["writes"]]
        forgets = [f for d in docs if d["role"] == "forgetter" for f in d["forgets"]]
        timeouts += sum(d.get("wait_timeouts", 0) for d in docs)
        with cenotaph.open(directory) as fresh:
            tally.add(_check(writes, forgets, [fresh]))
    print(f"[processes] forgetter wait timeouts={timeouts}")
    return tally


def test_process_race(tmp_path: Path) -> None:
    started = time.monotonic()
    trials = _split(TOTAL_TRIALS)[2]
    tally = _process_races(tmp_path, trials, seed=37, purge_trials=PURGE_TRIALS)
    assert tally.trials == trials
    _assert_clean(tally, "processes", started)


# A forget covering more records than a chunk commits its tombstones (the ledger entry decides in
# every process) and then hides and destroys its records a chunk per transaction: writers in
# other processes race every one of those transactions. One record per chunk makes nearly every
# trial's forget chunked (each trial's key has several versions, some in child scopes).
CHUNKED_TRIALS = int(os.environ.get("CENOTAPH_CHUNKED_RACE_TRIALS", "200"))


def _chunked_forgets(base: Path) -> int:
    """How many forgets the ledgers under ``base`` hold that covered more than one record."""
    plans = [
        e["plan"]
        for ledger in base.glob("round*/keyring")
        for e in cenotaph.LocalKeyring(ledger).ledger()
        if e.get("kind") == "forget"
    ]
    return sum(len({*p["hide"], *p["destroy_records"]}) > 1 for p in plans)


def test_process_race_during_chunked_forgets(tmp_path: Path) -> None:
    started = time.monotonic()
    tally = _process_races(tmp_path, CHUNKED_TRIALS, seed=41, purge_trials=10, chunk=1)
    assert tally.trials == CHUNKED_TRIALS
    chunked = _chunked_forgets(tmp_path)
    print(f"[processes/chunked] forgets applied in chunks: {chunked}")
    assert chunked > CHUNKED_TRIALS // 2, "most forgets must really have been chunked"
    _assert_clean(tally, "processes/chunked", started)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_chunked_race_soak(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("soak: run with -m slow")
    started = time.monotonic()
    trials = SOAK_TRIALS // 4
    tally = _process_races(tmp_path, trials, seed=404, purge_trials=100, chunk=1)
    assert tally.trials == trials
    assert _chunked_forgets(tmp_path) > trials // 2
    _assert_clean(tally, "processes/chunked soak", started)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_race_soak(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("soak: run with -m slow")
    shared, own, procs = _split(SOAK_TRIALS)
    started = time.monotonic()
    total = Tally()
    purging = min(200, SOAK_TRIALS // 20)
    total.add(_thread_races(tmp_path / "shared", shared, own_stores=False, seed=101, purge_trials=purging))
    total.add(_thread_races(tmp_path / "own", own, own_stores=True, seed=202, purge_trials=purging))
    total.add(_process_races(tmp_path / "procs", procs, seed=303, purge_trials=purging))
    assert total.trials == SOAK_TRIALS
    _assert_clean(total, "soak", started)


# -- reauthorization races ----------------------------------------------------------------------------
REAUTH_TRIALS = 50


def _db_count(directory: Path, sql: str) -> int:
    conn = sqlite3.connect(directory / "cenotaph.db")
    try:
        return int(conn.execute(sql).fetchone()[0])
    finally:
        conn.close()


def _race_two(bodies: list[Any]) -> list[Any]:
    """Run the bodies in threads released together; each returns its outcome (or the exception)."""
    barrier = threading.Barrier(len(bodies))
    results: list[Any] = [None] * len(bodies)

    def run(i: int) -> None:
        barrier.wait(timeout=30)
        try:
            results[i] = bodies[i]()
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    return results


@pytest.fixture
def two_stores(tmp_path: Path) -> Iterator[tuple[Path, cenotaph.Store, cenotaph.Store]]:
    """Two Stores on one directory (as two processes would have); threads race through both.
    (No auto-purge: W1 is decided by tombstones; purging is raced in the trials above.)"""
    with cenotaph.open(tmp_path, auto_purge="off") as a, cenotaph.open(tmp_path, auto_purge="off") as b:
        yield tmp_path, a, b


def _forgotten_with_token(store: cenotaph.Store, scope: str, mode: str) -> tuple[int, str]:
    store.write(scope, KEY, "before")
    request = store.forget(scope, KEY, mode=mode)
    return request.version, store.reauthorize(scope, KEY)


def _token_trials(
    store: cenotaph.Store, name: str, rng: random.Random | None
) -> Iterator[tuple[str, int, str]]:
    """REAUTH_TRIALS fresh scopes, each with its key forgotten (mode drawn from ``rng``, compliance
    without one) and a reauthorization token issued after: (scope, v_f, token)."""
    for trial in range(REAUTH_TRIALS):
        scope = f"tenant:reauth/user:u/session:{name}{trial}"
        mode = "compliance" if rng is None else rng.choice(("compliance", "operational"))
        yield (scope, *_forgotten_with_token(store, scope, mode))


def test_reauth_same_token_concurrently(two_stores: tuple[Path, cenotaph.Store, cenotaph.Store]) -> None:
    """Two threads present one token at once: it is consumed exactly once (one lift), and the write
    that did not consume it lands through that lift (W1: after the token is consumed, writes to
    the target need no token until the next forget), never as a second consumption."""
    directory, a, b = two_stores
    for scope, v_f, token in _token_trials(a, "same", random.Random(5)):
        results = _race_two(
            [
                lambda s=scope, t=token: a.write(s, KEY, "A", reauthorization=t),
                lambda s=scope, t=token: b.write(s, KEY, "B", reauthorization=t),
            ]
        )
        assert all(isinstance(r, cenotaph.Record) for r in results), results
        first, second = sorted(results, key=lambda r: r.version)
        assert v_f < first.version < second.version
        assert present(a.read(scope, KEY)).version == second.version
        with pytest.raises(ForgottenError):
            a.write(f"{scope}/sub:x", KEY, "other slot: not covered by a key token")
    assert _db_count(directory, "SELECT count(*) FROM lifts") == REAUTH_TRIALS
    assert _db_count(directory, "SELECT count(*) FROM reauth_tokens WHERE consumed_version IS NULL") == 0


def test_reauth_same_token_compare_and_set(two_stores: tuple[Path, cenotaph.Store, cenotaph.Store]) -> None:
    """Two threads present one token, both with base_version = v_f: exactly one write succeeds."""
    directory, a, b = two_stores
    for scope, v_f, token in _token_trials(a, "cas", random.Random(6)):
        results = _race_two(
            [
                lambda s=scope, t=token, v=v_f: a.write(s, KEY, "A", base_version=v, reauthorization=t),
                lambda s=scope, t=token, v=v_f: b.write(s, KEY, "B", base_version=v, reauthorization=t),
            ]
        )
        ok = [r for r in results if isinstance(r, cenotaph.Record)]
        failed = [r for r in results if not isinstance(r, cenotaph.Record)]
        assert len(ok) == 1, results
        assert isinstance(failed[0], StaleWriteError), results
        assert present(b.read(scope, KEY)).value == ok[0].value
    assert _db_count(directory, "SELECT count(*) FROM lifts") == REAUTH_TRIALS


def test_reauth_rejected_write_never_consumes(
    two_stores: tuple[Path, cenotaph.Store, cenotaph.Store],
) -> None:
    """A stale write and a good write present one token at once: the stale one always fails and
    never consumes it, so the good one always succeeds, whichever goes first."""
    directory, a, b = two_stores
    for scope, v_f, token in _token_trials(a, "stale", None):
        stale, good = _race_two(
            [
                lambda s=scope, t=token, v=v_f: a.write(
                    s, KEY, "stale", base_version=v - 1, reauthorization=t
                ),
                lambda s=scope, t=token: b.write(s, KEY, "good", reauthorization=t),
            ]
        )
        assert isinstance(stale, StaleWriteError), stale
        assert isinstance(good, cenotaph.Record) and good.version > v_f, good
    assert _db_count(directory, "SELECT count(*) FROM lifts") == REAUTH_TRIALS


def test_reauth_write_racing_a_second_forget(two_stores: tuple[Path, cenotaph.Store, cenotaph.Store]) -> None:
    """A token-bearing writer races a second forget of the same key: its writes commit before the
    second forget (and are forgotten) or fail with ForgottenError at v_f2; nothing survives."""
    _, a, b = two_stores
    rng = random.Random(8)
    for scope, _, token in _token_trials(a, "again", rng):
        delay = rng.random() * 0.004

        def writer(s: str = scope, t: str = token) -> list[Any]:
            out: list[Any] = []
            for n in range(4):
                try:
                    out.append(a.write(s, KEY, n, reauthorization=t))
                except ForgottenError as exc:
                    out.append(exc)
            return out

        def forgetter(
            s: str = scope, d: float = delay, m: str = rng.choice(("compliance", "operational"))
        ) -> Any:
            time.sleep(d)
            return b.forget(s, KEY, mode=m)

        outcomes, second = _race_two([writer, forgetter])
        assert isinstance(second, cenotaph.ErasureRequest), second
        for o in outcomes:
            if isinstance(o, cenotaph.Record):
                assert o.version < second.version
            else:
                assert isinstance(o, ForgottenError) and o.version == second.version, o
        assert a.read(scope, KEY) is None and b.read(scope, KEY) is None


def test_scope_key_cache_dropped_after_other_store_forgets(tmp_path: Path) -> None:
    """Regression: Store B cached a scope key; Store A compliance-forgets the scope (destroying the
    key); B's next reauthorized write must use a new key generation, readable by every Store.
    (It was sealed with the destroyed key when B's ledger reconcile commit hid A's commit from
    the data_version check, so B never dropped its caches.)"""
    scope = "tenant:t/user:v/session:x"
    with cenotaph.open(tmp_path) as a, cenotaph.open(tmp_path) as b:
        b.write(scope, "k", 1)  # b now caches the scope's key
        a.forget(scope)  # compliance: destroys that key
        token = b.reauthorize(scope)
        record = b.write(scope, "k2", 2, reauthorization=token)
        assert b.read(scope, "k2") is not None
        with cenotaph.open(tmp_path) as fresh:
            got = fresh.read(scope, "k2")
        assert got is not None and got.version == record.version  # W7: a returned write is readable
