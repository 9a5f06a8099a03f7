"""Turning memories into vectors: the Embedder protocol, a default offline embedder, and adapters.

    >>> emb = HashingEmbedder()
    >>> vecs = emb.embed(["cardiology appointment", "heart doctor appointment"])
    >>> vecs.shape, vecs.dtype.name
    ((2, 384), 'float32')

Every embedder returns float32 rows of unit L2 norm (an all-zero row, e.g. for empty text, stays zero), so a
dot product is the cosine similarity. None of them ever downloads anything.

Two optional attributes tell the store more about an embedder:

- ``embedder_id`` (a string naming the model and everything that changes its vectors): with it, the
  store keeps each record's vector at rest, sealed under that record's keys, so a restart does not
  re-embed; an embedder without one is re-run over every record after each open. Vectors stored under
  another id are never used.
- ``min_score`` (a float): the relevance floor. A hit scoring at or below it shares nothing with the query
  but noise, and is left out. Embedders without one get :data:`DEFAULT_MIN_SCORE`.

What is embedded for a record is :func:`memory_text`: its key, its metadata and its value.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import math
import os
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from cenotaph.errors import InvalidValueError

__all__ = [
    "CallableEmbedder",
    "DEFAULT_DIM",
    "DEFAULT_MIN_SCORE",
    "Embedder",
    "HASHING_MIN_SCORE",
    "HashingEmbedder",
    "SentenceTransformerEmbedder",
    "embedder_id",
    "l2_normalise",
    "memory_text",
    "min_score",
    "value_text",
]

DEFAULT_DIM = 384
DEFAULT_MIN_SCORE = 0.0  # a hit must score above it: anything with no similarity at all is noise
# The hashing embedder's floor: a hit must score above it. Two texts that share no word still score a few
# hundredths either side of 0 through hash collisions (384 columns for ~100 features a memory); the floor
# removes that near-zero band. Measured on bench/data/agent_memories.json (bench/bench_recall.py): half of
# the (query, unrelated memory) pairs score at most 0.01 and 77% at most 0.05, while a memory sharing a word
# with a short query usually scores 0.15-0.45. A higher floor would drop more noise but also real one-word
# matches whose score a collision pulled down (recall@10 0.68 at 0.05, 0.63 at 0.1, 0.50 at 0.15).
HASHING_MIN_SCORE = 0.05
_HASHING_ID = "cenotaph-hashing/2"  # bump whenever the features or weights change: vectors at rest then miss

# Words are runs of letters and digits: "_" separates them too (favourite_food -> favourite, food).
_TOKEN_RE = re.compile(r"[^\W_]+")
_CAMEL_RE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# Relative weights of the three feature kinds. A word's character trigrams together weigh _TRIGRAM_WEIGHT
# (in L2 norm) whatever the word's length: they add typo and inflection tolerance without drowning the words.
_UNIGRAM_WEIGHT = 1.0
_BIGRAM_WEIGHT = 0.7
_TRIGRAM_WEIGHT = 0.5
# Texts are embedded in chunks so the dense accumulation buffer stays small (chunk x dim float64).
_CHUNK = 4096
_HASH_PERSON = b"cenotaph-hash1"  # domain separation; changing it changes every vector
_ONE = np.uint64(1)
_BIGRAM_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)  # odd: makes (a, b) and (b, a) hash apart


@runtime_checkable
class Embedder(Protocol):
    """Anything that maps texts to unit-norm float32 vectors of a fixed dimension."""

    @property
    def dim(self) -> int:
        """The length of every vector :meth:`embed` returns."""
        ...

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Return a ``(len(texts), dim)`` float32 array whose rows have L2 norm 1 (or are all zero)."""
        ...


def embedder_id(embedder: Embedder) -> str | None:
    """The embedder's ``embedder_id`` and dimension as one string, or None if it names no model (its vectors
    are then never kept at rest)."""
    ident = getattr(embedder, "embedder_id", None)
    if not isinstance(ident, str) or not ident:
        return None
    return f"{ident}#dim={embedder.dim}"


