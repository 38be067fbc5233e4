"""A disk-backed document store: the corpus as JSONL plus a byte-offset table.

Indexes (FAISS, BM25) only know row numbers; the store maps a row number back to its
:class:`~retrieval.base.Document` without holding the corpus text in memory. The text file
is memory-mapped read-only, so lookups are thread-safe and cost one slice and one
``json.loads``; wiki-18 (21M passages, ~14 GB of text) needs only its 170 MB offset table
in RAM.

Layout of a store folder::

    documents.jsonl          one {"id", "contents"} object per line, row i on line i
    documents.offsets.npy    int64, shape (n + 1,): byte offset of each line, then the file size
"""

from __future__ import annotations

import json
import mmap
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType

import numpy as np

from retrieval.base import Document

DOCUMENTS_FILE = "documents.jsonl"
OFFSETS_FILE = "documents.offsets.npy"


class DocumentStoreWriter:
    """Append documents one by one; :meth:`close` writes the offset table.

    Use as a context manager. Nothing is opened until :meth:`open` (or ``with``).
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self._handle = None
        self._offsets: list[int] = []
        self._position = 0

    def open(self) -> DocumentStoreWriter:
        """Create the folder and start ``documents.jsonl`` (truncating an old one)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self._handle = (self.directory / DOCUMENTS_FILE).open("wb")
        self._offsets, self._position = [], 0
        return self

    def add(self, document: Document) -> int:
        """Append one document; returns its row number."""
        if self._handle is None:
            raise RuntimeError("DocumentStoreWriter.add() before open()")
        line = (json.dumps(document.to_json(), ensure_ascii=False) + "\n").encode("utf-8")
        self._offsets.append(self._position)
        self._handle.write(line)
        self._position += len(line)
        return len(self._offsets) - 1

    def add_many(self, documents: Iterable[Document]) -> None:
        """Append documents in order."""
        for document in documents:
            self.add(document)

    def __len__(self) -> int:
        return len(self._offsets)

    def close(self) -> None:
        """Flush the text file and write the offset table."""
        if self._handle is None:
            return
        self._handle.close()
        self._handle = None
        offsets = np.asarray([*self._offsets, self._position], dtype=np.int64)
        np.save(self.directory / OFFSETS_FILE, offsets)

    def __enter__(self) -> DocumentStoreWriter:
        return self.open()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class DocumentStore:
    """Read-only random access to the documents of a store folder, by row number."""

    def __init__(self, directory: Path, offsets: np.ndarray, text: mmap.mmap | bytes) -> None:
        self.directory = directory
        self._offsets = offsets
        self._text = text

    @classmethod
    def open(cls, directory: str | Path) -> DocumentStore:
        """Open a store folder written by :class:`DocumentStoreWriter`.

        Raises:
            FileNotFoundError: a store file is missing.
            ValueError: the offset table does not match the text file.
        """
        directory = Path(directory)
        text_path, offsets_path = directory / DOCUMENTS_FILE, directory / OFFSETS_FILE
        for path in (text_path, offsets_path):
            if not path.exists():
                raise FileNotFoundError(f"document store file missing: {path}")
        offsets = np.load(offsets_path, mmap_mode="r")
        size = text_path.stat().st_size
        if offsets.ndim != 1 or len(offsets) == 0 or int(offsets[-1]) != size:
            raise ValueError(
                f"{offsets_path} does not match {text_path} (ends at "
                f"{int(offsets[-1]) if len(offsets) else 'nothing'}, file has {size} bytes)"
            )
        if size == 0:
            return cls(directory, offsets, b"")
        with text_path.open("rb") as handle:
            text = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        return cls(directory, offsets, text)

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, row: int) -> Document:
        if not 0 <= row < len(self):
            raise IndexError(f"row {row} out of range for a store of {len(self)} documents")
        start, end = int(self._offsets[row]), int(self._offsets[row + 1])
        data = json.loads(self._text[start:end])
        return Document(id=data["id"], contents=data["contents"])

    def get_many(self, rows: Sequence[int]) -> list[Document]:
        """The documents at ``rows``, in that order."""
        return [self[int(row)] for row in rows]

    def copy_to(self, directory: str | Path) -> None:
        """Copy the store files into ``directory`` (no-op when it is this store's folder)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        if directory.resolve() == self.directory.resolve():
            return
        for name in (DOCUMENTS_FILE, OFFSETS_FILE):
            shutil.copyfile(self.directory / name, directory / name)
