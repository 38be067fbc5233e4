"""The OpenAI-compatible engine's client side, without a server: the request it sends,
how it reads token ids back, retries with backoff, and a failed request turning into a
:class:`~algorithms.engines.FailedGeneration` rather than an exception. The answers come
from an ``httpx.MockTransport`` handler that records each request; the engine against a
real server (``vllm serve``) is tested in ``test_openai_engine_vllm_serve.py`` (slow)."""

from __future__ import annotations

import json

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("transformers")

from algorithms.config import GenerationConfig, TrainConfig, replace  # noqa: E402
from algorithms.engines import EngineUnavailableError, FailedGeneration  # noqa: E402
from algorithms.engines.openai import OpenAIEngine  # noqa: E402
from tests.algorithms.tiny import make_tokenizer  # noqa: E402

URL = "http://server.test/v1"


class Server:
    """A handler answering ``/models`` and ``/completions`` from a script of statuses."""

    def __init__(self, statuses=(200,), token_ids=True):
        self.statuses = list(statuses)
        self.token_ids = token_ids
        self.bodies: list[dict] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": "m1"}]})
        body = json.loads(request.content)
        self.bodies.append(body)
        status = self.statuses.pop(0) if self.statuses else 200
        if status == -1:
            raise httpx.ConnectError("connection refused", request=request)
        if status != 200:
            return httpx.Response(status, text="busy")
        choice = {"index": 0, "text": " open red door", "finish_reason": "stop",
                  "stop_reason": None}
        if self.token_ids:
            choice["token_ids"] = [7, 8, 9]
        return httpx.Response(200, json={"choices": [choice]})


def _engine(server: Server, **kwargs) -> OpenAIEngine:
    kwargs.setdefault("backoff", 0.0)
    return OpenAIEngine(URL, None, make_tokenizer(), transport=httpx.MockTransport(server),
                        **kwargs)


def test_the_request_pins_the_sampler_and_asks_for_token_ids():
    server = Server()
    engine = _engine(server)
    assert engine.model == "m1"  # the only model the server lists
    out = engine.generate([[5, 6], [4]], temperature=0.7, max_new_tokens=12, seed=3,
                          stop=["</action>"])
    assert out == [(7, 8, 9), (7, 8, 9)]
    first, second = sorted(server.bodies, key=lambda b: len(b["prompt"]), reverse=True)
    assert first["prompt"] == [5, 6] and second["prompt"] == [4]
    assert first["return_token_ids"] and first["include_stop_str_in_output"]
    assert (first["top_k"], first["min_p"], first["repetition_penalty"]) == (0, 0.0, 1.0)
    assert first["temperature"] == 0.7 and first["max_tokens"] == 12
    assert first["stop"] == ["</action>"] and first["model"] == "m1"
    assert {first["seed"], second["seed"]} == {3 * 1_000_003, 3 * 1_000_003 + 1}


def test_transient_failures_are_retried_then_succeed():
    server = Server(statuses=[503, -1, 429, 200])
    assert _engine(server, retries=3).generate([[5]], temperature=1.0, max_new_tokens=4,
                                               seed=0) == [(7, 8, 9)]
    assert len(server.bodies) == 4


def test_a_request_that_keeps_failing_is_a_failed_generation_not_an_exception():
    server = Server(statuses=[200, 503, 503, 503])
    engine = _engine(server, retries=2, concurrency=1)
    out = engine.generate([[5], [6]], temperature=1.0, max_new_tokens=4, seed=0)
    assert out[0] == (7, 8, 9)
    assert isinstance(out[1], FailedGeneration) and "failed 3 times" in out[1].error
    assert "HTTP 503" in out[1].error


def test_client_errors_are_not_retried():
    server = Server(statuses=[400])
    out = _engine(server, retries=3).generate([[5]], temperature=1.0, max_new_tokens=4,
                                              seed=0)
    assert isinstance(out[0], FailedGeneration) and "HTTP 400" in out[0].error
    assert len(server.bodies) == 1


def test_backoff_doubles(monkeypatch):
    import algorithms.engines.openai as module

    waits: list[float] = []
    monkeypatch.setattr(module.time, "sleep", waits.append)
    out = _engine(Server(statuses=[500] * 4), retries=3, backoff=0.5).generate(
        [[5]], temperature=1.0, max_new_tokens=4, seed=0)
    assert isinstance(out[0], FailedGeneration)
    assert waits == [0.5, 1.0, 2.0]


