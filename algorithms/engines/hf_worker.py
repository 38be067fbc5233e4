"""The HF engine in a generation worker process, with a mirror of the policy's weights.

:class:`HFWorkerEngine` starts one process (multiprocessing's ``spawn`` context), sends it
a CPU copy of the model and the tokenizer, and the worker builds an
:class:`~algorithms.engines.hf.HFEngine` there on ``threads`` torch threads, on the CPU or
moved to the run's GPU (``device``). Generation then runs on cores (or a CUDA context) of
its own while the learner updates the policy in the parent: the
worker samples from the weights of its last :meth:`HFWorkerEngine.sync_weights` (a
snapshot; the parent's optimizer never writes into it).

The model crosses as a whole pickled module (PEFT wrapper and all), its module hooks
defined inside functions replaced by no-ops (:func:`local_hooks`: gradient checkpointing's
input-grad hook, which only matters for gradients, is the one a policy has). Everything
crosses the pipe as bytes serialized by ``torch.save`` (``torch.load`` with
``map_location="cpu"`` on the other side), never through multiprocessing's own pickler:
torch registers that pickler to move tensors into shared memory, which would make the
worker's weights the parent's live ones.

Weight sync (``weight_transport``): ``"pipe"`` sends the trainable weights as
``torch.save`` bytes through the pipe at each sync; ``"shared"`` maps one staging file in
shared memory (``/dev/shm``) in both processes at start, so a sync is two copies, the
learner's weights into the file and the file into the worker's model (the worker still
samples from a snapshot of its own). ``"auto"`` (the default) takes ``"shared"`` where the
staging file fits in the shared memory's free space. Measured on one H200 with the pipe: a
1.39 B-weight model's sync took 8-9.5 s per iteration (docs/overlap.md); the bytes are the
same either way, so the weights the worker samples from are identical. Shared took
0.555 s for the same model's 2.8 GB on that GPU (``benchmarks/weight_sync.py``).

Faults: each call polls the pipe with a timeout and checks that the worker is alive, so
a worker that dies (killed, out of memory) makes the pending or next call raise
:class:`EngineWorkerError` naming its exit code instead of hanging; an exception raised
inside the worker is raised again in the parent (same type where it pickles) with the
worker's traceback as a note.
"""

from __future__ import annotations

import errno
import io
import multiprocessing
import os
import pickle
import shutil
import tempfile
import threading
import traceback
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch

from algorithms.engines import Response

POLL_SECONDS = 0.1
"""How often a waiting call checks that the worker is still alive."""

CLOSE_SECONDS = 5.0
"""How long :meth:`HFWorkerEngine.close` waits for the worker to exit before terminating it."""


class EngineWorkerError(RuntimeError):
    """The generation worker process died, was closed, or failed in a way that cannot be
    raised as its own exception."""


def _dumps(payload: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    return buffer.getvalue()


def _loads(data: bytes) -> Any:
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)


_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
               "_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_pre_hooks",
               "_load_state_dict_post_hooks")


class LeftOutHook:
    """What a module hook defined inside a function becomes in the worker's copy: a
    no-op (returns ``None``: the module's inputs, outputs or state are left as they are).

    Args:
        name: the original hook's qualified name, for ``repr``.
    """

    def __init__(self, name: str):
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        return None

    def __repr__(self) -> str:
        return f"LeftOutHook({self.name!r})"


def local_hooks(model: Any) -> dict[int, Any]:
    """``id -> hook`` for ``model``'s module hooks defined inside a function (pickle cannot
    name them). The one a policy carries is transformers' ``enable_input_require_grads``
    hook (gradient checkpointing under LoRA): it makes the embeddings' output require
    grad, which matters for backward passes only, never for sampling."""
    found = {}
    for module in model.modules():
        for attribute in _HOOK_DICTS:
            for hook in (module.__dict__.get(attribute) or {}).values():
                function = getattr(hook, "hook", hook)  # torch wraps some in _WrappedHook
                name = getattr(function, "__qualname__", "")
                if "<locals>" in name or "<lambda>" in name:
                    found[id(function)] = function
    return found


def _model_bytes(payload: Any, hooks: dict[int, Any]) -> bytes:
    """``torch.save`` bytes of ``payload``, with each of ``hooks`` (wherever it is
    referenced: hook dicts, hook handles) written as a :class:`LeftOutHook`."""

    class Pickler(pickle.Pickler):
        def reducer_override(self, obj: Any) -> Any:
            if id(obj) in hooks and hooks[id(obj)] is obj:
                return LeftOutHook, (obj.__qualname__,)
            return NotImplemented

    class PickleModule:
        pass

    PickleModule.Pickler = Pickler  # type: ignore[attr-defined]
    buffer = io.BytesIO()
    torch.save(payload, buffer, pickle_module=PickleModule)
    return buffer.getvalue()


