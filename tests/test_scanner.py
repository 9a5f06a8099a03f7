"""The residue scanner finds every planted probe in real files, and nothing else."""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cenotaph.erasure.proof import scanner as scanner_module
from cenotaph.erasure.proof.scan_worker import scan_in_child
from cenotaph.erasure.proof.scanner import (
    PROBE_MIN,
    ResidueScanner,
    ScanResult,
    probe_windows,
    text_probes,
)
from cenotaph.errors import InvalidValueError, StorageError


def _random(n: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(n)


def _naive_count(data: bytes, probes: list[bytes]) -> int:
    """Reference: every (probe, position) occurrence, overlapping ones included."""
    count = 0
    for probe in set(probes):
        at = data.find(probe)
        while at != -1:
            count += 1
            at = data.find(probe, at + 1)
    return count


PROBE = _random(32, seed=1)


def test_finds_probe_in_plain_file(tmp_path: Path) -> None:
    (tmp_path / "store.db").write_bytes(_random(5000) + PROBE + _random(3000, seed=2))
    (tmp_path / "other.db").write_bytes(_random(4000, seed=3))

    result = ResidueScanner([PROBE]).scan(tmp_path)

    assert result.matches == 1
    assert result.matched_files == ("store.db",)
    assert result.files == 2
    assert result.bytes == 5032 + 3000 + 4000
    assert result.probes == 1
    assert result.positive_control is True


def test_zero_matches_when_absent_and_counts_are_exact(tmp_path: Path) -> None:
    sizes = {"a.db": 10_000, "a.db-wal": 0, "sub/b.bin": 123_457}
    for name, size in sizes.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(_random(size, seed=size))

    probes = [_random(32, seed=100 + i) for i in range(50)]
    result = ResidueScanner(probes).scan(tmp_path)

    assert result == ScanResult(
        files=3, bytes=sum(sizes.values()), probes=50, matches=0, positive_control=True, matched_files=()
    )
    assert result.to_dict() == {
        "files": 3,
        "bytes": 133_457,
        "probes": 50,
        "matches": 0,
        "positive_control": True,
        "matched_files": [],
    }


@pytest.mark.parametrize("chunk_size", [1, 7, 16, 31, 32, 33, 64, 100, 4096])
def test_finds_probe_across_every_chunk_boundary_position(tmp_path: Path, chunk_size: int) -> None:
    # One file per planting offset, covering every way the probe can straddle the first boundaries.
    offsets = range(0, min(3 * chunk_size, 200))
    for offset in offsets:
        data = bytearray(_random(offset + 32 + 50, seed=offset))
        data[offset : offset + 32] = PROBE
        (tmp_path / f"f{offset:04d}").write_bytes(data)

    result = ResidueScanner([PROBE], chunk_size=chunk_size).scan(tmp_path)

    assert result.matches == len(offsets)
    assert len(result.matched_files) == len(offsets)
    assert result.positive_control is True


@pytest.mark.parametrize("chunk_size", [40, 257, 4096, 1 << 20])
def test_counts_match_a_naive_search(tmp_path: Path, chunk_size: int) -> None:
    rng = random.Random(chunk_size)
    probes = [rng.randbytes(rng.choice([16, 17, 24, 32, 48])) for _ in range(40)]
    probes.append(max(probes, key=len)[2:18])  # a probe inside another probe
    probes.append(probes[1] + probes[1])  # a probe made of another probe, repeated
    data = bytearray(rng.randbytes(300_000))
    for _ in range(200):
        probe = rng.choice(probes)
        at = rng.randrange(len(data) - len(probe))
        data[at : at + len(probe)] = probe
    # Back-to-back and overlapping copies.
    for at, block in ((1000, probes[1] * 2), (2000, probes[1] * 2 + probes[1][:16])):
        data[at : at + len(block)] = block
    (tmp_path / "data.bin").write_bytes(data)

    result = ResidueScanner(probes, chunk_size=chunk_size).scan(tmp_path)

    assert result.matches == _naive_count(bytes(data), probes)
    assert result.matches > 200


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.binary(min_size=0, max_size=3000).map(lambda b: bytes(x % 3 for x in b)),
    cuts=st.lists(st.tuples(st.integers(0, 2999), st.integers(16, 40)), min_size=1, max_size=6),
    chunk_size=st.integers(1, 700),
)
def test_matches_equal_a_naive_search_on_repetitive_data(
    tmp_path: Path, data: bytes, cuts: list[tuple[int, int]], chunk_size: int
) -> None:
    # A three-letter alphabet makes overlapping and repeated occurrences common.
    probes = [data[at : at + width] for at, width in cuts if len(data[at : at + width]) >= 16]
    probes = [p for p in probes if p.count(p[:1]) != len(p)] or [PROBE]
    (tmp_path / "f").write_bytes(data)

    result = ResidueScanner(probes, chunk_size=chunk_size).scan(tmp_path)

    assert result.matches == _naive_count(data, probes)