def min_score(embedder: Embedder) -> float:
    """The embedder's relevance floor (``min_score``), or :data:`DEFAULT_MIN_SCORE`."""
    floor = getattr(embedder, "min_score", None)
    if isinstance(floor, bool) or not isinstance(floor, int | float) or not math.isfinite(floor):
        return DEFAULT_MIN_SCORE
    return float(floor)


def l2_normalise(matrix: ArrayLike) -> NDArray[np.float32]:
    """Return ``matrix`` as float32 with each row scaled to unit L2 norm; all-zero rows stay zero."""
    out = np.array(matrix, dtype=np.float32, copy=True)
    if out.size:
        # einsum, not linalg.norm: no full-size temporary copy of (squared) personal data is left behind.
        norms = np.sqrt(np.einsum("ij,ij->i", out, out))[:, np.newaxis]
        np.divide(out, norms, out=out, where=norms > 0)
    return out


def _as_embedding_matrix(raw: object, n: int, dim: int, source: str) -> NDArray[np.float32]:
    """Validate an embedding model's output (shape, finiteness) and normalise its rows."""
    try:
        matrix = np.asarray(raw, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise InvalidValueError(
            f"{source} must return one sequence of {dim} numbers per text; "
            "got something ragged or non-numeric: check the embedding function"
        ) from exc
    if matrix.shape != (n, dim):
        raise InvalidValueError(
            f"{source} returned an array of shape {matrix.shape} for {n} texts; expected ({n}, {dim}): "
            "check the embedder's dim"
        )
    if not np.isfinite(matrix).all():
        raise InvalidValueError(f"{source} returned NaN or infinite values; check the embedding model")
    return l2_normalise(matrix)


def _feature_hash(feature: str) -> int:
    """A 64-bit hash that is the same in every process (unlike the salted built-in ``hash``)."""
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8, person=_HASH_PERSON).digest()
    return int.from_bytes(digest, "little")


class _WordEntry(NamedTuple):
    """What a word contributes, computed once: its unigram hash and its trigram columns and values."""

    hash: int
    trigram_cols: NDArray[np.int64]
    trigram_vals: NDArray[np.float64]


def _word_entry(word: str, dim: int) -> _WordEntry:
    marked = f"<{word}>"
    trigrams = {marked[i : i + 3] for i in range(len(marked) - 2)}  # distinct: "xxxxxx" is one trigram
    hashes = np.array([_feature_hash("c:" + t) for t in sorted(trigrams)], dtype=np.uint64)
    cols, signs = _signed_columns(hashes, 1.0, dim)
    unique, where = np.unique(cols, return_inverse=True)  # trigrams sharing a column add up there
    vals = np.bincount(where, weights=signs, minlength=len(unique)).astype(np.float64)
    norm = math.sqrt(float(vals @ vals))
    if norm > 0:
        vals *= _TRIGRAM_WEIGHT / norm  # the block weighs _TRIGRAM_WEIGHT whatever the word's length
    return _WordEntry(_feature_hash("w:" + word), unique.astype(np.int64), vals)


def _signed_columns(
    hashes: NDArray[np.uint64], weights: float | NDArray[np.float64], dim: int
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Feature hashing: each 64-bit hash gives a column in ``[0, dim)`` (high bits) and a sign (low bit)."""
    cols = ((hashes >> _ONE) % np.uint64(dim)).astype(np.int64)
    signs = np.where(hashes & _ONE, 1.0, -1.0)
    return cols, signs * weights


def _mix64(x: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """The splitmix64 finaliser (wrapping uint64 arithmetic): combines two word hashes into a bigram hash."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _count_pairs(
    rows: NDArray[np.int64], keys: NDArray[np.int64], base: int
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float64]]:
    """Distinct ``(row, key)`` pairs (``0 <= key < base``) with their sublinear term frequency."""
    if len(rows) and (int(rows.max()) + 1) * base >= 1 << 63:  # the packed key would overflow int64
        pairs, counts = np.unique(np.stack([rows, keys], axis=1), axis=0, return_counts=True)
        return pairs[:, 0], pairs[:, 1], 1.0 + np.log(counts)
    unique, counts = np.unique(rows * base + keys, return_counts=True)
    return unique // base, unique % base, 1.0 + np.log(counts)


