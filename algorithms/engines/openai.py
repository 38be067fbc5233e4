"""Sampling from an OpenAI-compatible server (``vllm serve``, SGLang, llama.cpp's server,
a hosted API) through its completions endpoint (``POST {base_url}/completions``).

It is how a model that is not trained here is evaluated (the paper's prompting
baselines), and how an existing inference fleet serves rollouts. The server cannot
receive the weights this process trains, so the engine evaluates only:
:meth:`OpenAIEngine.sync_weights` refuses, and ``TrainConfig.validate`` refuses training
with it.

Token ids, two modes (``generation.openai.token_ids``):

- ``True`` (default, exact): the prompt goes as a list of token ids (the completions API
  accepts token arrays) and the response's token ids come back in the choice's
  ``token_ids`` field (vLLM's ``return_token_ids`` request field). These are the ids the
  server sampled -- what on-policy scoring needs -- with the EOS token included when the
  model stopped by itself, and a stop string kept in the output
  (``include_stop_str_in_output``). vLLM's extension fields pin the sampler to
  softmax(logits / T) (``top_k=0``, ``min_p=0``, ``repetition_penalty=1``), so a server's
  ``generation_config`` defaults cannot change it. A server that ignores
  ``return_token_ids`` is a configuration error, reported as such.
- ``False`` (any server): the prompt goes as text (decoded with the policy's tokenizer),
  only standard fields are sent, and the returned text is re-tokenized with the policy's
  tokenizer. Re-tokenization can differ from the sampled ids (a word split another way),
  which is why this mode is for evaluation. The standard API strips a matched stop string
  from the text; it is put back when the server names it in ``stop_reason`` (vLLM does),
  and an EOS token is appended when the server reports ``finish_reason == "stop"``
  without a stop string.

Images (a visual env): a prompt that shows images goes to the chat endpoint instead
(``POST {base_url}/chat/completions``), as one user message in the OpenAI chat format: the
message's text (the prompt's ids between the chat template's user header and its
generation prompt, decoded) cut at each image, each image a ``{"type": "image_url",
"image_url": {"url": "data:image/png;base64,..."}}`` part (the image as the env drew it,
PNG-encoded, :func:`~algorithms.engines.vision.png_data_url`) where the prompt had its
tokens; the server applies its own chat template and image processing. The answer's
text is re-tokenized as in text mode (``token_ids`` does not apply). Such a prompt must
be the chat template around one user message, with no ``prompt.response_prefix`` (the
chat format cannot start the answer), else the request is refused with that reason.

Requests: one per prompt (each with its own seed, ``(seed * 1_000_003 + i) mod 2**31``),
at most ``concurrency`` in flight, each limited to ``timeout`` seconds. A seed repeats a
request exactly only when the server computes it the same way: vLLM batches concurrent
requests and its low-precision logits depend on the batch, so exact repeats need
``concurrency=1`` (or a batch-invariant server). A connection
error, a timeout, HTTP 429 or a 5xx answer is retried ``retries`` times, after
``backoff``, ``2 * backoff``, ... seconds; any other failure is final at once. A request
that finally failed yields a :class:`~algorithms.engines.FailedGeneration`, which the
rollout turns into an env-style error of that trajectory -- the run goes on. The API key,
if the server needs one, is read from ``OPENAI_API_KEY`` (never from the config, which is
saved with the run).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from algorithms.engines import EngineUnavailableError, FailedGeneration

_RETRIED_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


class RequestFailedError(RuntimeError):
    """A request failed for good (after its retries, or at once for a client error)."""


class OpenAIEngine:
    """Completions from an OpenAI-compatible server (see the module docstring).

    Args:
        base_url: API root, e.g. ``http://127.0.0.1:8000/v1``.
        model: model name on the server; ``None``: the only one ``GET /models`` lists.
        tokenizer: the policy's tokenizer (text mode, and the EOS id).
        token_ids: exact token-id mode (``True``) or text mode (``False``).
        top_p: nucleus sampling threshold.
        concurrency: requests in flight at once.
        timeout: seconds per request.
        retries: retries of a transient failure.
        backoff: seconds before the first retry, doubled for each further one.
        api_key: bearer token; ``None``: ``$OPENAI_API_KEY`` if set.
        transport: an ``httpx`` transport (tests); ``None``: the network.

    Raises:
        EngineUnavailableError: the server cannot be reached, or ``model`` is ``None`` and
            the server does not list exactly one model.
    """

    def __init__(self, base_url: str, model: str | None, tokenizer: Any, *,
                 token_ids: bool = True, top_p: float = 1.0, concurrency: int = 8,
                 timeout: float = 300.0, retries: int = 3, backoff: float = 1.0,
                 api_key: str | None = None, transport: Any = None):
        import httpx

        self._httpx = httpx
        self.base_url = base_url.rstrip("/")
        self.tokenizer = tokenizer
        self.token_ids = token_ids
        self.top_p = top_p
        self.concurrency = concurrency
        self.retries = retries
        self.backoff = backoff
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(
            timeout=timeout, headers=headers, transport=transport,
            limits=httpx.Limits(max_connections=concurrency,
                                max_keepalive_connections=concurrency))
        self.model = model if model is not None else self._only_model()

    @classmethod
    def from_config(cls, config: Any, tokenizer: Any, *, seed: int = 0) -> OpenAIEngine:
        """Build from a ``GenerationConfig`` (``seed`` is unused: requests are seeded
        per call)."""
        del seed
        if not config.openai.base_url:
            raise EngineUnavailableError("--generation.engine openai needs "
                                         "--generation.openai.base-url (e.g. http://127.0.0.1:8000/v1)")
        openai = config.openai
        return cls(openai.base_url, openai.model, tokenizer, token_ids=openai.token_ids,
                   top_p=config.top_p, concurrency=openai.concurrency,
                   timeout=openai.timeout, retries=openai.retries,
                   backoff=openai.backoff)

    def _only_model(self) -> str:
        try:
            response = self._client.get(f"{self.base_url}/models")
            response.raise_for_status()
            models = [entry["id"] for entry in response.json()["data"]]
        except (self._httpx.HTTPError, KeyError, TypeError, ValueError) as error:
            raise EngineUnavailableError(
                f"--generation.engine openai: cannot list the models of {self.base_url} "
                f"({type(error).__name__}: {error}); is the server running? Or name the "
                "model with --generation.openai.model") from error
        if len(models) != 1:
            raise EngineUnavailableError(
                f"--generation.engine openai: {self.base_url} serves {models}; name one "
                "with --generation.openai.model")
        return models[0]

    def request_body(self, prompt: Sequence[int], *, temperature: float,
                     max_new_tokens: int, seed: int, stop: Sequence[str]) -> dict[str, Any]:
        """The JSON body of one completions request."""
        body: dict[str, Any] = {
            "model": self.model, "max_tokens": max_new_tokens, "temperature": temperature,
            "top_p": self.top_p if temperature > 0 else 1.0, "n": 1, "seed": seed,
            "stream": False,
        }
        if stop:
            body["stop"] = list(stop)
        if self.token_ids:
            body.update(prompt=[int(t) for t in prompt], return_token_ids=True,
                        include_stop_str_in_output=True, top_k=0, min_p=0.0,
                        repetition_penalty=1.0, skip_special_tokens=False)
        else:
            body["prompt"] = self.tokenizer.decode(list(prompt))
        return body

    def _post(self, body: dict[str, Any], endpoint: str = "completions") -> dict[str, Any]:
        """POST to ``endpoint`` with retries; the parsed JSON answer, or
        :class:`RequestFailedError`."""
        httpx = self._httpx
        url = f"{self.base_url}/{endpoint}"
        problem = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                response = self._client.post(url, json=body)
            except httpx.HTTPError as error:  # connection refused/reset, timeouts
                problem = f"{type(error).__name__}: {error}"
                continue
            if response.status_code == 200:
                try:
                    return response.json()
                except ValueError as error:
                    raise RequestFailedError(f"{url}: the answer is not JSON: {error}") \
                        from error
            problem = f"HTTP {response.status_code}: {response.text[:300]}"
            if response.status_code not in _RETRIED_STATUS:
                raise RequestFailedError(f"{url}: {problem}")
        raise RequestFailedError(f"{url}: failed {self.retries + 1} times; last: {problem}")

    def response_ids(self, choice: dict[str, Any], stop: Sequence[str], *,
                     text: bool = False) -> tuple[int, ...]:
        """The response token ids of one completions ``choice`` (see the module docstring);
        ``text``: re-tokenize its text whatever ``token_ids`` says (a chat answer).

        Raises:
            ValueError: token-id mode and the server sent no ``token_ids``.
        """
        if self.token_ids and not text:
            ids = choice.get("token_ids")
            if ids is None:
                raise ValueError(
                    "the server's completion has no 'token_ids' (it ignores vLLM's "
                    "return_token_ids); use --generation.openai.no-token-ids to "
                    "re-tokenize the text instead")
            return tuple(int(t) for t in ids)
        text = str(choice.get("text") or "")
        reason = choice.get("stop_reason")
        matched = isinstance(reason, str) and reason in stop
        if matched:
            text += reason
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        if choice.get("finish_reason") == "stop" and not matched:
            ids.append(self.tokenizer.eos_token_id)
        return tuple(ids)

    def _chat_wrapper(self) -> tuple[list[int], list[int]]:
        """The token ids the chat template puts before and after a user message (with the
        generation prompt), found by templating a message that is one special token."""
        if getattr(self, "_wrapper", None) is None:
            from algorithms.engines.vision import VISION_START

            if not getattr(self.tokenizer, "chat_template", None):
                raise ValueError("prompts with images go to the chat endpoint: the policy's "
                                 "tokenizer needs a chat template")
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": VISION_START}], tokenize=False,
                add_generation_prompt=True)
            ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            mark = self.tokenizer.convert_tokens_to_ids(VISION_START)
            if ids.count(mark) != 1:
                raise ValueError("cannot find the user message in the chat template")
            at = ids.index(mark)
            self._wrapper = (ids[:at], ids[at + 1:])
        return self._wrapper

    def chat_content(self, prompt: Sequence[int], images: Sequence[Any]) -> list[dict[str, Any]]:
        """The user message of a prompt with images, as OpenAI chat content parts (text
        and ``image_url`` parts in the prompt's order; module docstring).

        Raises:
            ValueError: the prompt is not the chat template around one user message (a
                response prefix, no chat template), or its image count differs.
        """
        from algorithms.engines.vision import IMAGE_TOKEN, VISION_END, VISION_START, png_data_url

        head, tail = self._chat_wrapper()
        ids = list(prompt)
        if ids[:len(head)] != head or ids[len(ids) - len(tail):] != tail \
                or len(ids) < len(head) + len(tail):
            raise ValueError("a prompt with images must be the chat template around one user "
                             "message, with no prompt.response_prefix (the chat endpoint "
                             "cannot start the answer)")
        middle = ids[len(head):len(ids) - len(tail)]
        start, image, end = (self.tokenizer.convert_tokens_to_ids(token)
                             for token in (VISION_START, IMAGE_TOKEN, VISION_END))
        pieces: list[list[int]] = [[]]
        index = 0
        while index < len(middle):
            if middle[index] == start:
                close = index + 1
                while close < len(middle) and middle[close] == image:
                    close += 1
                if close < len(middle) and middle[close] == end:
                    pieces.append([])
                    index = close + 1
                    continue
            pieces[-1].append(middle[index])
            index += 1
        if len(pieces) - 1 != len(images):
            raise ValueError(f"the prompt shows {len(pieces) - 1} images, "
                             f"{len(images)} were given")
        content: list[dict[str, Any]] = []
        for number, piece in enumerate(pieces):
            if number:
                content.append({"type": "image_url",
                                "image_url": {"url": png_data_url(images[number - 1])}})
            text = self.tokenizer.decode(piece, skip_special_tokens=False) if piece else ""
            if text:
                content.append({"type": "text", "text": text})
        return content

    def chat_body(self, prompt: Sequence[int], images: Sequence[Any], *, temperature: float,
                  max_new_tokens: int, seed: int, stop: Sequence[str]) -> dict[str, Any]:
        """The JSON body of one chat request (a prompt with images)."""
        body: dict[str, Any] = {
            "model": self.model, "max_tokens": max_new_tokens, "temperature": temperature,
            "top_p": self.top_p if temperature > 0 else 1.0, "n": 1, "seed": seed,
            "stream": False,
            "messages": [{"role": "user", "content": self.chat_content(prompt, images)}],
        }
        if stop:
            body["stop"] = list(stop)
        return body

    def _one(self, prompt: Sequence[int], *, temperature: float, max_new_tokens: int,
             seed: int, stop: Sequence[str], images: Sequence[Any] = ()
             ) -> tuple[int, ...] | FailedGeneration:
        chat = bool(images)
        if chat:
            body = self.chat_body(prompt, images, temperature=temperature,
                                  max_new_tokens=max_new_tokens, seed=seed, stop=stop)
        else:
            body = self.request_body(prompt, temperature=temperature,
                                     max_new_tokens=max_new_tokens, seed=seed, stop=stop)
        try:
            answer = self._post(body, "chat/completions" if chat else "completions")
            choice = answer["choices"][0]
            if chat:  # the answer's text, re-tokenized (module docstring)
                choice = {**choice, "text": choice["message"]["content"]}
        except RequestFailedError as error:
            return FailedGeneration(str(error))
        except (KeyError, IndexError, TypeError) as error:
            return FailedGeneration(f"malformed completions answer ({error!r}): "
                                    f"{str(answer)[:300]}")
        return self.response_ids(choice, stop, text=chat)

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        temperature: float,
        max_new_tokens: int,
        seed: int,
        stop: Sequence[str] = (),
        images: Sequence[Sequence[Any]] | None = None,
    ) -> list[tuple[int, ...] | FailedGeneration]:
        """Sample one response per prompt (see :class:`~algorithms.engines.GenerationEngine`);
        a request that failed for good gives a :class:`~algorithms.engines.FailedGeneration`.
        A prompt with ``images`` goes to the chat endpoint (module docstring).

        Raises:
            ValueError: an empty prompt, or a prompt with images that is not the chat
                template around one user message.
        """
        if not prompts:
            return []
        if any(len(prompt) == 0 for prompt in prompts):
            raise ValueError("cannot generate from an empty prompt")
        shown = list(images) if images is not None else [()] * len(prompts)
        if len(shown) != len(prompts):
            raise ValueError(f"{len(shown)} image lists for {len(prompts)} prompts")
        for prompt, row in zip(prompts, shown, strict=True):  # refused before any request
            if row:
                self.chat_content(prompt, row)
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(prompts))) as pool:
            futures = [pool.submit(self._one, prompt, temperature=temperature,
                                   max_new_tokens=max_new_tokens,
                                   seed=(seed * 1_000_003 + index) % (2**31), stop=stop,
                                   images=row)
                       for index, (prompt, row) in enumerate(zip(prompts, shown, strict=True))]
            return [future.result() for future in futures]

    def sync_weights(self, model: Any) -> None:
        """Refused (:class:`~algorithms.engines.EngineUnavailableError`): this engine has
        no way to send weights to the server."""
        raise EngineUnavailableError(
            "the openai engine cannot send weights to the server; serve the weights you "
            "want to evaluate with the server itself (e.g. vllm serve CHECKPOINT_FOLDER)")

    def release(self) -> None:
        """Nothing to free (the server manages its own memory)."""

    def close(self) -> None:
        """Close the HTTP connections."""
        self._client.close()
