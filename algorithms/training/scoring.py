"""Scoring responses under the policy: the log-prob, entropy and value maths.

:func:`score_responses` is the one forward pass used for old log-probs, reference
log-probs, the update and the value head: prompts are left-padded and responses
right-padded, so every response starts at the same column and only the response tokens
go through the LM head, in chunks (:data:`SCORE_CHUNK_TOKENS`): the (B, R, V) logits of a
micro-batch are never all alive at once, with or without autograd.
:func:`score_transcripts` is the same for the transcript layout (one forward pass per
trajectory). Rows with images are scored through
:func:`~algorithms.training.vision_model.vision_hidden_states`.

:class:`Scorer` holds the policy and its optional :class:`ValueHead` as the one module the
learner calls; :class:`SeparateCritic` is PPO's critic with a backbone of its own, and
:func:`prompt_values` the values of prompts alone. Phase 1 of an iteration runs these
over a rollout batch (:mod:`algorithms.training.batch_scoring`); loading the model is
:mod:`algorithms.training.policy`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from algorithms.precision import autocast
from algorithms.training import vision_model
from algorithms.training.policy import split_model

SCORE_CHUNK_TOKENS = 1024
"""Response tokens whose logits :func:`score_responses` computes at once: the float32
logits alive at a time are at most (1024, V) -- 201 MB for SmolLM2's 49,152-token
vocabulary, 622 MB for Qwen2.5's 151,936 -- however long the responses of a micro-batch."""


VISION_KEYS = ("pixel_values", "image_grid_thw")
"""The keys of a micro-batch's rows that carry its prompts' images
(:func:`algorithms.training.micro_batches.window_rows`)."""


