"""The search layer's building blocks: embedders, value_text, and the exact in-memory vector index."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cenotaph.errors import InvalidValueError
from cenotaph.index.embedder import (
    CallableEmbedder,
    Embedder,
    HashingEmbedder,
    SentenceTransformerEmbedder,
    value_text,
)
from cenotaph.index.vectors import VectorIndex

TEXTS = ["cardiology appointment", "heart doctor appointment", "grocery list bananas", "Straße 12, Köln"]


def unit_rows(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    x = rng.standard_normal((n, dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def brute_force(matrix: np.ndarray, ids: list[str], q: np.ndarray, k: int) -> list[str]:
    scores = matrix @ q
    return [ids[i] for i in np.argsort(-scores, kind="stable")[:k]]


# --- HashingEmbedder ---------------------------------------------------------------------------------------


def test_hashing_embedder_is_an_embedder_with_default_dim() -> None:
    emb = HashingEmbedder()
    assert isinstance(emb, Embedder)
    assert emb.dim == 384
    vecs = emb.embed(TEXTS)
    assert vecs.shape == (len(TEXTS), 384)
    assert vecs.dtype == np.float32


def test_hashing_embedder_is_deterministic_across_processes() -> None:
    here = HashingEmbedder().embed(TEXTS)
    code = (
        "import json, sys; from cenotaph.index.embedder import HashingEmbedder; "
        "print(HashingEmbedder().embed(json.loads(sys.argv[1])).tobytes().hex())"
    )
    for seed in ("1", "2"):  # a different str-hash salt in each child
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code, json.dumps(TEXTS)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        assert bytes.fromhex(out.stdout.strip()) == here.tobytes()


def test_hashing_embedder_ranks_shared_words_closer() -> None:
    query, near, far = HashingEmbedder().embed(
        ["cardiology appointment", "heart doctor appointment", "grocery list bananas"]
    )
    assert query @ near > query @ far
    assert query @ near > 0.2
    assert abs(query @ far) < 0.1


def test_hashing_embedder_character_trigrams_tolerate_inflection() -> None:
    base, inflected, other = HashingEmbedder().embed(["appointments", "appointment", "bananas"])
    assert base @ inflected > 0.15  # no word in common, only trigrams
    assert abs(base @ other) < 0.05


def test_hashing_embedder_rows_are_unit_norm_and_empty_text_is_zero() -> None:
    vecs = HashingEmbedder(dim=64).embed(["a", "hello world", "x " * 500, "", "  !!! ...  "])
    norms = np.linalg.norm(vecs, axis=1)
    np.testing.assert_allclose(norms[:3], 1.0, rtol=1e-5)
    assert not vecs[3:].any()


def test_hashing_embedder_is_case_and_unicode_insensitive() -> None:
    emb = HashingEmbedder()
    a, b, c, d = emb.embed(["Hello, World!", "hello world", "STRASSE", "straße"])
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(c, d)
    composed, decomposed = emb.embed(["caf\u00e9", "cafe\u0301"])
    np.testing.assert_array_equal(composed, decomposed)


def test_hashing_embedder_batch_and_cache_do_not_change_vectors() -> None:
    emb = HashingEmbedder()
    texts = [f"note {i} about topic {i % 7} and more" for i in range(5000)]  # spans several chunks
    batch = emb.embed(texts)
    emb.clear_cache()
    one_by_one = np.vstack([emb.embed([t]) for t in texts[:50]] + [emb.embed(texts[50:])])
    np.testing.assert_array_equal(batch, one_by_one)
    assert emb.embed([]).shape == (0, 384)


def test_hashing_embedder_sublinear_term_frequency() -> None:
    emb = HashingEmbedder()
    once, thrice = emb.embed(["apple banana", "apple apple apple banana"])
    assert 0.8 < once @ thrice < 1.0


def test_hashing_embedder_rejects_bad_input() -> None:
    with pytest.raises(InvalidValueError):
        HashingEmbedder(dim=0)
    with pytest.raises(InvalidValueError, match="strings"):
        HashingEmbedder().embed(["ok", 3])  # type: ignore[list-item]


# --- CallableEmbedder --------------------------------------------------------------------------------------


def test_callable_embedder_normalises() -> None:
    emb = CallableEmbedder(lambda texts: [[3.0, 4.0] if t else [0.0, 0.0] for t in texts], dim=2)
    vecs = emb.embed(["x", ""])
    np.testing.assert_allclose(vecs, [[0.6, 0.8], [0.0, 0.0]], rtol=1e-6)
    assert vecs.dtype == np.float32


@pytest.mark.parametrize(
    ("output", "match"),
    [
        ([[1.0, 0.0, 0.0]], "shape"),  # one row for two texts
        ([[1.0, 0.0], [1.0, 0.0]], "shape"),  # wrong dim
        ([[1.0, 0.0, 0.0], [1.0, 0.0]], "ragged"),
        ([[1.0, "x", 0.0], [1.0, 0.0, 0.0]], "ragged|non-numeric"),
        ([[1.0, float("nan"), 0.0], [1.0, 0.0, 0.0]], "NaN"),
    ],
)
def test_callable_embedder_validates_output(output: list[list[object]], match: str) -> None:
    emb = CallableEmbedder(lambda texts: output, dim=3)  # type: ignore[arg-type,return-value]
    with pytest.raises(InvalidValueError, match=match):
        emb.embed(["a", "b"])


def test_callable_embedder_skips_the_call_for_no_texts() -> None:
    calls: list[object] = []
    emb = CallableEmbedder(lambda texts: calls.append(texts) or [], dim=5)  # type: ignore[func-returns-value]
    assert emb.embed([]).shape == (0, 5)
    assert calls == []


# --- SentenceTransformerEmbedder ---------------------------------------------------------------------------


def test_sentence_transformer_embedder_without_the_package_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # makes the import fail
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    with pytest.raises(InvalidValueError, match="pip install sentence-transformers"):
        SentenceTransformerEmbedder("/models/all-MiniLM-L6-v2")
    assert os.environ["HF_HUB_OFFLINE"] == "1"


# --- value_text --------------------------------------------------------------------------------------------


def test_value_text_strings_are_kept_as_they_are() -> None:
    assert value_text("  Heart doctor, Tuesday ") == "  Heart doctor, Tuesday "


def test_value_text_joins_keys_and_leaves_in_a_deterministic_order() -> None:
    value = {"title": "visit", "tags": ["heart", 3, 2.5, True, None], "meta": {"b": False, "a": "x"}}
    reordered = {"meta": {"a": "x", "b": False}, "tags": ["heart", 3, 2.5, True, None], "title": "visit"}
    assert value_text(value) == "meta a x b false tags heart 3 2.5 true title visit"
    assert value_text(reordered) == value_text(value)
    assert value_text([1, [2, [3]]]) == "1 2 3"
    assert value_text(None) == ""
    assert value_text(False) == "false"


def test_value_text_handles_deep_nesting_and_rejects_non_json() -> None:
    deep: object = "bottom"
    for _ in range(5000):
        deep = [deep]
    assert value_text(deep) == "bottom"
    with pytest.raises(InvalidValueError, match="JSON"):
        value_text({"when": object()})


# --- VectorIndex -------------------------------------------------------------------------------------------


@pytest.fixture
def filled() -> tuple[VectorIndex, np.ndarray, list[str]]:
    rng = np.random.default_rng(7)
    vectors = unit_rows(rng, 2000, 32)
    ids = [f"m{i}" for i in range(len(vectors))]
    index = VectorIndex(32)
    index.add(ids, vectors)
    return index, vectors, ids


def test_search_is_exact_top_k(filled: tuple[VectorIndex, np.ndarray, list[str]]) -> None:
    index, vectors, ids = filled
    rng = np.random.default_rng(8)
    for q in unit_rows(rng, 25, 32):
        hits = index.search(q, 10)
        assert [h[0] for h in hits] == brute_force(vectors, ids, q, 10)
        expected = np.sort(vectors @ q)[::-1][:10]
        np.testing.assert_allclose([h[1] for h in hits], expected, rtol=1e-5)


def test_search_normalises_query_and_vectors() -> None:
    index = VectorIndex(2)
    index.add(["a", "b"], np.array([[10.0, 0.0], [0.0, 0.5]]))
    hits = index.search(np.array([3.0, 3.0]), 2)
    assert [h[0] for h in hits] == ["a", "b"]
    np.testing.assert_allclose([h[1] for h in hits], [2**-0.5, 2**-0.5], rtol=1e-6)


def test_remove_makes_id_unfindable_and_erases_its_bytes(
    filled: tuple[VectorIndex, np.ndarray, list[str]],
) -> None:
    index, vectors, ids = filled
    victim = ids[123]
    stored = index._matrix[123].tobytes()
    assert stored in index._matrix.tobytes()
    assert index.remove([victim, "no-such-id"]) == 1
    assert victim not in index
    assert len(index) == len(ids) - 1
    assert stored not in index._matrix.tobytes()
    assert victim not in [h[0] for h in index.search(vectors[123], len(ids))]
    assert index.remove([victim]) == 0


def test_remove_keeps_the_matrix_dense_and_spare_rows_zero() -> None:
    rng = np.random.default_rng(1)
    vectors = unit_rows(rng, 500, 8)
    ids = [str(i) for i in range(500)]
    index = VectorIndex(8)
    index.add(ids, vectors)
    removed = ids[::3]
    assert index.remove(removed) == len(removed)
    kept = [i for i in ids if i not in set(removed)]
    assert len(index) == len(kept)
    assert not index._matrix[len(index) :].any()
    live = index._matrix[: len(index)]
    assert (np.linalg.norm(live, axis=1) > 0.99).all()  # no hole among the live rows
    q = vectors[1]
    kept_matrix = np.array([vectors[int(i)] for i in kept])
    hits = index.search(q, 20)
    assert [h[0] for h in hits] == brute_force(kept_matrix, kept, q, 20)
    for i in removed:
        assert vectors[int(i)].tobytes() not in index._matrix.tobytes()


def test_add_replaces_an_existing_id_in_place() -> None:
    first, second, replacement = unit_rows(np.random.default_rng(11), 3, 8)
    index = VectorIndex(8)
    index.add(["a", "b"], np.vstack([first, second]))
    old = index._matrix[0].tobytes()
    index.add(["a"], replacement[np.newaxis, :])
    assert len(index) == 2
    assert old not in index._matrix.tobytes()
    assert index.search(replacement, 1)[0][0] == "a"
    assert index.search(first, 2)[0][1] < 0.99


def test_add_with_a_repeated_id_keeps_its_last_vector() -> None:
    index = VectorIndex(2)
    index.add(["a", "b", "a"], np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]], dtype=np.float32))
    assert len(index) == 2
    np.testing.assert_array_equal(index._matrix[0], [0.0, 1.0])
    assert [h[0] for h in index.search(np.array([0.0, 1.0]), 2)] == ["a", "b"]


def test_candidates_restrict_the_search(filled: tuple[VectorIndex, np.ndarray, list[str]]) -> None:
    index, vectors, ids = filled
    allowed = ids[::7]
    subset = vectors[::7]
    q = unit_rows(np.random.default_rng(3), 1, 32)[0]
    hits = index.search(q, 5, candidates=[*allowed, "unknown"])
    assert [h[0] for h in hits] == brute_force(subset, allowed, q, 5)
    assert index.search(q, 5, candidates=[]) == []
    assert [h[0] for h in index.search(q, 5, candidates={"m3"})] == ["m3"]


def test_allow_is_called_lazily_in_score_order_and_still_fills_k(
    filled: tuple[VectorIndex, np.ndarray, list[str]],
) -> None:
    index, vectors, ids = filled
    q = unit_rows(np.random.default_rng(4), 1, 32)[0]
    ranked = brute_force(vectors, ids, q, len(ids))
    rejected = set(ranked[:3]) | set(ranked[4:30])
    asked: list[str] = []

    def allow(id_: str) -> bool:
        asked.append(id_)
        return id_ not in rejected

    hits = index.search(q, 5, allow=allow)
    expected = [i for i in ranked if i not in rejected][:5]
    assert [h[0] for h in hits] == expected
    assert asked == ranked[: ranked.index(expected[-1]) + 1]  # no id asked twice, none past the k-th pass


def test_allow_with_candidates_and_too_few_passing(filled: tuple[VectorIndex, np.ndarray, list[str]]) -> None:
    index, _, ids = filled
    q = unit_rows(np.random.default_rng(5), 1, 32)[0]
    hits = index.search(q, 10, candidates=ids[:50], allow=lambda i: i in {"m1", "m2", "m3"})
    assert sorted(h[0] for h in hits) == ["m1", "m2", "m3"]
    assert index.search(q, 10, allow=lambda i: False) == []


def test_allow_may_call_back_into_the_index(filled: tuple[VectorIndex, np.ndarray, list[str]]) -> None:
    index, _, _ = filled
    q = unit_rows(np.random.default_rng(6), 1, 32)[0]
    hits = index.search(q, 3, allow=lambda i: index.remove([i]) == 0 or True)  # a recheck that purges
    assert len(hits) == 3
    assert all(h[0] not in index for h in hits)


def test_k_larger_than_the_index_and_edge_cases() -> None:
    index = VectorIndex(3)
    q = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    assert index.search(q, 5) == []
    index.add(["a", "b"], np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=np.float32))
    assert [h[0] for h in index.search(q, 50)] == ["a", "b"]
    assert index.search(q, 0) == []
    with pytest.raises(InvalidValueError):
        index.search(q, -1)
    with pytest.raises(InvalidValueError, match="shape"):
        index.search(np.ones(4, dtype=np.float32), 1)
    with pytest.raises(InvalidValueError, match="shape"):
        index.add(["c"], np.ones((1, 4), dtype=np.float32))
    with pytest.raises(InvalidValueError, match="NaN"):
        index.add(["c"], np.array([[np.nan, 0.0, 0.0]]))
    with pytest.raises(InvalidValueError):
        index.remove("a")
    assert len(index) == 2


def test_growth_is_geometric_and_old_buffers_are_zeroed() -> None:
    rng = np.random.default_rng(2)
    vectors = unit_rows(rng, 3000, 16)
    index = VectorIndex(16)
    buffers: list[np.ndarray] = []
    for i, v in enumerate(vectors):
        if not buffers or buffers[-1] is not index._matrix:
            buffers.append(index._matrix)
        index.add([str(i)], v[np.newaxis, :])
    assert len(buffers) <= 8  # 64 -> 4096 by doubling
    for old in buffers[:-1]:
        assert not old.any()
    assert not index._matrix[len(index) :].any()
    index.remove([str(i) for i in range(2900)])  # shrinking zeroes the outgrown buffer too
    assert buffers[-1] is not index._matrix and not buffers[-1].any()
    assert len(index) == 100


def test_clear_zeroes_the_buffer() -> None:
    index = VectorIndex(4)
    index.add(["a", "b"], np.ones((2, 4), dtype=np.float32))
    buffer = index._matrix
    index.clear()
    assert len(index) == 0 and "a" not in index
    assert not buffer.any()
    assert index.search(np.ones(4, dtype=np.float32), 3) == []


def test_concurrent_add_remove_search_stay_consistent() -> None:
    dim = 16
    index = VectorIndex(dim)
    rng = np.random.default_rng(9)
    vectors = unit_rows(rng, 4000, dim)
    errors: list[BaseException] = []

    def writer(offset: int) -> None:
        try:
            for i in range(offset, offset + 1000):
                index.add([f"v{i}"], vectors[i : i + 1])
                if i % 3 == 0:
                    index.remove([f"v{i}"])
        except BaseException as exc:
            errors.append(exc)

    def reader() -> None:
        try:
            for q in vectors[:200]:
                for id_, score in index.search(q, 5):
                    assert -1.01 <= score <= 1.01 and id_.startswith("v")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(o,)) for o in (0, 1000, 2000)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    expected = {f"v{i}" for i in range(3000) if i % 3}
    assert len(index) == len(expected) and all(i in index for i in expected)
    for id_ in expected:
        row = index._rows[id_]
        np.testing.assert_allclose(index._matrix[row], vectors[int(id_[1:])], rtol=1e-6)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["add", "remove"]), st.lists(st.integers(0, 30), min_size=1, max_size=8)),
        max_size=40,
    )
)
def test_index_matches_a_dict_model(ops: list[tuple[str, list[int]]]) -> None:
    dim = 4
    rng = np.random.default_rng(0)
    index = VectorIndex(dim)
    model: dict[str, np.ndarray] = {}
    for op, keys in ops:
        ids = [f"k{k}" for k in keys]
        if op == "add":
            vecs = unit_rows(rng, len(ids), dim)
            index.add(ids, vecs)
            model.update(zip(ids, vecs, strict=True))
        else:
            assert index.remove(ids) == len(set(ids) & model.keys())
            for id_ in ids:
                model.pop(id_, None)
        assert len(index) == len(model)
        assert not index._matrix[len(index) :].any()
        for id_, vec in model.items():
            np.testing.assert_allclose(index._matrix[index._rows[id_]], vec, rtol=1e-5, atol=1e-7)
