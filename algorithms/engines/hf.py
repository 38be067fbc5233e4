"""Batched sampling with transformers ``generate``: left padding, KV cache, CPU or GPU."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from algorithms.engines import Response, stop_length
from algorithms.precision import autocast


class HFEngine:
    """Samples with the training model itself, so weight sync is free.

    Prompts are sorted by length and cut into batches of ``batch_size`` (less padding);
    each batch is left-padded and decoded with the KV cache. Sampling draws from torch's
    RNG inside :func:`torch.random.fork_rng`, seeded per batch from ``seed``: the same
    seed gives the same samples and the caller's global RNG state is left untouched.

    Samples come from exactly softmax(logits / temperature) (top-p truncation only when
    ``top_p < 1`` is asked for), the distribution :func:`~algorithms.training.scoring.score_responses`
    scores. transformers fills every field a ``GenerationConfig`` leaves unset from the
    model's own ``generation_config`` (checkpoints ship repetition penalties, top-k/top-p,
    suppressed tokens, ...), so :meth:`generate` runs with the model's config replaced by
    a blank one (:func:`plain_sampling_config`) and every warper set to its neutral value.

    Behaviour log-probs: every row is a :class:`~algorithms.engines.Response` carrying the
    log-prob of each sampled token under the processed scores it was drawn from (logits /
    temperature, top-p masked), recorded by a logits processor placed after the warpers:
    when sampling, the config's temperature and top-p are left neutral and transformers'
    own temperature and top-p warpers come in the processor list, in the order it would
    build them, followed by the recorder (:func:`sampling_processors`; the same tokens as
    the config alone). Memory is one (B, V) step, not ``output_scores``' (B, T, V)
    (64 x 512 x 49152 float32 = 6.4 GB for SmolLM2 at the default settings).

    Precision: generation runs under :func:`~algorithms.precision.autocast` (bfloat16 on a
    CPU with bfloat16 instructions), as scoring does, so both compute the same distribution.
    The LM head's input is made contiguous (:func:`_contiguous_head_input`): transformers
    passes it the last position's slice of the prefill's hidden states, and torch 2.13
    multiplies such a strided (B, 1, H) slice by a (V, H) weight as a batched product over
    B expanded copies of the weight (measured on SmolLM2: 1.34 s per prefill in bfloat16
    and 0.11 s in float32, against 0.01 s and 0.03 s contiguous; the same values).

    Stop strings: a stopping criterion decodes the newest tokens of every row after each
    step and marks a row finished once a stop string appears in its response (the other
    rows go on; ``generate`` pads the finished one). The response is then cut exactly
    where :func:`~algorithms.engines.stop_length` says, the rule every engine follows.

    Images (a vision-language policy): a prompt may show images (``images=`` of
    :meth:`generate`); each batch's are encoded by ``vision``
    (:meth:`~algorithms.engines.vision.VisionProcessor.tensors`, the encoding the learner's
    scoring repeats) and passed to ``generate`` with the ``mm_token_type_ids`` that mark
    the prompts' image tokens, from which the model takes its 3-D rotary positions.

    Args:
        model: the causal LM (PEFT-wrapped or not), or a vision-language model.
        tokenizer: its tokenizer (pad and EOS tokens set).
        batch_size: prompts per ``generate`` call.
        top_p: nucleus sampling threshold (1.0: off).
        vision: a vision-language policy's
            :class:`~algorithms.engines.vision.VisionProcessor`; ``None`` for a text model.
    """

    def __init__(self, model: Any, tokenizer: Any, *, batch_size: int = 64, top_p: float = 1.0,
                 vision: Any = None):
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.top_p = top_p
        self.vision = vision

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _generation_config(self, temperature: float, max_new_tokens: int) -> Any:
        return plain_sampling_config(temperature=temperature, top_p=self.top_p,
                                     max_new_tokens=max_new_tokens,
                                     pad_token_id=self.tokenizer.pad_token_id,
                                     eos_token_id=self.tokenizer.eos_token_id)

    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        temperature: float,
        max_new_tokens: int,
        seed: int,
        stop: Sequence[str] = (),
        images: Sequence[Sequence[Any]] | None = None,
    ) -> list[Response]:
        """Sample one response per prompt (see :class:`~algorithms.engines.GenerationEngine`).

        Each row is a :class:`~algorithms.engines.Response` whose ``log_probs`` are the
        sampled tokens' log-probs under the distribution they were drawn from (0.0 for
        greedy decoding), cut with the tokens (see :class:`_SampledLogProbs`).
        ``images``: one sequence of (H, W, 3) uint8 images per prompt, the images its
        image tokens stand for (vision-language models only).
        """
        if not prompts:
            return []
        if images is not None and any(images):
            if self.vision is None:
                raise ValueError("prompts with images need a vision-language model "
                                 "(HFEngine(vision=...))")
            if len(images) != len(prompts):
                raise ValueError(f"{len(images)} image lists for {len(prompts)} prompts")
        else:
            images = None
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        results: list[Response] = [Response()] * len(prompts)
        sample = temperature > 0
        # Sampling: the warpers (temperature, top-p) go in as our own processors, followed
        # by the recorder, so that it sees exactly the scores the token is drawn from
        # (transformers puts a caller's processors before the warpers it builds itself).
        # The warpers are transformers' own classes, in the order it uses: same tokens.
        generation_config = self._generation_config(temperature, max_new_tokens) if not \
            sample else plain_sampling_config(temperature=1.0, top_p=1.0,
                                              max_new_tokens=max_new_tokens,
                                              pad_token_id=self.tokenizer.pad_token_id,
                                              eos_token_id=self.tokenizer.eos_token_id)
        was_training = self.model.training
        self.model.eval()
        device = self.device
        devices = [device] if device.type == "cuda" else []
        # LoRA layers sit inside the base model's modules, so its own ``generate`` samples
        # the adapted policy; PEFT's wrapper would copy its generation_config back in.
        lm = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        head = lm.get_output_embeddings()
        hook = head.register_forward_pre_hook(_contiguous_head_input) if head is not None \
            else None
        try:
            for batch_number, start in enumerate(range(0, len(order), self.batch_size)):
                batch = order[start: start + self.batch_size]
                input_ids, attention = self._left_pad([prompts[i] for i in batch], device)
                criteria = _stopping_criteria(self.tokenizer, stop, input_ids.shape[1])
                recorder = _SampledLogProbs() if sample else None
                processors = sampling_processors(temperature, self.top_p, recorder)
                pixels = self._pixel_inputs(input_ids, attention, [images[i] for i in batch]) \
                    if images is not None else {}
                with torch.random.fork_rng(devices=devices), _without_model_defaults(lm), \
                        autocast(self.model):
                    torch.manual_seed(seed * 100_003 + batch_number)
                    output = lm.generate(input_ids=input_ids, attention_mask=attention,
                                         generation_config=generation_config,
                                         stopping_criteria=criteria,
                                         logits_processor=processors, **pixels)
                new_ids = output[:, input_ids.shape[1]:]
                new_tokens = new_ids.tolist()
                log_probs = recorder.finish(new_ids).tolist() if recorder is not None else \
                    [[0.0] * new_ids.shape[1]] * len(batch)
                for row, index in enumerate(batch):
                    tokens = self._cut_at_stop(self._trim(new_tokens[row]), stop)
                    results[index] = Response(tokens, log_probs[row][: len(tokens)])
        finally:
            self.model.train(was_training)
            if hook is not None:
                hook.remove()
        return results

    def _left_pad(self, prompts: list[Sequence[int]],
                  device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(p) for p in prompts)
        pad = self.tokenizer.pad_token_id
        ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            if len(prompt) == 0:
                raise ValueError("cannot generate from an empty prompt")
            ids[row, width - len(prompt):] = torch.tensor(list(prompt), dtype=torch.long)
            mask[row, width - len(prompt):] = 1
        return ids.to(device), mask.to(device)

    def _pixel_inputs(self, input_ids: torch.Tensor, attention: torch.Tensor,
                      images: list[Sequence[Any]]) -> dict[str, torch.Tensor]:
        """``generate``'s image inputs for a batch (empty when no row shows an image)."""
        import inspect

        pixels = self.vision.tensors(images, input_ids.device)
        lm = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        # transformers >= 5.2x takes the image tokens' places; earlier versions find them
        if pixels and "mm_token_type_ids" in inspect.signature(lm.forward).parameters:
            places = (input_ids == self.vision.image_token_id) & attention.bool()
            pixels["mm_token_type_ids"] = places.int()
        return pixels

    def _trim(self, tokens: list[int]) -> tuple[int, ...]:
        eos = self.tokenizer.eos_token_id
        eos_ids = set(eos) if isinstance(eos, list) else {eos}
        for position, token in enumerate(tokens):
            if token in eos_ids:
                return tuple(tokens[: position + 1])
        return tuple(tokens)

    def _cut_at_stop(self, tokens: tuple[int, ...], stop: Sequence[str]) -> tuple[int, ...]:
        """``tokens`` up to and including the token that completes the first stop string."""
        keep = stop_length(tokens, stop, self._decode)
        return tokens if keep is None else tokens[:keep]

    def _decode(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode(list(tokens), skip_special_tokens=True)

    def sync_weights(self, model: Any) -> None:
        """Nothing to do: the engine samples with the training model object."""
        if model is not self.model:
            raise ValueError("HFEngine samples with the model it was built with")

    def release(self) -> None:
        """Nothing to free."""


def _contiguous_head_input(module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Forward pre-hook of the LM head: its hidden-state input made contiguous (see
    :class:`HFEngine`, "Precision")."""
    return (args[0].contiguous(), *args[1:])


def plain_sampling_config(*, temperature: float, top_p: float, max_new_tokens: int,
                          pad_token_id: int, eos_token_id: int | list[int]) -> Any:
    """A transformers ``GenerationConfig`` for sampling from softmax(logits / temperature).

    Every field that would add a logits processor or warper is set to its neutral value
    (a field left ``None`` is filled from the model's ``generation_config``, so "off" must
    be written out where a neutral value exists; the rest is blanked by
    :func:`_without_model_defaults`). ``temperature == 0`` is greedy decoding.

    Args:
        temperature: > 0 samples, 0 takes the argmax.
        top_p: nucleus threshold; 1.0 is off (the training default: the learner scores
            the untruncated softmax).
        max_new_tokens: longest response.
        pad_token_id, eos_token_id: the tokenizer's.

    Raises:
        ValueError: a negative temperature or a ``top_p`` outside (0, 1].
    """
    from transformers import GenerationConfig

    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    sample = temperature > 0
    return GenerationConfig(
        do_sample=sample,
        # greedy decoding applies no warper: leave them unset (transformers warns otherwise)
        temperature=temperature if sample else None,
        top_p=top_p if sample else None,
        top_k=0 if sample else None,
        typical_p=1.0,
        epsilon_cutoff=0.0,
        eta_cutoff=0.0,
        repetition_penalty=1.0,
        encoder_repetition_penalty=1.0,
        no_repeat_ngram_size=0,
        encoder_no_repeat_ngram_size=0,
        min_length=0,
        num_beams=1,
        num_return_sequences=1,
        guidance_scale=1.0,
        remove_invalid_values=False,
        renormalize_logits=False,
        max_new_tokens=max_new_tokens,
        pad_token_id=pad_token_id,
        eos_token_id=eos_token_id,
        use_cache=True,
    )


def sampling_processors(temperature: float, top_p: float,
                        recorder: _SampledLogProbs | None) -> Any:
    """The ``LogitsProcessorList`` :meth:`HFEngine.generate` passes to ``generate`` with a
    neutral (temperature 1, top-p 1) config: transformers' ``TemperatureLogitsWarper`` and
    ``TopPLogitsWarper`` (only when ``top_p < 1``), in the order ``generate`` would build
    them from ``plain_sampling_config(temperature, top_p)``, then ``recorder``. Greedy
    decoding (``temperature == 0``) gets an empty list."""
    from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopPLogitsWarper

    processors = LogitsProcessorList()
    if temperature <= 0:
        return processors
    if temperature != 1.0:
        processors.append(TemperatureLogitsWarper(temperature))
    if top_p < 1.0:
        processors.append(TopPLogitsWarper(top_p=top_p, min_tokens_to_keep=1))
    if recorder is not None:
        processors.append(recorder)
    return processors


class _SampledLogProbs:
    """A logits processor placed last: it records the log-probs of the sampled tokens.

    At step ``t`` it receives the processed scores the token of step ``t`` is drawn from
    (softmax of them is the sampling law) and the ids up to step ``t - 1``: it keeps the
    (B, V) log-softmax of step ``t`` and gathers from the one of step ``t - 1`` the token
    that was drawn from it. :meth:`finish` gathers the last step's from the output. So
    one step's (B, V) log-probs are alive at a time, not ``output_scores``' (B, T, V).
    Returns the scores unchanged.
    """

    def __init__(self) -> None:
        self._columns: list[torch.Tensor] = []
        self._last: torch.Tensor | None = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self._last is not None:
            self._columns.append(self._last.gather(1, input_ids[:, -1:]).squeeze(1))
        self._last = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def finish(self, new_ids: torch.Tensor) -> torch.Tensor:
        """(B, T) log-probs of ``new_ids`` (B, T), the generated columns."""
        if self._last is not None:
            self._columns.append(self._last.gather(1, new_ids[:, -1:]).squeeze(1))
            self._last = None
        if len(self._columns) != new_ids.shape[1]:
            raise RuntimeError(f"recorded {len(self._columns)} log-prob steps for "
                               f"{new_ids.shape[1]} generated tokens")
        return torch.stack(self._columns, dim=1) if self._columns else \
            torch.zeros(new_ids.shape, dtype=torch.float32)


@contextmanager
def _without_model_defaults(lm: Any) -> Iterator[None]:
    """Replace ``lm.generation_config`` by a blank one for the duration (see
    :func:`plain_sampling_config`): suppressed tokens, bad words, sequence biases, min-p,
    forced tokens and the like have no neutral value other than "unset", and transformers
    fills unset fields from the model's config."""
    from transformers import GenerationConfig

    saved = lm.generation_config
    lm.generation_config = GenerationConfig()
    try:
        yield
    finally:
        lm.generation_config = saved


def _stopping_criteria(tokenizer: Any, stop: Sequence[str], prompt_width: int) -> Any:
    """A ``StoppingCriteriaList`` that finishes each row once its response holds a stop
    string (``None`` without stop strings)."""
    from transformers import StoppingCriteria, StoppingCriteriaList

    stop = tuple(s for s in stop if s)
    if not stop:
        return None
    # Every token decodes to at least one character, so a stop string that the newest
    # token completed lies within the last len(stop) tokens; a few more absorb decoding
    # artefacts at the window's start (a split multi-byte character, a dropped space).
    window = max(len(s) for s in stop) + 4

    class _StopStrings(StoppingCriteria):
        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor,
                     **kwargs: Any) -> torch.Tensor:
            tails = input_ids[:, prompt_width:][:, -window:].tolist()
            texts = tokenizer.batch_decode(tails, skip_special_tokens=True)
            return torch.tensor([any(s in text for s in stop) for text in texts],
                                dtype=torch.bool, device=input_ids.device)

    return StoppingCriteriaList([_StopStrings()])