def trainable_names(model: Any) -> frozenset[str]:
    """The names of the weights that training can change: the parameters with
    ``requires_grad`` (the LoRA adapters under LoRA, every parameter in full fine-tuning;
    a tied weight once, under its first name)."""
    return frozenset(name for name, parameter in model.named_parameters()
                     if parameter.requires_grad)


def trainable_parameters(model: Any, names: frozenset[str]) -> dict[str, torch.Tensor]:
    """``model``'s parameters named ``names`` (live, on their device)."""
    return {name: parameter for name, parameter in model.named_parameters()
            if name in names}


def trainable_weights(model: Any, names: frozenset[str]) -> dict[str, torch.Tensor]:
    """``model``'s parameters named ``names``, detached, on the CPU."""
    return {name: parameter.detach().cpu()
            for name, parameter in trainable_parameters(model, names).items()}


def load_trainable_weights(model: Any, weights: dict[str, torch.Tensor]) -> None:
    """Copy ``weights`` (:func:`trainable_weights` of a model of the same architecture)
    into ``model``'s parameters of the same names, in place (cast to each parameter's
    dtype).

    Raises:
        ValueError: a name is not one of ``model``'s parameters, or a shape differs
            (checked before anything is written).
    """
    parameters = dict(model.named_parameters())
    unknown = sorted(set(weights) - set(parameters))
    if unknown:
        raise ValueError(f"sync_weights: the worker's model has no parameters {unknown[:5]} "
                         f"({len(unknown)})")
    for name, tensor in weights.items():
        if tuple(tensor.shape) != tuple(parameters[name].shape):
            raise ValueError(f"sync_weights: {name} has shape {tuple(tensor.shape)}, the "
                             f"worker's model has {tuple(parameters[name].shape)}")
    with torch.no_grad():
        for name, tensor in weights.items():
            parameters[name].copy_(tensor)


WEIGHT_TRANSPORTS: tuple[str, ...] = ("auto", "shared", "pipe")
"""How :meth:`HFWorkerEngine.sync_weights` moves the weights (module docstring)."""

SHARED_ALIGNMENT = 64
"""Byte alignment of each tensor inside the shared staging file."""


def shared_memory_dir() -> str:
    """Where the staging file goes: ``/dev/shm`` (memory) where it exists, else the
    temporary directory (a file in the page cache)."""
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


def choose_transport(requested: str, nbytes: int, directory: str) -> str:
    """``"shared"`` or ``"pipe"`` for ``requested`` (one of :data:`WEIGHT_TRANSPORTS`):
    ``"auto"`` takes ``"shared"`` when ``directory`` has room for ``nbytes`` and as much
    again to spare.

    Raises:
        ValueError: an unknown ``requested``.
    """
    if requested not in WEIGHT_TRANSPORTS:
        raise ValueError(f"weight_transport must be one of {WEIGHT_TRANSPORTS}, "
                         f"got {requested!r}")
    if requested != "auto":
        return requested
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        return "pipe"
    return "shared" if free >= 2 * nbytes else "pipe"


def _reserve(descriptor: int, size: int) -> None:
    """Give the open file ``size`` bytes, reserved where the file system can
    (``posix_fallocate``: no room is an ``OSError`` now), else sparse (macOS, file systems
    without it)."""
    fallocate = getattr(os, "posix_fallocate", None)
    if fallocate is not None:
        try:
            fallocate(descriptor, 0, size)
            return
        except OSError as error:
            if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
    os.ftruncate(descriptor, size)