class ValueHead(nn.Module):
    """A linear map from the last prompt token's hidden state to a state value V(s_t).

    Args:
        width: the backbone's hidden size.
    """

    def __init__(self, width: int):
        super().__init__()
        self.linear = nn.Linear(width, 1)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B, H) -> (B,) values, computed in float32 (outside any autocast region)."""
        with torch.autocast(device_type=hidden.device.type, enabled=False):
            return self.linear(hidden.float()).squeeze(-1)


class SeparateCritic(nn.Module):
    """A critic with its own transformer backbone and a :class:`ValueHead` (its forward
    passes run under :func:`~algorithms.precision.autocast` once it is marked, as the
    learner marks it under mixed precision).

    Args:
        backbone: a transformer backbone (``model.base_model`` of a causal LM).
        width: its hidden size.
    """

    def __init__(self, backbone: nn.Module, width: int):
        super().__init__()
        self.backbone = backbone
        self.head = ValueHead(width)

    def forward(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> torch.Tensor:
        """Values of left-padded prompts: (B, P), (B, P) -> (B,)."""
        with autocast(self):
            return self.head(last_prompt_hidden(self.backbone, prompt_ids, prompt_mask))

    def transcript_values(self, sequence_ids: torch.Tensor, sequence_mask: torch.Tensor,
                          sequence_index: torch.Tensor, response_starts: torch.Tensor
                          ) -> torch.Tensor:
        """Values before each response of right-padded transcripts (one forward pass
        each): (T, L), (T, L), (B,), (B,) -> (B,)."""
        with autocast(self):
            hidden = _transcript_hidden(self.backbone, sequence_ids, sequence_mask)
            return self.head(hidden[sequence_index, response_starts - 1])


def last_prompt_hidden(backbone: nn.Module, prompt_ids: torch.Tensor,
                       prompt_mask: torch.Tensor) -> torch.Tensor:
    """Hidden state at the last token of left-padded prompts: (B, P), (B, P) -> (B, H).

    Position ids follow the attention mask, as in :func:`score_responses`.
    """
    positions = (prompt_mask.cumsum(-1) - 1).clamp(min=0)
    hidden = backbone(input_ids=prompt_ids, attention_mask=prompt_mask,
                      position_ids=positions, use_cache=False).last_hidden_state
    return hidden[:, -1]


def prompt_values(model: Any, value_head: ValueHead, prompt_ids: torch.Tensor,
                  prompt_mask: torch.Tensor) -> torch.Tensor:
    """Value-head values of left-padded prompts alone: (B, P), (B, P) -> (B,).

    The values :func:`score_responses` returns for the same prompts followed by any
    response (attention is causal: the last prompt token never sees the response), from a
    prompt-only forward pass. PPO uses it for states no response was sampled in: the
    prompt after a truncated trajectory's last step.
    """
    with autocast(model):
        return value_head(last_prompt_hidden(split_model(model)[0], prompt_ids, prompt_mask))


@dataclass
class ScoredResponses:
    """Per-token outputs of :func:`score_responses`.

    Attributes:
        log_probs: (B, R) log-probabilities of the response tokens.
        entropy: (B, R) entropies of the next-token distributions, or ``None``.
        values: (B,) value-head outputs at the last prompt token, or ``None``.
    """

    log_probs: torch.Tensor
    entropy: torch.Tensor | None
    values: torch.Tensor | None


def score_responses(
    model: Any,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = True,
    value_head: ValueHead | None = None,
    chunk_tokens: int = SCORE_CHUNK_TOKENS,
    vision: dict[str, torch.Tensor] | None = None,
) -> ScoredResponses:
    """Log-probs (and optionally entropy, values) of responses under ``model``.

    Prompts are left-padded, responses right-padded, so response token ``j`` of every row
    sits at column ``P + j`` and is predicted by the hidden state at column ``P + j - 1``.
    Position ids follow the attention mask (as in generation). Logits are divided by
    ``temperature`` so that the log-probs are those of the sampling distribution. Rows
    whose prompts show images (``vision``) go through
    :func:`~algorithms.training.vision_model.vision_hidden_states`, with the pixel inputs
    generation had.

    Args:
        model: causal LM (PEFT-wrapped or not).
        prompt_ids, prompt_mask: (B, P) left-padded prompts.
        response_ids, response_mask: (B, R) right-padded responses.
        temperature: sampling temperature of the rollout.
        with_entropy: also return per-token entropies.
        entropy_grad: give the entropies a graph (an entropy bonus in the loss); without
            it they are detached (a metric) and cost no (B, R, V) graph.
        value_head: also return values from the hidden state at the last prompt token.
        chunk_tokens: response tokens whose logits are computed at once
            (:func:`_token_scores`).
        vision: ``pixel_values`` (patches, D) and ``image_grid_thw`` (n, 3) of the rows'
            prompt images, row after row (:meth:`~algorithms.engines.vision.VisionProcessor.tensors`),
            or ``None`` (no images).

    Returns:
        :class:`ScoredResponses`; entries at masked response positions are meaningless
        (callers mask them).
    """
    width = prompt_ids.shape[1]
    input_ids = torch.cat([prompt_ids, response_ids], dim=1)
    attention = torch.cat([prompt_mask, response_mask], dim=1)
    backbone, lm_head = split_model(model)
    with autocast(model):
        if vision:
            context = torch.cat([prompt_mask, torch.zeros_like(response_mask)], dim=1)
            hidden = vision_model.vision_hidden_states(
                backbone, input_ids, attention, context=context,
                pixel_values=vision["pixel_values"], image_grid_thw=vision["image_grid_thw"])
        else:
            positions = (attention.cumsum(-1) - 1).clamp(min=0)
            hidden = backbone(input_ids=input_ids, attention_mask=attention,
                              position_ids=positions, use_cache=False).last_hidden_state
        response_hidden = hidden[:, width - 1: width - 1 + response_ids.shape[1]]
        log_probs, entropy = _token_scores(lm_head, response_hidden, response_ids,
                                           response_mask, temperature=temperature,
                                           with_entropy=with_entropy,
                                           entropy_grad=entropy_grad, chunk_tokens=chunk_tokens)
        values = value_head(hidden[:, width - 1]) if value_head is not None else None
    return ScoredResponses(log_probs=log_probs, entropy=entropy, values=values)


class Scorer(nn.Module):
    """The policy and its optional value head as one module whose calls score rows.

    Everything the learner computes with the policy goes through it, so that one module
    owns the embeddings, the LM head and the value head: the root FSDP2 shards
    (:mod:`algorithms.runs.distributed`), with each transformer block a unit of its own.
    Outputs are tuples (FSDP2 hooks its backward into the tensors it can see in them).

    Args:
        model: causal LM (PEFT-wrapped or not).
        value_head: PPO's value head on the policy's hidden states, or ``None``.
    """

    def __init__(self, model: nn.Module, value_head: ValueHead | None = None):
        super().__init__()
        self.model = model
        self.value_head = value_head

    def forward(self, rows: dict[str, torch.Tensor], *, temperature: float,
                with_entropy: bool = False, entropy_grad: bool = True,
                with_values: bool = False
                ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """``(log_probs, entropy, values)`` of a micro-batch's rows: window rows
        (``prompt_*``, ``response_*`` and, for prompts with images, :data:`VISION_KEYS`:
        :func:`score_responses`) or transcript rows
        (``sequence_*``, ``response_*``: :func:`score_transcripts`). ``entropy_grad``
        False returns the entropies detached (a metric: no graph over the logits)."""
        head = self.value_head if with_values else None
        if "sequence_ids" in rows:
            scored = score_transcripts(self.model, rows["sequence_ids"], rows["sequence_mask"],
                                       rows["sequence_index"], rows["response_starts"],
                                       rows["response_ids"], rows["response_mask"],
                                       temperature=temperature, with_entropy=with_entropy,
                                       entropy_grad=entropy_grad, value_head=head)
        else:
            vision = {key: rows[key] for key in VISION_KEYS if key in rows}
            scored = score_responses(self.model, rows["prompt_ids"], rows["prompt_mask"],
                                     rows["response_ids"], rows["response_mask"],
                                     temperature=temperature, with_entropy=with_entropy,
                                     entropy_grad=entropy_grad, value_head=head,
                                     vision=vision or None)
        return scored.log_probs, scored.entropy, scored.values

    def prompt_values(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor
                      ) -> torch.Tensor:
        """:func:`prompt_values` with this scorer's value head: (B, P), (B, P) -> (B,)."""
        if self.value_head is None:
            raise RuntimeError("PPO needs a critic; none was built")
        return prompt_values(self.model, self.value_head, prompt_ids, prompt_mask)


