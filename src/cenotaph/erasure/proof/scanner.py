"""The residue scanner: prove that no sampled byte string of erased data is left on disk.

After a forget and purge, cenotaph samples *probes* from what was removed (ciphertext windows,
wrapped-key bytes, plaintext canaries, float32 vector bytes) and scans every file it owns for them::

    >>> import tempfile
    >>> from pathlib import Path
    >>> scanner = ResidueScanner(text_probes("canary 7f3a9c21 erased"))
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = (Path(tmp) / "store.db").write_bytes(b"nothing to see here, only other rows")
    ...     result = scanner.scan(Path(tmp))
    >>> (result.files, result.matches, result.positive_control)
    (1, 0, True)

The result is evidence, not a boolean: how many files, bytes and probes were scanned, how many matches
were found (must be 0), and a positive control showing the same code path finds a probe planted across a
chunk boundary in a file outside the scanned tree.

How the search runs at close to disk speed: every probe is at least :data:`PROBE_MIN` bytes long, so an
occurrence of a probe of length ``L`` always contains the 8-byte gram that starts at some multiple of
``stride = min(L) - 7`` in the buffer. The scanner indexes each probe's grams at offsets ``0 .. stride-1``
and, per chunk, looks up only the grams at stride positions (a zero-copy strided numpy view, a hashed
bitmap, then an exact sorted lookup); every candidate is verified byte for byte. Where that filter
degenerates (zero pages against probes from sparse vectors) it skips positions deep inside runs of one
byte, which no probe can match; what still degenerates (other repetition) falls back to the C
Aho-Corasick automaton of ``pyahocorasick``: slow with many probes (tens of MB/s for 1000), but its
cost does not grow with the number of candidates. Both paths report the same matches.
"""

from __future__ import annotations

import builtins
import errno
import os
import secrets
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ahocorasick
import numpy as np
import numpy.typing as npt

from cenotaph.errors import InvalidValueError, StorageError

__all__ = ["CHUNK_SIZE", "PROBE_MIN", "ResidueScanner", "ScanResult", "probe_windows", "text_probes"]

PROBE_MIN = 16
"""Shortest probe accepted: a 16-byte match is residue, not chance."""

CHUNK_SIZE = 8 << 20
"""Bytes read from a file at a time."""

Progress = Callable[[int, int], None]
"""``progress(bytes_done, bytes_total)``, called after every chunk."""

_GRAM = 8  # bytes per indexed gram: one little-endian uint64
_HASH_MUL = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing of a gram into the bitmap
_VERIFY_BATCH = 1 << 15  # candidates verified per numpy gather, to bound memory

# open() flags: never follow a symlink swapped in after listing, never block on a FIFO.
_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)