def _tokens(text: str) -> list[str]:
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
    return _TOKEN_RE.findall(text.casefold())


class HashingEmbedder:
    """The default embedder: lexical feature hashing, offline, deterministic across processes and machines.

        >>> emb = HashingEmbedder(dim=64)
        >>> bool((emb.embed(["Hello world"]) == HashingEmbedder(dim=64).embed(["hello, WORLD!"])).all())
        True

    Features are lower-cased unicode word unigrams, word bigrams and character trigrams of each word
    (weighted less), each hashed to a signed column with BLAKE2b; term frequencies are damped as
    ``1 + ln(tf)``. Similarity is lexical (shared words and word pieces), not semantic; plug in a model
    through :class:`CallableEmbedder` or :class:`SentenceTransformerEmbedder` for meaning.

    Per-word features are memoised in an LRU cache owned by the instance; the cached keys are words from
    embedded texts, so :meth:`clear_cache` drops them (e.g. after a forget).

    ``min_score`` (default :data:`HASHING_MIN_SCORE`) is the relevance floor the store applies to its hits:
    scores at or below it are in the near-zero band that hash collisions alone produce.
    """

    def __init__(
        self, dim: int = DEFAULT_DIM, *, cache_size: int = 1 << 16, min_score: float = HASHING_MIN_SCORE
    ) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise InvalidValueError(f"dim must be a positive integer, got {dim!r}")
        self._dim = dim
        self._min_score = _check_floor(min_score)
        self._word_cache = functools.lru_cache(maxsize=cache_size)(functools.partial(_word_entry, dim=dim))

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def embedder_id(self) -> str:
        return _HASHING_ID

    @property
    def min_score(self) -> float:
        return self._min_score

    def clear_cache(self) -> None:
        """Forget every memoised word (the cache keys are text from embedded memories)."""
        self._word_cache.cache_clear()

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for start in range(0, len(texts), _CHUNK):
            chunk = texts[start : start + _CHUNK]
            out[start : start + len(chunk)] = self._embed_chunk(chunk)
        return out

    def _embed_chunk(self, texts: Sequence[str]) -> NDArray[np.float32]:
        # The only per-word Python work: tokenising and numbering the chunk's distinct words.
        vocab: dict[str, int] = {}
        word_ids: list[int] = []
        lengths: list[int] = []
        for text in texts:
            if not isinstance(text, str):
                raise InvalidValueError(f"embed() takes strings, got {type(text).__name__}")
            words = _tokens(text)
            lengths.append(len(words))
            word_ids.extend([vocab.setdefault(word, len(vocab)) for word in words])
        n, dim = len(texts), self._dim
        if not word_ids:
            return np.zeros((n, dim), dtype=np.float32)
        entries = [self._word_cache(word) for word in vocab]  # in id order: dicts keep insertion order
        rows = np.repeat(np.arange(n, dtype=np.int64), lengths)
        wids = np.asarray(word_ids, dtype=np.int64)
        word_hashes = np.fromiter((e.hash for e in entries), dtype=np.uint64, count=len(entries))

        u_rows, u_wids, u_tf = _count_pairs(rows, wids, len(vocab))
        uni_cols, uni_vals = _signed_columns(word_hashes[u_wids], u_tf * _UNIGRAM_WEIGHT, dim)
        bi_rows, bi_cols, bi_vals = self._bigrams(rows, wids, word_hashes)
        tri_rows, tri_cols, tri_vals = self._trigrams(entries, u_rows, u_wids, u_tf)

        flat = np.concatenate([u_rows * dim + uni_cols, bi_rows * dim + bi_cols, tri_rows * dim + tri_cols])
        dense = np.bincount(flat, weights=np.concatenate([uni_vals, bi_vals, tri_vals]), minlength=n * dim)
        return l2_normalise(dense.reshape(n, dim))

    def _bigrams(
        self, rows: NDArray[np.int64], wids: NDArray[np.int64], word_hashes: NDArray[np.uint64]
    ) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float64]]:
        """Adjacent word pairs within a text; a pair's hash is mixed from its two word hashes."""
        same_text = rows[1:] == rows[:-1]
        left, right = wids[:-1][same_text], wids[1:][same_text]
        base = len(word_hashes)
        b_rows, pairs, tf = _count_pairs(rows[1:][same_text], left * base + right, base * base)
        hashes = _mix64(word_hashes[pairs // base] * _BIGRAM_MULTIPLIER ^ word_hashes[pairs % base])
        return (b_rows, *_signed_columns(hashes, tf * _BIGRAM_WEIGHT, self._dim))

    @staticmethod
    def _trigrams(
        entries: list[_WordEntry],
        u_rows: NDArray[np.int64],
        u_wids: NDArray[np.int64],
        u_tf: NDArray[np.float64],
    ) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float64]]:
        """Each distinct (text, word) pair's trigram block, scaled by the word's term frequency."""
        block_len = np.fromiter((len(e.trigram_cols) for e in entries), dtype=np.int64, count=len(entries))
        block_start = np.cumsum(block_len) - block_len
        all_cols = np.concatenate([e.trigram_cols for e in entries])
        all_vals = np.concatenate([e.trigram_vals for e in entries])
        lengths = block_len[u_wids]
        # Gather positions: for pair j, block_start[u_wids[j]] + 0 .. lengths[j]-1, without a Python loop.
        out_start = np.cumsum(lengths) - lengths
        take = np.repeat(block_start[u_wids] - out_start, lengths) + np.arange(int(lengths.sum()))
        return np.repeat(u_rows, lengths), all_cols[take], all_vals[take] * np.repeat(u_tf, lengths)