class SharedWeights:
    """Named tensors' staging copy in one memory-mapped file that two processes map.

    The parent builds it from the tensors' shapes and dtypes (:meth:`create`: the file is
    reserved in full with ``posix_fallocate``, so a full ``/dev/shm`` is an ``OSError``
    here, not a crash on first write; a sparse file where the file system cannot reserve);
    the worker maps the same file from :attr:`spec` (:meth:`attach`); the parent
    then removes the file's name (:meth:`unlink`), the mappings stay until both close.

    Attributes:
        views: name -> a tensor of the original shape and dtype, backed by the file.
        spec: ``{"path": ..., "size": bytes, "layout": [(name, offset, dtype, shape)]}``.
    """

    def __init__(self, spec: dict[str, Any]):
        self.spec = spec
        buffer = torch.from_file(spec["path"], shared=True, size=spec["size"],
                                 dtype=torch.uint8)
        self.views: dict[str, torch.Tensor] = {}
        for name, offset, dtype_name, shape in spec["layout"]:
            dtype = getattr(torch, dtype_name)
            nbytes = torch.Size(shape).numel() * dtype.itemsize
            self.views[name] = buffer[offset:offset + nbytes].view(dtype).view(shape)

    @classmethod
    def create(cls, tensors: dict[str, torch.Tensor], directory: str) -> SharedWeights:
        """A new staging file in ``directory`` with room for ``tensors`` (not copied)."""
        layout, offset = [], 0
        for name, tensor in tensors.items():
            layout.append((name, offset, str(tensor.dtype).removeprefix("torch."),
                           tuple(tensor.shape)))
            nbytes = tensor.numel() * tensor.element_size()
            offset += -(-nbytes // SHARED_ALIGNMENT) * SHARED_ALIGNMENT
        size = max(offset, SHARED_ALIGNMENT)
        descriptor, path = tempfile.mkstemp(prefix="agentgym-weights-", dir=directory)
        try:
            _reserve(descriptor, size)
        except OSError:
            os.close(descriptor)
            os.unlink(path)
            raise
        os.close(descriptor)
        try:
            return cls({"path": path, "size": size, "layout": layout})
        except Exception:
            os.unlink(path)
            raise

    @classmethod
    def attach(cls, spec: dict[str, Any]) -> SharedWeights:
        """Map the staging file that another process created."""
        return cls(spec)

    def unlink(self) -> None:
        """Remove the file's name (the mappings stay valid); idempotent."""
        try:
            os.unlink(self.spec["path"])
        except FileNotFoundError:
            pass


def _check_names(sent: set[str], expected: set[str]) -> None:
    unknown, missing = sorted(sent - expected), sorted(expected - sent)
    if unknown or missing:
        raise ValueError(
            "sync_weights: the model's trainable weights do not match the worker's: unknown "
            f"{unknown[:5]} ({len(unknown)}), missing {missing[:5]} ({len(missing)})")


def _serve(connection: Any, threads: int) -> None:
    """The worker's loop: build the engine, then answer requests until ``close`` or until
    the parent's end of the pipe is gone."""
    import signal

    # Ctrl-C reaches the whole process group: the parent decides, and closes the worker
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(threads)
    from algorithms.engines.hf import HFEngine

    def reply(status: str, payload: Any) -> None:
        connection.send_bytes(pickle.dumps((status, payload)))

    try:
        model, tokenizer, options = _loads(connection.recv_bytes())
        model.to(torch.device(options.pop("device", "cpu")))
        model.eval()
        engine = HFEngine(model, tokenizer, **options)
    except (EOFError, OSError):
        return
    except Exception as error:  # reported to the parent, which raises it
        reply("error", _describe(error))
        return
    reply("ok", None)
    shared: SharedWeights | None = None
    while True:
        try:
            operation, arguments = _loads(connection.recv_bytes())
        except (EOFError, OSError):
            return  # the parent closed the pipe or died
        if operation == "close":
            reply("ok", None)
            return
        try:
            if operation == "generate":
                result: Any = engine.generate(**arguments)
            elif operation == "sync":
                load_trainable_weights(model, arguments)
                result = None
            elif operation == "attach":
                shared = SharedWeights.attach(arguments)
                result = None
            elif operation == "sync_shared":
                if shared is None:
                    raise ValueError("sync_shared before the staging file was attached")
                load_trainable_weights(model, shared.views)
                result = None
            elif operation == "call":
                function, args, kwargs = arguments
                result = function(model, *args, **kwargs)
            else:
                raise ValueError(f"unknown worker operation {operation!r}")
        except Exception as error:  # reported to the parent, which raises it
            reply("error", _describe(error))
            continue
        reply("ok", result)


def _describe(error: Exception) -> tuple[Exception | None, str, str]:
    """(the exception if it pickles, a one-line description, the worker's traceback)."""
    try:
        pickle.loads(pickle.dumps(error))
        portable: Exception | None = error
    except Exception:
        portable = None
    return portable, f"{type(error).__name__}: {error}", traceback.format_exc()


def _shutdown(process: Any, connection: Any) -> None:
    """Ask the worker to exit, wait up to :data:`CLOSE_SECONDS`, then terminate (and if
    need be kill) it; reap it either way (no zombie). Safe to call twice."""
    if process.is_alive():
        try:
            connection.send_bytes(_dumps(("close", None)))
        except (OSError, ValueError):
            pass
        process.join(CLOSE_SECONDS)
    if process.is_alive():
        process.terminate()
        process.join(CLOSE_SECONDS)
    if process.is_alive():
        process.kill()
        process.join()
    connection.close()


class HFWorkerEngine:
    """:class:`~algorithms.engines.hf.HFEngine` in a worker process (see the module
    docstring): same :meth:`generate` signature and results (identical tokens and
    log-probs for the same weights and seed, when the worker runs on as many torch
    threads as the in-process engine would), with the weights of the last
    :meth:`sync_weights`.

    One call runs at a time (a lock): calls may come from a background thread of the
    parent. :meth:`close` (also run at garbage collection and interpreter exit) stops the
    worker.

    Args:
        model: the causal LM (PEFT-wrapped or not; on any device: it crosses as a CPU
            copy, which the worker moves to ``device``).
        trainable: the names of the parameters that :meth:`sync_weights` sends; default:
            ``model``'s parameters with ``requires_grad`` (:func:`trainable_names`). A
            torchrun job's engine samples from a frozen full copy of the policy (the
            weight mirror) and names the policy's trainable parameters here.
        tokenizer: its tokenizer (pad and EOS tokens set).
        batch_size: prompts per ``generate`` call in the worker.
        top_p: nucleus sampling threshold (1.0: off).
        threads: torch threads of the worker.
        device: where the worker generates: ``"cpu"`` (a 2-core laptop: generation and the
            update on different cores) or ``"cuda"``/``"cuda:N"`` (a GPU machine: the
            worker holds a second copy of the weights on that GPU, whose kernels the
            update and the generation then share).
        weight_transport: how :meth:`sync_weights` moves the weights: ``"shared"`` (a
            staging file in shared memory), ``"pipe"`` (``torch.save`` bytes) or
            ``"auto"`` (shared where it fits; :func:`choose_transport`). The chosen one is
            :attr:`weight_transport`.

    Raises:
        ValueError: the model cannot be pickled (a hook or attribute pickle cannot name,
            other than the local module hooks that become no-ops); an unknown
            ``weight_transport``.
        OSError: ``weight_transport="shared"`` and the staging file cannot be made (no
            room in shared memory).
        EngineWorkerError: the worker died while starting.
    """

    def __init__(self, model: Any, tokenizer: Any, *, batch_size: int = 64,
                 top_p: float = 1.0, threads: int = 1,
                 trainable: frozenset[str] | None = None, device: str = "cpu",
                 weight_transport: str = "auto"):
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        if weight_transport not in WEIGHT_TRANSPORTS:
            raise ValueError(f"weight_transport must be one of {WEIGHT_TRANSPORTS}, "
                             f"got {weight_transport!r}")
        context = multiprocessing.get_context("spawn")
        self._connection, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, threads), daemon=True,
                                        name="agentgym-generation-worker")
        self._process.start()
        child.close()
        self._finalizer = weakref.finalize(self, _shutdown, self._process, self._connection)
        self._lock = threading.Lock()
        self._failure: str | None = None
        self.batch_size = batch_size
        self.top_p = top_p
        self.threads = threads
        self._trainable = frozenset(trainable_names(model) if trainable is None
                                    else trainable)
        unknown = self._trainable - {name for name, _ in model.named_parameters()}
        if unknown:
            raise ValueError(f"trainable names that are not the model's parameters: "
                             f"{sorted(unknown)[:5]}")
        try:
            message = _model_bytes((model, tokenizer, {"batch_size": batch_size,
                                                       "top_p": top_p, "device": device}),
                                   local_hooks(model))
        except Exception as error:
            self.close()
            raise ValueError(f"HFWorkerEngine cannot send the model to its worker: "
                             f"{type(error).__name__}: {error}") from error
        with self._lock:
            self._request_bytes(message)
        self._shared: SharedWeights | None = None
        self.weight_transport = self._start_transport(model, weight_transport)

    def _start_transport(self, model: Any, requested: str) -> str:
        """Make and attach the shared staging file when the transport is shared; which
        transport is in use."""
        parameters = trainable_parameters(model, self._trainable)
        nbytes = sum(p.numel() * p.element_size() for p in parameters.values())
        directory = shared_memory_dir()
        transport = choose_transport(requested, nbytes, directory)
        if transport == "pipe":
            return transport
        try:
            shared = SharedWeights.create(parameters, directory)
        except OSError:
            if requested == "shared":
                self.close()
                raise
            return "pipe"
        try:
            with self._lock:
                self._request_bytes(_dumps(("attach", shared.spec)))
        finally:
            shared.unlink()  # both processes hold their mapping; nothing stays on disk
        self._shared = shared
        return transport

    @property
    def pid(self) -> int | None:
        """The worker's process id."""
        return self._process.pid

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        temperature: float,
        max_new_tokens: int,
        seed: int,
        stop: Sequence[str] = (),
    ) -> list[Response]:
        """Sample one response per prompt in the worker (see
        :meth:`~algorithms.engines.hf.HFEngine.generate`).

        Raises:
            EngineWorkerError: the worker died or was closed.
            ValueError: (from the worker) an empty prompt, a bad temperature.
        """
        arguments = {"prompts": [[int(token) for token in prompt] for prompt in prompts],
                     "temperature": float(temperature), "max_new_tokens": int(max_new_tokens),
                     "seed": int(seed), "stop": [str(s) for s in stop]}
        with self._lock:
            return self._request_bytes(_dumps(("generate", arguments)))

    def sync_weights(self, model: Any) -> None:
        """Send ``model``'s trainable weights (:func:`trainable_weights` of the names the
        engine was built with) to the worker, which loads them in place: it then samples
        the current policy. Through the shared staging file when
        :attr:`weight_transport` is ``"shared"`` (copied in under the lock, so no load
        reads it half-written), else as bytes through the pipe.

        Raises:
            ValueError: ``model`` lacks one of those names (checked before anything is
                sent).
            EngineWorkerError: the worker died or was closed.
        """
        if self._shared is not None:
            parameters = trainable_parameters(model, self._trainable)
            _check_names(set(parameters), self._trainable)
            views = self._shared.views
            for name, parameter in parameters.items():
                if parameter.shape != views[name].shape:
                    raise ValueError(f"sync_weights: {name} has shape "
                                     f"{tuple(parameter.shape)}, the worker's model has "
                                     f"{tuple(views[name].shape)}")
            with self._lock, torch.no_grad():
                if self._failure is not None:
                    raise EngineWorkerError(self._failure)
                for name, parameter in parameters.items():
                    views[name].copy_(parameter.detach())
                self._request_bytes(_dumps(("sync_shared", None)))
            return
        weights = trainable_weights(model, self._trainable)
        _check_names(set(weights), self._trainable)
        with self._lock:
            self._request_bytes(_dumps(("sync", weights)))

    def call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``function(model, *args, **kwargs)`` run in the worker on its model (the weights
        of the last :meth:`sync_weights`), between generations; its result.

        ``function`` must be a module-level function (it crosses by name and is imported
        in the worker), and its arguments and result must pickle. The layer above uses
        it to score a rollout on the worker's cores (``run.reference_in_worker``), so
        this module needs no import from it.

        Raises:
            EngineWorkerError: the worker died or was closed.
            Exception: whatever ``function`` raised in the worker (same type where it
                pickles), with the worker's traceback as a note.
        """
        with self._lock:
            return self._request_bytes(_dumps(("call", (function, args, kwargs))))

    def release(self) -> None:
        """Nothing to free (the worker keeps its copy of the weights)."""

    def close(self) -> None:
        """Stop the worker and reap it (idempotent)."""
        if self._failure is None:
            self._failure = "the generation worker was closed"
        self._finalizer()

    def _request_bytes(self, message: bytes) -> Any:
        if self._failure is not None:
            raise EngineWorkerError(self._failure)
        try:
            self._connection.send_bytes(message)
            while not self._connection.poll(POLL_SECONDS):
                if not self._process.is_alive() and not self._connection.poll(0):
                    raise EOFError
            status, payload = pickle.loads(self._connection.recv_bytes())
        except (EOFError, OSError) as error:
            raise self._died() from error
        if status == "ok":
            return payload
        original, description, worker_traceback = payload
        if original is None:
            raise EngineWorkerError(f"the generation worker failed: {description}")
        original.add_note(f"raised in the generation worker process:\n{worker_traceback}")
        raise original

    def _died(self) -> EngineWorkerError:
        if self._failure is None or not self._process.is_alive():
            self._process.join(1.0)
        if self._failure is None:
            self._failure = (
                f"the generation worker process died (exit code {self._process.exitcode}); "
                "-9 is a kill, often the out-of-memory killer: lower --generation.batch-size "
                "or use the in-process HF engine")
            self._finalizer()
        return EngineWorkerError(self._failure)