def probe_windows(data: bytes, width: int = 32, count: int = 4) -> list[bytes]:
    """Sample ``count`` windows of ``width`` bytes spread evenly over ``data``, first and last included.

    >>> [w[:1] for w in probe_windows(bytes(range(100)), width=16, count=3)]
    [b'\\x00', b'*', b'T']

    Data shorter than ``width`` is one probe if it is at least :data:`PROBE_MIN` bytes, else none.
    Windows of one repeated byte (a run of zeros in a sparse vector) are left out: see :func:`_is_run`.
    """
    if width < PROBE_MIN:
        raise InvalidValueError(f"probe width must be at least {PROBE_MIN} bytes, got {width}")
    if count < 1:
        raise InvalidValueError(f"probe count must be at least 1, got {count}")
    if len(data) <= width:
        windows = [bytes(data)] if len(data) >= PROBE_MIN else []
    else:
        last = len(data) - width
        starts = sorted({i * last // (count - 1) for i in range(count)}) if count > 1 else [0]
        windows = [bytes(data[s : s + width]) for s in starts]
    return [window for window in windows if not _is_run(window)]


def text_probes(text: str) -> list[bytes]:
    """The forms a plaintext canary can take on disk: UTF-8, UTF-16-LE and hex of UTF-8 (lower and upper).

    Forms shorter than :data:`PROBE_MIN` bytes, or of one repeated byte, are left out.

    >>> [p[:6] for p in text_probes("canary-0123456789")]
    [b'canary', b'c\\x00a\\x00n\\x00', b'63616e', b'63616E']
    """
    utf8 = text.encode("utf-8")
    hexed = utf8.hex()
    forms = [utf8, text.encode("utf-16-le"), hexed.encode("ascii"), hexed.upper().encode("ascii")]
    return [form for form in dict.fromkeys(forms) if len(form) >= PROBE_MIN and not _is_run(form)]


def _is_run(probe: bytes) -> bool:
    """One byte repeated: such a probe matches every zeroed page and so proves nothing."""
    return probe.count(probe[:1]) == len(probe)


@dataclass(frozen=True)
class ScanResult:
    """Evidence from one residue scan. ``matched_files`` are paths relative to the scan root;
    ``matched_probes`` the probes found (never part of the evidence: they are erased bytes)."""

    files: int
    bytes: int
    probes: int
    matches: int
    positive_control: bool
    matched_files: tuple[str, ...]
    matched_probes: tuple[builtins.bytes, ...] = ()  # the field `bytes` shadows the type here

    def to_dict(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "bytes": self.bytes,
            "probes": self.probes,
            "matches": self.matches,
            "positive_control": self.positive_control,
            "matched_files": list(self.matched_files),
        }


class ResidueScanner:
    """Scan files for probes; see the module docstring for what a scan proves and how it runs."""

    def __init__(self, probes: Iterable[bytes], *, chunk_size: int = CHUNK_SIZE) -> None:
        unique = sorted({bytes(p) for p in probes})
        for probe in unique:
            if len(probe) < PROBE_MIN:
                raise InvalidValueError(
                    f"a probe is {len(probe)} bytes; probes must be at least {PROBE_MIN} bytes "
                    "so that a match means residue, not chance"
                )
            if _is_run(probe):
                raise InvalidValueError(
                    "a probe is one byte repeated; it would match any run such as a zeroed page, so it "
                    "proves nothing: sample probes from bytes that vary (probe_windows skips such windows)"
                )
        if chunk_size < 1:
            raise InvalidValueError(f"chunk_size must be positive, got {chunk_size}")
        self._probes = tuple(unique)
        self._chunk_size = chunk_size
        # Consecutive buffers overlap by this much, so a probe straddling a chunk boundary lies whole in one.
        self._overlap = max((len(p) for p in self._probes), default=1) - 1
        self._matcher = _Matcher(self._probes)

    @property
    def probe_count(self) -> int:
        return len(self._probes)

    def scan(self, root: Path, *, progress: Progress | None = None) -> ScanResult:
        """Scan every regular file under ``root`` (recursively, hidden ones too, no symlinks)."""
        root = Path(root).resolve()  # _list_files yields root-prefixed paths: never join them twice
        if not root.is_dir():
            raise InvalidValueError(
                f"scan root {root} is not a directory; pass the directory that holds the store's files"
            )
        return self.scan_files(_list_files(root), root, progress=progress)

    def scan_files(
        self, paths: Sequence[Path], root: Path, *, progress: Progress | None = None
    ) -> ScanResult:
        """Scan ``paths`` (absolute, or relative to ``root``); files that vanished are skipped."""
        root = Path(root)
        named = {_under_root(Path(p), root): Path(p) if Path(p).is_absolute() else root / p for p in paths}
        total = sum(_size(path) for path in named.values())
        done = 0

        def advance(n: int) -> None:
            nonlocal done
            done += n
            if progress is not None:
                progress(done, max(total, done))

        files = matches = 0
        matched: list[str] = []
        probes: set[int] = set()
        buf = self._new_buffer()
        for name, path in named.items():
            found = self._scan_path(path, name, buf, advance)
            if found is None:
                continue
            files += 1
            if found:
                matches += len(found)
                matched.append(name)
                probes.update(index for index, _ in found)
        if progress is not None and done != total:
            progress(done, done)
        return ScanResult(
            files=files,
            bytes=done,
            probes=len(self._probes),
            matches=matches,
            positive_control=self._positive_control(root, buf),
            matched_files=tuple(matched),
            matched_probes=tuple(self._probes[i] for i in sorted(probes)),
        )

    def _new_buffer(self) -> bytearray:
        return bytearray(self._overlap + self._chunk_size)

    def _scan_path(
        self, path: Path, name: str, buf: bytearray, advance: Callable[[int], None]
    ) -> list[tuple[int, int]] | None:
        """Matches in one file as ``(probe index, file offset)``; None if it is gone or not a regular file."""
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ELOOP):
                return None
            raise _unreadable(name, exc) from exc
        with os.fdopen(fd, "rb", buffering=0) as f:
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    return None
                return list(self._scan_stream(f, buf, advance))
            except OSError as exc:
                raise _unreadable(name, exc) from exc

    def _scan_stream(
        self, f: Any, buf: bytearray, advance: Callable[[int], None]
    ) -> Iterator[tuple[int, int]]:
        # A match counts only if it ends in the freshly read bytes: the carried-over ones were searched.
        view = memoryview(buf)
        kept = 0  # bytes carried over from the previous buffer
        base = 0  # file offset of buf[0]
        while n_read := f.readinto(view[kept : kept + self._chunk_size]):
            n = kept + n_read
            for probe, start in self._matcher.find(buf, n, fresh_from=kept):
                yield probe, base + start
            advance(n_read)
            keep = min(self._overlap, n)
            buf[:keep] = buf[n - keep : n]
            base += n - keep
            kept = keep

    def _positive_control(self, root: Path, buf: bytearray) -> bool:
        """Plant a probe across a chunk boundary in a random file outside ``root``; True if it is found."""
        scanner = (
            self if self._probes else ResidueScanner([secrets.token_bytes(32)], chunk_size=self._chunk_size)
        )
        index = max(range(len(scanner._probes)), key=lambda i: len(scanner._probes[i]))
        probe = scanner._probes[index]
        at = max(0, self._chunk_size - len(probe) // 2)
        # Raw PCG64 output: random filler at memory speed (this runs on every scan).
        data = np.random.default_rng().bit_generator.random_raw((at + 2 * len(probe)) // 8 + 1).view(np.uint8)
        data[at : at + len(probe)] = np.frombuffer(probe, dtype=np.uint8)
        with tempfile.TemporaryDirectory(prefix="cenotaph-control-", dir=_outside(root)) as tmp:
            path = Path(tmp) / "control.bin"
            path.write_bytes(data.data)
            found = scanner._scan_path(
                path,
                "the positive-control file",
                buf if scanner is self else scanner._new_buffer(),
                lambda n: None,
            )
        return found is not None and (index, at) in found


class _Matcher:
    """Finds every occurrence of every probe in a buffer; see the module docstring for the method."""

    def __init__(self, probes: tuple[bytes, ...]) -> None:
        self._probes = probes
        self._automaton: Any = None  # built on first fallback
        if not probes:
            return
        self._min_len = min(len(p) for p in probes)
        self._max_len = max(len(p) for p in probes)
        self._stride = self._min_len - _GRAM + 1
        grams, owners, offsets = [], [], []
        for index, probe in enumerate(probes):
            for off in range(self._stride):
                grams.append(int.from_bytes(probe[off : off + _GRAM], "little"))
                owners.append(index)
                offsets.append(off)
        order = np.argsort(np.array(grams, dtype=np.uint64), kind="stable")
        self._gram = np.array(grams, dtype=np.uint64)[order]
        self._owner = np.array(owners, dtype=np.int64)[order]
        self._offset = np.array(offsets, dtype=np.int64)[order]
        bits = min(26, max(16, (len(grams) * 64).bit_length()))
        self._shift = np.uint64(64 - bits)
        self._bitmap = np.zeros(1 << bits, dtype=np.bool_)
        self._bitmap[(self._gram * _HASH_MUL) >> self._shift] = True
        self._length = np.array([len(p) for p in probes], dtype=np.int64)
        # Probes grouped by length, as matrices, for vectorised verification.
        self._rows: dict[int, tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8]]] = {}
        for length in sorted(set(self._length.tolist())):
            members = [i for i, p in enumerate(probes) if len(p) == length]
            row_of = np.full(len(probes), -1, dtype=np.int64)
            row_of[members] = np.arange(len(members))
            matrix = np.frombuffer(b"".join(probes[i] for i in members), dtype=np.uint8)
            self._rows[length] = (row_of, matrix.reshape(len(members), length))

    def find(self, buf: bytearray, n: int, *, fresh_from: int) -> list[tuple[int, int]]:
        """``(probe index, start)`` of every occurrence in ``buf[:n]`` that ends after ``fresh_from``."""
        if not self._probes or n < self._min_len:
            return []
        stride = self._stride
        windows: npt.NDArray[np.uint64] = np.ndarray(
            ((n - _GRAM) // stride + 1,), dtype="<u8", buffer=buf, strides=(stride,)
        )
        slots = ((windows * _HASH_MUL) >> self._shift).view(np.int64)  # < 2**26, so the view is exact
        hit = np.flatnonzero(self._bitmap.take(slots))
        if hit.size == 0:
            return []
        grams = windows[hit]
        lo = np.searchsorted(self._gram, grams, side="left")
        count = np.searchsorted(self._gram, grams, side="right") - lo
        total = int(count.sum())
        if total == 0:
            return []
        limit = n // 8 + 4096
        if total > limit:
            # Degenerate chunk, usually zero pages against probes with zero grams: positions deep inside
            # a run of one byte cannot start a match (no probe is a run), so drop them first.
            data = np.frombuffer(buf, dtype=np.uint8, count=n)
            edge = self._near_run_edge(data, hit * stride)
            hit, lo, count = hit[edge], lo[edge], count[edge]
            total = int(count.sum())
            if total > limit:
                return self._find_with_automaton(buf, n, fresh_from)
        # One row per (stride position, indexed gram equal to it).
        entry = np.repeat(lo - (np.cumsum(count) - count), count) + np.arange(total)
        owner = self._owner[entry]
        start = np.repeat(hit * stride, count) - self._offset[entry]
        end = start + self._length[owner]
        keep = (start >= 0) & (end <= n) & (end > fresh_from)
        return self._verify(np.frombuffer(buf, dtype=np.uint8, count=n), owner[keep], start[keep])

    def _near_run_edge(self, data: npt.NDArray[np.uint8], at: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Whether the span of every match that could contain the gram at ``at`` crosses a byte change."""
        changes = np.flatnonzero(data[1:] != data[:-1]) + 1  # where a new run begins
        first = np.maximum(at - (self._stride - 1), 0)
        last = np.minimum(at + self._max_len - 1, data.size - 1)
        crosses: npt.NDArray[np.bool_] = np.searchsorted(changes, first, side="right") != np.searchsorted(
            changes, last, side="right"
        )
        return crosses

    def _verify(
        self, data: npt.NDArray[np.uint8], owner: npt.NDArray[np.int64], start: npt.NDArray[np.int64]
    ) -> list[tuple[int, int]]:
        found: list[tuple[int, int]] = []
        for length, (row_of, matrix) in self._rows.items():
            mine = np.flatnonzero(self._length[owner] == length)
            span = np.arange(length)
            for first in range(0, mine.size, _VERIFY_BATCH):
                batch = mine[first : first + _VERIFY_BATCH]
                window = data[start[batch, None] + span]
                equal = (window == matrix[row_of[owner[batch]]]).all(axis=1)
                found.extend(zip(owner[batch][equal].tolist(), start[batch][equal].tolist(), strict=True))
        return found

    def _find_with_automaton(self, buf: bytearray, n: int, fresh_from: int) -> list[tuple[int, int]]:
        if self._automaton is None:
            # pyahocorasick matches str; latin-1 maps each byte to one code point, losslessly.
            automaton = ahocorasick.Automaton(ahocorasick.STORE_INTS)
            for index, probe in enumerate(self._probes):
                automaton.add_word(probe.decode("latin-1"), index)
            automaton.make_automaton()
            self._automaton = automaton
        text = bytes(memoryview(buf)[:n]).decode("latin-1")
        lengths = self._length
        return [
            (index, last + 1 - int(lengths[index]))
            for last, index in self._automaton.iter(text)
            if last + 1 > fresh_from
        ]


def _list_files(root: Path) -> list[Path]:
    """Every regular file under ``root``; symlinks are neither followed nor listed."""
    files: list[Path] = []
    pending = [root]
    while pending:
        directory = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            continue  # removed while we walked
        except OSError as exc:
            raise _unreadable(directory.relative_to(root).as_posix() or ".", exc) from exc
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                pending.append(Path(entry.path))
            elif entry.is_file(follow_symlinks=False):
                files.append(Path(entry.path))
    return sorted(files)


def _under_root(path: Path, root: Path) -> str:
    full = path if path.is_absolute() else root / path
    try:
        return full.relative_to(root).as_posix()
    except ValueError:
        raise InvalidValueError(
            f"{path} is not under the scan root {root}; pass files inside the directory being scanned"
        ) from None


def _size(path: Path) -> int:
    try:
        return path.lstat().st_size
    except FileNotFoundError:
        return 0


def _outside(root: Path) -> str | None:
    """A directory for the positive-control file that is not inside ``root``."""
    base = Path(tempfile.gettempdir()).resolve()
    real_root = root.resolve()
    if base == real_root or real_root in base.parents:
        return str(real_root.parent)
    return None


def _unreadable(name: str, exc: OSError) -> StorageError:
    reason = exc.strerror or type(exc).__name__
    return StorageError(
        f"cannot read {name} for the residue scan ({reason}); make every file under the store "
        "directory readable by this process and run the scan again"
    )
