"""Retrieval for search-augmented agents: one ``Retriever`` API, local or over HTTP.

Modules (import what you need; nothing heavy is imported here):

- :mod:`retrieval.base`: ``Document``, ``SearchResult`` and the ``Retriever`` protocol.
- :mod:`retrieval.corpus`: reading/writing JSONL corpora (``{"id", "contents"}`` lines).
- :mod:`retrieval.docstore`: disk-backed, memory-mapped document storage by row number.
- :mod:`retrieval.encoders`: sentence encoders (E5, MiniLM) with explicit prefixes.
- :mod:`retrieval.faiss_index`: flat / HNSW / IVF-PQ inner-product indexes, GPU sharding.
- :mod:`retrieval.dense`: ``DenseRetriever`` (encoder + FAISS).
- :mod:`retrieval.bm25`: ``BM25Retriever`` (bm25s).
- :mod:`retrieval.hybrid`: ``HybridRetriever`` (reciprocal-rank fusion).
- :mod:`retrieval.batching`: micro-batching of concurrent requests.
- :mod:`retrieval.server`, :mod:`retrieval.serve`: the Search-R1-compatible HTTP service.
- :mod:`retrieval.client`: ``RemoteRetriever``, the HTTP client with retries.
- :mod:`retrieval.build`: the index-building command line.
"""
