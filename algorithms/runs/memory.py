"""Handing freed host memory back to the operating system between training passes.

PyTorch allocates CPU tensors with ``malloc``. glibc serves the many mid-sized tensors of
a forward/backward pass (here 0.1 to 32 MB) from its heap, and the small long-lived
allocations made in between (autograd nodes, saved tensors, Python objects) keep the
freed space from coalescing and from being returned: measured on the ``cpu-demo`` update
(SmolLM2-135M, 8 rows of ~160 tokens), a gradient-checkpointed forward pass held 0.33 GB
of live memory in a 1.23 GB heap, and the heap grew with each micro-batch. glibc's
``malloc_trim`` returns every free page of its heaps to the system (``madvise``); called
before and after each forward pass of a micro-batch, the next pass starts from what is
live. What remains is the fragmentation inside one pass (docs/memory.md).

The alternative, a low fixed ``M_MMAP_THRESHOLD`` (each tensor of 1 MB or more its own
mapping, unmapped when freed), kept an ALFWorld-length micro-batch (8 rows of ~330
tokens) at 1.35 GB instead of 3.8 GB, but its page faults took the micro-batch from 40 s
to 58 s on the 2-core development VM, so it is not used.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from typing import Any


@functools.cache
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, or ``None`` (another OS or C library)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # musl and other libcs have no malloc_trim
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    return function


def release_freed_memory() -> bool:
    """Return the C heap's free pages to the operating system (glibc ``malloc_trim(0)``).

    Live memory is untouched; a later allocation that reuses a released page costs a page
    fault. A no-op where the C library has no ``malloc_trim``.

    Returns:
        Whether anything could be released (glibc's answer), ``False`` off glibc.
    """
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False


def release_around_each_call(module: Any) -> list[Any]:
    """Call :func:`release_freed_memory` before and after every forward pass of ``module``
    (the learner's scorer: each micro-batch of the scoring and update passes).

    After the forward pass, the pages its transient tensors freed go back before the
    backward pass grows the heap again (measured on an ALFWorld-length update micro-batch,
    8 rows of ~330 tokens: the forward pass peaked 2 GB above the live memory, the
    backward pass 0.8 GB more on top of it without this release).

    Returns:
        The hooks' handles (``.remove()`` undoes them).
    """

    def before(_module: Any, _args: Any) -> None:  # None: the arguments unchanged
        release_freed_memory()

    def after(_module: Any, _args: Any, _output: Any) -> None:  # None: the output unchanged
        release_freed_memory()

    return [module.register_forward_pre_hook(before), module.register_forward_hook(after)]
