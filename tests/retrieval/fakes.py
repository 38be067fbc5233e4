"""A deterministic in-memory retriever for server and client tests (no model, no index)."""

from __future__ import annotations

import threading
import time

from retrieval.base import Document, SearchResult


class KeywordRetriever:
    """Ranks a fixed corpus by the number of query words in each document (ties by id).

    Args:
        documents: the corpus.
        delay: seconds each ``batch_search`` call sleeps (to make batching observable).
    """

    def __init__(self, documents, delay=0.0):
        self.documents = list(documents)
        self.delay = delay
        self.calls = []
        self._lock = threading.Lock()

    def __len__(self):
        return len(self.documents)

    def search(self, query, k):
        return self.batch_search([query], k)[0]

    def batch_search(self, queries, k):
        with self._lock:
            self.calls.append(len(queries))
        if self.delay:
            time.sleep(self.delay)
        results = []
        for query in queries:
            words = set(query.lower().split())
            scored = sorted(
                (
                    (sum(w in doc.contents.lower().split() for w in words), doc)
                    for doc in self.documents
                ),
                key=lambda pair: (-pair[0], int(pair[1].id)),
            )
            results.append([SearchResult(doc, float(score)) for score, doc in scored[:k]])
        return results


def animal_corpus():
    """Ten tiny documents with distinct keywords."""
    animals = ["cat", "dog", "owl", "fox", "eel", "yak", "emu", "ant", "bat", "elk"]
    return [
        Document(str(i), f'"{name.title()}"\nthe {name} is an animal number {i}')
        for i, name in enumerate(animals)
    ]


SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ne",
    "ru",
    "ta",
    "vo",
    "shi",
    "pra",
    "gen",
    "dol",
    "mir",
    "zan",
    "bek",
    "tor",
    "lum",
]


def generated_corpus(n=200, seed=0, words=40):
    """``n`` passages of made-up words ("Title" line + ``words`` words), deterministic by ``seed``."""
    import numpy as np

    rng = np.random.default_rng(seed)
    vocabulary = sorted(
        {"".join(rng.choice(SYLLABLES, size=rng.integers(2, 4))) for _ in range(3000)}
    )
    documents = []
    for i in range(n):
        title = " ".join(rng.choice(vocabulary, size=2)).title()
        text = " ".join(rng.choice(vocabulary, size=words))
        documents.append(Document(str(i), f'"{title}"\n{title} {text}.'))
    return documents


class HashingEncoder:
    """A model-free encoder: hashed bag of words, L2-normalized (for fast index tests)."""

    def __init__(self, dim=64):
        from retrieval.encoders import EncoderConfig

        self.config = EncoderConfig(model="hashing-test-encoder")
        self.dim = dim

    def _encode(self, texts):
        import zlib

        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                out[row, zlib.crc32(word.encode()) % self.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)

    def encode_queries(self, texts, show_progress=None):
        return self._encode(texts)

    def encode_passages(self, texts, show_progress=None):
        return self._encode(texts)