def test_text_mode_sends_text_and_re_tokenizes():
    tokenizer = make_tokenizer()
    server = Server(token_ids=False)
    engine = _engine(server, token_ids=False)
    prompt = tokenizer("open green door", add_special_tokens=False)["input_ids"]
    out = engine.generate([prompt], temperature=1.0, max_new_tokens=4, seed=0)
    body = server.bodies[0]
    assert body["prompt"] == "open green door" and "return_token_ids" not in body
    expected = tokenizer("open red door", add_special_tokens=False)["input_ids"]
    assert out == [tuple(expected) + (tokenizer.eos_token_id,)]  # stopped: EOS appended
    choice = {"text": " open ", "finish_reason": "stop", "stop_reason": "</action>"}
    assert engine.response_ids(choice, ["</action>"]) == tuple(
        tokenizer("open </action>", add_special_tokens=False)["input_ids"])
    assert engine.response_ids({"text": " open", "finish_reason": "length"}, []) == tuple(
        tokenizer("open", add_special_tokens=False)["input_ids"])


def test_a_server_without_token_ids_is_a_configuration_error():
    engine = _engine(Server(token_ids=False))
    with pytest.raises(ValueError, match="openai.no-token-ids"):
        engine.generate([[5]], temperature=1.0, max_new_tokens=4, seed=0)


def test_unreachable_server_and_weight_sync_are_refused():
    def refuse(request):
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(EngineUnavailableError, match="is the server running"):
        OpenAIEngine(URL, None, make_tokenizer(), transport=httpx.MockTransport(refuse))
    with pytest.raises(RuntimeError, match="cannot send weights"):
        _engine(Server()).sync_weights(object())


def test_training_with_the_openai_engine_is_refused_evaluation_is_not():
    config = replace(TrainConfig(), generation={"engine": "openai", "openai": {"base_url": URL}})
    with pytest.raises(ValueError, match="training with generation.engine openai"):
        config.validate()
    replace(config, run={"eval_only": True}).validate()
    with pytest.raises(ValueError, match="needs generation.openai.base_url"):
        replace(config, generation={"openai": {"base_url": None}}, run={"eval_only": True}).validate()
    assert GenerationConfig().openai.token_ids


# --- images: the chat endpoint ---------------------------------------------------------

class ChatServer(Server):
    """Also answers ``/chat/completions`` (with a chat message, no token ids)."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/chat/completions"):
            body = json.loads(request.content)
            self.bodies.append(body)
            # the standard API strips the stop string; vLLM names it in stop_reason
            message = {"role": "assistant", "content": "<action> up "}
            return httpx.Response(200, json={"choices": [
                {"index": 0, "message": message, "finish_reason": "stop",
                 "stop_reason": "</action>"}]})
        return super().__call__(request)


def test_prompts_with_images_go_to_the_chat_endpoint_as_png_data_urls():
    import base64
    import io

    import numpy as np
    from PIL import Image

    from algorithms.agent.prompts import PromptBuilder
    from algorithms.config import PromptConfig
    from studies.tiny_vlm import tiny_image_processor, vlm_tokenizer
    from tests.algorithms.visual_env import MOVES, TASK, vocabulary_texts

    tokenizer = vlm_tokenizer(vocabulary_texts())
    from algorithms.engines.vision import VisionProcessor

    vision = VisionProcessor(tiny_image_processor(), tokenizer)
    image = np.random.default_rng(0).integers(0, 256, (24, 30, 3), dtype=np.uint8)
    builder = PromptBuilder(tokenizer, PromptConfig(think=False), vision)
    with_image = builder.build(TASK, [], "You moved.", tuple(MOVES), images=[image])
    plain = builder.build(TASK, [], "You moved.", tuple(MOVES))
    server = ChatServer()
    engine = OpenAIEngine(URL, None, tokenizer, transport=httpx.MockTransport(server),
                          backoff=0.0, concurrency=1)
    out = engine.generate([with_image.token_ids, plain.token_ids], temperature=0.4,
                          max_new_tokens=16, seed=1, stop=["</action>"],
                          images=[with_image.images, ()])
    expected = tuple(tokenizer("<action> up </action>", add_special_tokens=False)["input_ids"])
    assert out[0] == expected and out[1] == (7, 8, 9)
    chat = next(body for body in server.bodies if "messages" in body)
    completion = next(body for body in server.bodies if "prompt" in body)
    assert completion["prompt"] == list(plain.token_ids)
    (message,) = chat["messages"]
    assert message["role"] == "user" and chat["stop"] == ["</action>"]
    kinds = [part["type"] for part in message["content"]]
    assert kinds == ["text", "image_url", "text"]
    assert message["content"][0]["text"].endswith("Now you see:")
    assert message["content"][2]["text"].startswith("You moved.")
    assert "<|im_start|>" not in json.dumps(message)  # the server templates the chat
    url = message["content"][1]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    decoded = np.asarray(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))))
    assert np.array_equal(decoded, image)  # the image as the env drew it
    # a response prefix cannot be said in the chat format: refused before any request
    prefixed = PromptBuilder(tokenizer, PromptConfig(think=False, response_prefix="<action>"),
                             vision).build(TASK, [], "You moved.", (), images=[image])
    with pytest.raises(ValueError, match="no prompt.response_prefix"):
        engine.generate([prefixed.token_ids], temperature=0.4, max_new_tokens=4, seed=0,
                        images=[prefixed.images])