class CallableEmbedder:
    """Wrap any function from texts to vectors; its output is checked for shape and normalised.

    >>> emb = CallableEmbedder(lambda texts: [[float(len(t)), 1.0] for t in texts], dim=2)
    >>> [round(float(x), 3) for x in emb.embed(["abc"])[0]]
    [0.949, 0.316]

    ``embedder_id`` names the model behind ``fn`` (and its version): give one and the store keeps vectors
    at rest instead of re-embedding every record after each open; change it whenever ``fn`` changes.
    ``min_score`` is the relevance floor for its hits (default :data:`DEFAULT_MIN_SCORE`).
    """

    def __init__(
        self,
        fn: Callable[[Sequence[str]], Sequence[Sequence[float]]],
        dim: int,
        *,
        embedder_id: str | None = None,
        min_score: float = DEFAULT_MIN_SCORE,
    ) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise InvalidValueError(f"dim must be a positive integer, got {dim!r}")
        if not callable(fn):
            raise InvalidValueError("CallableEmbedder needs a callable taking a list of texts")
        self._fn = fn
        self._dim = dim
        self.embedder_id = _check_id(embedder_id)
        self.min_score = _check_floor(min_score)

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        return _as_embedding_matrix(self._fn(list(texts)), len(texts), self._dim, "the embedding function")


