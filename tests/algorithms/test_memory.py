"""Freed C-heap memory goes back to the system (glibc ``malloc_trim``)."""

from __future__ import annotations

import ctypes
import re
import sys
from pathlib import Path

import pytest
import torch

from algorithms.runs import memory


def _rss_bytes() -> int:
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.M).group(1)) * 1024


@pytest.mark.skipif(memory._malloc_trim() is None, reason="needs glibc's malloc_trim")
def test_freed_heap_pages_are_returned_to_the_system():
    """Every other block of a heap region is freed: the live blocks in between keep glibc
    from trimming it on its own; release_freed_memory returns the freed pages."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    block = 96 * 1024  # under glibc's initial mmap threshold (128 KiB): heap memory
    pointers = [libc.malloc(block) for _ in range(1200)]
    try:
        for pointer in pointers:
            ctypes.memset(pointer, 1, block)  # touch every page
        for pointer in pointers[::2]:
            libc.free(pointer)
        before = _rss_bytes()
        assert memory.release_freed_memory()
        released = before - _rss_bytes()
        # 600 freed blocks of 96 KiB (56 MiB), minus partial pages at their edges
        assert released > 40 * 1024 * 1024, released
    finally:
        for pointer in pointers[1::2]:
            libc.free(pointer)


def test_release_is_a_no_op_without_glibc(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    memory._malloc_trim.cache_clear()
    try:
        assert memory._malloc_trim() is None
        assert memory.release_freed_memory() is False
    finally:
        memory._malloc_trim.cache_clear()


def test_release_runs_before_and_after_each_forward_pass(monkeypatch):
    calls = []
    monkeypatch.setattr(memory, "release_freed_memory", lambda: calls.append(1) or True)
    layer = torch.nn.Linear(2, 2)
    handles = memory.release_around_each_call(layer)
    inputs = torch.ones(1, 2)
    torch.testing.assert_close(layer(inputs), inputs @ layer.weight.T + layer.bias)
    layer(inputs)
    assert len(calls) == 4
    for handle in handles:
        handle.remove()
    layer(inputs)
    assert len(calls) == 4