@pytest.mark.parametrize(
    ("background", "chunk_size", "automaton_calls"),
    [(b"\x00", 4096, 0), (b"\x00", 1 << 20, 0), (b"ab", 4096, 0), (b"ab", 1 << 20, 3)],
    ids=["zeros-small-chunks", "zeros-big-chunks", "periodic-small-chunks", "periodic-big-chunks"],
)
def test_low_entropy_probes_in_repetitive_data(
    tmp_path: Path,
    background: bytes,
    chunk_size: int,
    automaton_calls: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Probes sharing grams with the background hit every stride position. Zeroed pages (sparse
    # float32 vectors) are handled by skipping run interiors; other repetition sends big chunks to
    # the automaton fallback; small chunks stay on the vectorised path.
    low = background * 12 + b"\x00\x00\x80\x3f\xcd\xcc\x4c\x3e\x00\x00\x00\x40"
    data = bytearray(background * ((3 << 20) // len(background)))
    for at, probe in [(5000, low), ((1 << 20) - 10, low), ((2 << 20) - 33, PROBE)]:
        data[at : at + len(probe)] = probe  # across a boundary; inside the carried-over tail
    (tmp_path / "repetitive.db").write_bytes(data)
    calls = []
    fallback = scanner_module._Matcher._find_with_automaton

    def spy(self: object, *args: object) -> object:
        calls.append(1)
        return fallback(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(scanner_module._Matcher, "_find_with_automaton", spy)
    result = ResidueScanner([low, PROBE], chunk_size=chunk_size).scan(tmp_path)

    assert result.matches == 3 == _naive_count(bytes(data), [low, PROBE])
    assert len(calls) == automaton_calls


@pytest.mark.parametrize("chunk_size", [4096, 1 << 20])
def test_probes_that_are_almost_a_run_are_found_at_every_phase(tmp_path: Path, chunk_size: int) -> None:
    # The one varying byte sits at either end, so only the outermost bytes of a match leave the run.
    head, tail = b"\x01" + bytes(31), bytes(31) + b"\x02"
    data = bytearray(1 << 20)
    for k in range(120):
        at = 1000 * k + k  # every phase against the stride
        probe = head if k % 2 else tail
        data[at : at + 32] = probe
    (tmp_path / "zeros.db").write_bytes(data)

    result = ResidueScanner([head, tail], chunk_size=chunk_size).scan(tmp_path)

    assert result.matches == 120 == _naive_count(bytes(data), [head, tail])


def test_one_byte_runs_are_not_probes() -> None:
    with pytest.raises(InvalidValueError, match="one byte repeated"):
        ResidueScanner([bytes(32)])
    vector = bytes(64) + b"\x00\x00\x80\x3f" * 8 + bytes(64)
    # Windows start at 0, 16, ..., 128; only those overlapping the floats at 64..96 are kept.
    assert probe_windows(vector, width=32, count=9) == [vector[48:80], vector[64:96], vector[80:112]]
    assert text_probes("a" * 16) == [b"a\x00" * 16, b"61" * 16]


def test_vectorised_search_and_automaton_report_the_same_positions() -> None:
    rng = random.Random(7)
    probes = tuple(sorted({rng.randbytes(rng.choice([16, 20, 32])) for _ in range(30)}))
    data = bytearray(rng.randbytes(50_000))
    for _ in range(100):
        probe = rng.choice(probes)
        at = rng.randrange(len(data) - len(probe))
        data[at : at + len(probe)] = probe
    matcher = scanner_module._Matcher(probes)
    expected = {(i, at) for i, p in enumerate(probes) for at in range(len(data)) if data.startswith(p, at)}

    for fresh_from in (0, 31, 20_000):
        want = {(i, at) for i, at in expected if at + len(probes[i]) > fresh_from}
        assert set(matcher.find(data, len(data), fresh_from=fresh_from)) == want
        assert set(matcher._find_with_automaton(data, len(data), fresh_from)) == want


def test_nested_hidden_and_sqlite_side_files(tmp_path: Path) -> None:
    names = [".hidden", "deep/er/still/x.db-wal", "deep/.cache/y.db-shm", "z.db-journal"]
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"head" + PROBE + b"tail")

    result = ResidueScanner([PROBE]).scan(tmp_path)

    assert result.matches == 4
    assert sorted(result.matched_files) == sorted(names)


def test_symlinks_are_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.bin").write_bytes(PROBE)
    root = tmp_path / "root"
    root.mkdir()
    (root / "plain.bin").write_bytes(b"x" * 100)
    (root / "link.bin").symlink_to(outside / "secret.bin")
    (root / "linkdir").symlink_to(outside, target_is_directory=True)

    result = ResidueScanner([PROBE]).scan(root)

    assert (result.files, result.bytes, result.matches) == (1, 100, 0)


def test_positive_control_without_probes(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(_random(1000))

    result = ResidueScanner([], chunk_size=64).scan(tmp_path)

    assert (result.files, result.bytes, result.probes, result.matches) == (1, 1000, 0, 0)
    assert result.positive_control is True


def test_positive_control_fails_when_the_search_is_broken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scanner_module._Matcher, "find", lambda self, buf, n, *, fresh_from: [])
    (tmp_path / "a").write_bytes(PROBE)

    result = ResidueScanner([PROBE]).scan(tmp_path)

    assert result.matches == 0
    assert result.positive_control is False


def test_positive_control_file_is_outside_root_and_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    temp_base = tmp_path / "tmp"
    temp_base.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(temp_base))
    root = tmp_path / "store"
    root.mkdir()
    (root / "a").write_bytes(b"y" * 50)
    seen: list[list[str]] = []
    real_scan_path = ResidueScanner._scan_path

    def record(self: ResidueScanner, path: Path, *args: object) -> object:
        seen.append([str(path), str(path.parent.parent)])
        return real_scan_path(self, path, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(ResidueScanner, "_scan_path", record)
    result = ResidueScanner([PROBE], chunk_size=64).scan(root)

    assert result.positive_control is True
    assert result.files == 1
    control_path, control_base = seen[-1]
    assert control_base == str(temp_base.resolve()) or control_base == str(temp_base)
    assert not control_path.startswith(str(root))
    assert list(temp_base.iterdir()) == []


def test_positive_control_moves_out_when_tempdir_is_inside_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "store"
    (root / "tmp").mkdir(parents=True)
    monkeypatch.setattr("tempfile.tempdir", str(root / "tmp"))

    result = ResidueScanner([PROBE]).scan(root)

    assert result.positive_control is True
    assert list((root / "tmp").iterdir()) == []
    assert [p.name for p in tmp_path.iterdir()] == ["store"]  # the control dir went and was removed


def test_short_probe_is_rejected_without_echoing_it() -> None:
    secret = b"fifteen bytes!!"
    assert len(secret) == PROBE_MIN - 1
    with pytest.raises(InvalidValueError) as info:
        ResidueScanner([PROBE, secret])
    assert "15 bytes" in str(info.value)
    assert "fifteen" not in str(info.value)


def test_duplicate_probes_are_counted_once(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(PROBE)
    result = ResidueScanner([PROBE, bytes(PROBE), PROBE[:16] + PROBE[16:]]).scan(tmp_path)
    assert (result.probes, result.matches) == (1, 1)


@pytest.mark.parametrize(
    "encode",
    [
        lambda s: s.encode("utf-8"),
        lambda s: s.encode("utf-16-le"),
        lambda s: s.encode("utf-8").hex().encode(),
        lambda s: s.encode("utf-8").hex().upper().encode(),  # what SQLite's hex() writes
    ],
    ids=["utf8", "utf16le", "hex", "HEX"],
)
def test_text_probes_find_each_encoding(tmp_path: Path, encode: object) -> None:
    canary = "canary-\u00e9t\u00e9-4f1c9a"
    (tmp_path / "dump").write_bytes(b"prefix " + encode(canary) + b" suffix")  # type: ignore[operator]
    (tmp_path / "clean").write_bytes(b"prefix canary-\xc3\xa9t\xc3\xa9-4f1c9b suffix")

    result = ResidueScanner(text_probes(canary)).scan(tmp_path)

    assert result.matched_files == ("dump",)
    assert result.matches == 1


def test_text_probes_drops_short_forms() -> None:
    assert text_probes("shortish") == [
        b"s\x00h\x00o\x00r\x00t\x00i\x00s\x00h\x00",
        b"73686f7274697368",
        b"73686F7274697368",
    ]
    assert text_probes("12345678") == [b"1\x002\x003\x004\x005\x006\x007\x008\x00", b"3132333435363738"]


def test_probe_windows_spread_over_data() -> None:
    data = bytes(range(256)) * 4
    windows = probe_windows(data, width=32, count=4)
    last = len(data) - 32
    assert windows == [data[s : s + 32] for s in (0, last // 3, 2 * last // 3, last)]
    assert probe_windows(data, width=32, count=1) == [data[:32]]
    assert probe_windows(data[:20]) == [data[:20]]
    assert probe_windows(data[:15]) == []
    assert probe_windows(data[:33], width=32, count=4) == [data[:32], data[1:33]]
    with pytest.raises(InvalidValueError):
        probe_windows(data, width=8)


def test_vanished_file_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "a.db").write_bytes(_random(200_000))
    (tmp_path / "a.db-wal").write_bytes(PROBE * 10)
    calls: list[tuple[int, int]] = []

    def progress(done: int, total: int) -> None:
        # SQLite checkpoints and removes the WAL while the main file is being read.
        calls.append((done, total))
        (tmp_path / "a.db-wal").unlink(missing_ok=True)

    result = ResidueScanner([PROBE], chunk_size=65536).scan(tmp_path, progress=progress)

    assert (result.files, result.bytes, result.matches) == (1, 200_000, 0)
    assert calls[-1] == (200_000, 200_000)


def test_scan_files_skips_missing_paths_and_names_relative(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a").write_bytes(PROBE)

    result = ResidueScanner([PROBE]).scan_files(
        [Path("sub/a"), tmp_path / "gone", tmp_path / "sub" / "a"], tmp_path
    )

    assert (result.files, result.matches, result.matched_files) == (1, 1, ("sub/a",))
    with pytest.raises(InvalidValueError):
        ResidueScanner([PROBE]).scan_files([tmp_path.parent / "elsewhere"], tmp_path)


def test_progress_reports_every_chunk(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(_random(10_000))
    (tmp_path / "b").write_bytes(_random(5_000, seed=1))
    calls: list[tuple[int, int]] = []

    ResidueScanner([PROBE], chunk_size=4096).scan(tmp_path, progress=lambda d, t: calls.append((d, t)))

    assert calls == [(d, 15_000) for d in (4096, 8192, 10_000, 14_096, 15_000)]


def test_unreadable_file_raises_storage_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sub").mkdir()
    locked = tmp_path / "sub" / "locked.db"
    locked.write_bytes(PROBE)
    real_open = os.open

    def deny(path: object, flags: int, *args: object) -> int:
        if str(path) == str(locked):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *args)  # type: ignore[arg-type]

    # Root reads anything, so permissions are denied at the open call itself.
    monkeypatch.setattr(os, "open", deny)
    with pytest.raises(StorageError) as info:
        ResidueScanner([PROBE]).scan(tmp_path)

    message = str(info.value)
    assert "sub/locked.db" in message
    assert "Permission denied" in message
    assert "readable" in message
    assert PROBE.hex() not in message and repr(PROBE) not in message


def test_root_must_be_a_directory(tmp_path: Path) -> None:
    with pytest.raises(InvalidValueError):
        ResidueScanner([PROBE]).scan(tmp_path / "missing")


class _Cancelled(Exception):
    pass


@pytest.mark.parametrize("interrupt", [_Cancelled, KeyboardInterrupt, BrokenPipeError])
def test_a_scan_cut_short_never_hands_its_answer_to_the_next_scan(tmp_path: Path, interrupt: type) -> None:
    """A progress callback that raises (a Cancel button) or a KeyboardInterrupt stops waiting for
    the scan child mid-request. The next scan must get its own answer, not the stale one (which
    said 0 matches, and once produced a signed certificate over residue on disk)."""
    clean = tmp_path / "clean"
    clean.mkdir()
    for i in range(8):
        (clean / f"f{i}").write_bytes(os.urandom(1 << 20))
    dirty = tmp_path / "dirty"
    dirty.mkdir()
    probe = os.urandom(32)
    (dirty / "residue").write_bytes(os.urandom(1000) + probe + os.urandom(1000))

    def cancel(done: int, total: int) -> None:
        raise interrupt

    with pytest.raises(interrupt):
        scan_in_child([clean], [os.urandom(32)], cancel)
    result = scan_in_child([dirty], [probe])
    assert (result.matches, result.files, result.matched_files) == (1, 1, ("residue",))


def test_a_progress_callback_cannot_start_another_scan(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(os.urandom(4096))

    def nested(done: int, total: int) -> None:
        scan_in_child([tmp_path], [os.urandom(32)])

    with pytest.raises(StorageError, match="progress callback started another scan"):
        scan_in_child([tmp_path], [os.urandom(32)], nested)
    assert scan_in_child([tmp_path], [os.urandom(32)]).matches == 0  # and the next scan works