def _chunk_scores(lm_head: nn.Module, hidden: torch.Tensor, tokens: torch.Tensor,
                  temperature: float, with_entropy: bool, entropy_grad: bool
                  ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (n,) of ``tokens`` and entropies (n,) or ``None``, from the (n, H) hidden
    states that predict them (entropies without a graph unless ``entropy_grad``)."""
    from algorithms.objectives.losses import entropy_from_logits

    logits = lm_head(hidden).float()
    if temperature != 1.0:
        logits = logits / temperature
    normalizer = torch.logsumexp(logits, dim=-1)
    log_probs = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - normalizer
    if not with_entropy:
        return log_probs, None
    if entropy_grad:
        return log_probs, entropy_from_logits(logits)
    with torch.no_grad():
        return log_probs, entropy_from_logits(logits)


def _token_scores(lm_head: nn.Module, response_hidden: torch.Tensor,
                  response_ids: torch.Tensor, response_mask: torch.Tensor, *,
                  temperature: float, with_entropy: bool, entropy_grad: bool = True,
                  chunk_tokens: int = SCORE_CHUNK_TOKENS
                  ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (B, R) of ``response_ids`` and entropies (B, R) or ``None``, from the
    (B, R, H) hidden states that predict them.

    Only the unmasked response positions go through the LM head, ``chunk_tokens`` at a
    time; masked positions get exactly 0. With autograd on, each chunk is checkpointed
    (:func:`torch.utils.checkpoint.checkpoint`): the graph keeps the chunk's (n, H) hidden
    states, not its (n, V) logits, and the backward pass recomputes one chunk's logits at
    a time. So the (B, R, V) float32 logits are never all alive at once, in the forward
    or the backward pass; the values and gradients are those of the unchunked
    computation (same operations per token).

    Args:
        lm_head: the output embedding.
        response_hidden: (B, R, H) hidden states; row ``b``, column ``j`` predicts
            ``response_ids[b, j]``.
        response_ids, response_mask: (B, R) right-padded responses.
        temperature: logits are divided by it.
        with_entropy: also return per-token entropies.
        entropy_grad: the entropies carry a graph (an entropy bonus in the loss); without
            it they are detached (a metric), and no graph is kept for them.
        chunk_tokens: response tokens per LM-head chunk (>= 1).
    """
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    mask = response_mask.bool()
    hidden = response_hidden[mask]
    tokens = response_ids[mask]
    track = torch.is_grad_enabled() and (
        hidden.requires_grad or any(p.requires_grad for p in lm_head.parameters()))
    log_prob_chunks: list[torch.Tensor] = []
    entropy_chunks: list[torch.Tensor] = []
    # one (possibly empty) chunk at least, so that the outputs stay in the graph
    for start in range(0, max(1, tokens.shape[0]), chunk_tokens):
        args = (lm_head, hidden[start: start + chunk_tokens],
                tokens[start: start + chunk_tokens], temperature, with_entropy, entropy_grad)
        if track:
            from torch.utils.checkpoint import checkpoint

            log_probs, entropy = checkpoint(_chunk_scores, *args, use_reentrant=False,
                                            preserve_rng_state=False)
        else:
            log_probs, entropy = _chunk_scores(*args)
        log_prob_chunks.append(log_probs)
        if entropy is not None:
            entropy_chunks.append(entropy)
    zeros = torch.zeros(mask.shape, dtype=torch.float32, device=hidden.device)
    log_probs = zeros.masked_scatter(mask, torch.cat(log_prob_chunks))
    entropy = zeros.masked_scatter(mask, torch.cat(entropy_chunks)) if with_entropy else None
    return log_probs, entropy


def _transcript_hidden(backbone: nn.Module, sequence_ids: torch.Tensor,
                       sequence_mask: torch.Tensor) -> torch.Tensor:
    """(T, L, H) last hidden states of right-padded sequences (positions 0, 1, ...)."""
    positions = (sequence_mask.cumsum(-1) - 1).clamp(min=0)
    return backbone(input_ids=sequence_ids, attention_mask=sequence_mask,
                    position_ids=positions, use_cache=False).last_hidden_state


def _predicting_columns(sequence_index: torch.Tensor, response_starts: torch.Tensor,
                        width: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, R) sequence rows and columns of the hidden states that predict each row's
    response tokens: column ``start - 1 + j`` for token ``j`` (clamped inside the
    sequence; those past a row's response are masked by the caller)."""
    offsets = torch.arange(width, device=response_starts.device)
    columns = (response_starts.unsqueeze(1) - 1 + offsets).clamp(max=length - 1)
    return sequence_index.unsqueeze(1).expand_as(columns), columns


def score_transcripts(
    model: Any,
    sequence_ids: torch.Tensor,
    sequence_mask: torch.Tensor,
    sequence_index: torch.Tensor,
    response_starts: torch.Tensor,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = True,
    value_head: ValueHead | None = None,
    chunk_tokens: int = SCORE_CHUNK_TOKENS,
) -> ScoredResponses:
    """:func:`score_responses` for the transcript layout: one forward pass per trajectory.

    Each of the ``B`` responses is a span of one of the ``T`` transcripts; its log-probs
    (and entropies, and the value at the token before it) are read from that transcript's
    single forward pass. Env text and prompt tokens are never gathered, so they enter no
    loss. Causal attention makes the result equal, up to float rounding, to scoring each
    response after its own prompt (the transcript so far).

    Args:
        model: causal LM (PEFT-wrapped or not).
        sequence_ids, sequence_mask: (T, L) right-padded transcripts.
        sequence_index: (B,) int64 the transcript of each response.
        response_starts: (B,) int64 the column of each response's first token (>= 1).
        response_ids, response_mask: (B, R) right-padded responses.
        temperature: sampling temperature of the rollout.
        with_entropy: also return per-token entropies.
        entropy_grad: give the entropies a graph (see :func:`score_responses`).
        value_head: also return values from the hidden state before each response.
        chunk_tokens: response tokens whose logits are computed at once.

    Returns:
        :class:`ScoredResponses` of shape (B, R) (values (B,)).
    """
    backbone, lm_head = split_model(model)
    with autocast(model):
        hidden = _transcript_hidden(backbone, sequence_ids, sequence_mask)
        rows, columns = _predicting_columns(sequence_index, response_starts,
                                            response_ids.shape[1], sequence_ids.shape[1])
        log_probs, entropy = _token_scores(lm_head, hidden[rows, columns], response_ids,
                                           response_mask, temperature=temperature,
                                           with_entropy=with_entropy,
                                           entropy_grad=entropy_grad, chunk_tokens=chunk_tokens)
        values = None
        if value_head is not None:
            values = value_head(hidden[sequence_index, response_starts - 1])
    return ScoredResponses(log_probs=log_probs, entropy=entropy, values=values)