class SentenceTransformerEmbedder:
    """A sentence-transformers model that is already on disk; it is never downloaded.

    Needs ``pip install sentence-transformers``. ``model_name_or_path`` is a local directory or the name of a
    model already in the Hugging Face cache. Hub access is switched off (``HF_HUB_OFFLINE=1``,
    ``local_files_only``). Vectors are kept at rest only if ``embedder_id`` names the model (the path alone
    does not say whether its files changed). For the bundled all-MiniLM-L6-v2 without torch, see
    :class:`cenotaph.index.minilm.SentenceEmbedder`.
    """

    def __init__(
        self,
        model_name_or_path: str,
        *,
        device: str | None = None,
        batch_size: int = 64,
        embedder_id: str | None = None,
        min_score: float = DEFAULT_MIN_SCORE,
    ) -> None:
        self.embedder_id = _check_id(embedder_id)
        self.min_score = _check_floor(min_score)
        # Set before the import: huggingface_hub reads these once, when it is first imported.
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        try:
            module = importlib.import_module("sentence_transformers")
        except ImportError as exc:
            raise InvalidValueError(
                "SentenceTransformerEmbedder needs the sentence-transformers package: "
                "pip install sentence-transformers (or use the default HashingEmbedder)"
            ) from exc
        try:
            self._model: Any = module.SentenceTransformer(
                model_name_or_path, device=device, local_files_only=True
            )
        except (OSError, ValueError) as exc:
            raise InvalidValueError(
                f"no sentence-transformers model {model_name_or_path!r} on disk; cenotaph never downloads "
                "models: fetch it once yourself and pass its local path"
            ) from exc
        dim = self._model.get_sentence_embedding_dimension()
        if not isinstance(dim, int) or dim < 1:
            raise InvalidValueError(
                f"model {model_name_or_path!r} does not report a fixed embedding dimension"
            )
        self._dim = dim
        self._batch_size = batch_size

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        raw = self._model.encode(
            list(texts),
            batch_size=self._batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return _as_embedding_matrix(raw, len(texts), self._dim, "the sentence-transformers model")


def _check_id(ident: object) -> str | None:
    if ident is not None and (not isinstance(ident, str) or not ident.strip() or len(ident) > 200):
        raise InvalidValueError("embedder_id must be a non-empty string of at most 200 characters, or None")
    return ident


def _check_floor(floor: object) -> float:
    if isinstance(floor, bool) or not isinstance(floor, int | float) or not -1.0 <= floor < 1.0:
        raise InvalidValueError(f"min_score must be a number in [-1, 1), got {floor!r}")
    return float(floor)


def memory_text(key: str, value: object, metadata: Mapping[str, object] | None = None) -> str:
    r"""The text embedded for a record: its key as words, its metadata, then its value (:func:`value_text`).

        >>> memory_text("favouriteFood", "lentil soup", {"topic": "diet"})
        'favourite Food\ntopic diet\nlentil soup'

    A key is an identifier more often than prose, so ``_``, ``-``, ``.``, ``/``, ``:`` and camelCase
    boundaries separate its words. Empty parts are left out.
    """
    words = _CAMEL_RE.sub(" ", key)
    for sep in "_-./:":
        words = words.replace(sep, " ")
    parts = (" ".join(words.split()), value_text(metadata) if metadata else "", value_text(value))
    return "\n".join(part for part in parts if part)


def value_text(value: object) -> str:
    """The text embedded for a JSON value.

        >>> value_text({"b": [1, True], "a": "note", "c": None})
        'a note b 1 true c'

    Strings are returned as they are. For objects and arrays, the keys and the scalar leaves are joined by
    spaces, depth first, object keys in sorted order (so equal values give equal text); numbers and booleans
    appear as JSON text, ``null`` as nothing.
    """
    if isinstance(value, str):
        return value
    parts: list[str] = []
    stack: list[object] = [value]  # iterative: deeply nested values must not hit the recursion limit
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            parts.append(item)
        elif item is None:
            continue
        elif isinstance(item, bool):
            parts.append("true" if item else "false")
        elif isinstance(item, int | float):
            parts.append(repr(item))
        elif isinstance(item, Mapping):
            for key in sorted(item, key=str, reverse=True):
                stack.append(item[key])
                stack.append(str(key))
        elif isinstance(item, list | tuple):
            stack.extend(reversed(item))
        else:
            raise InvalidValueError(f"value_text() takes JSON values, got {type(item).__name__}")
    return " ".join(part for part in parts if part)
