"""Reading and writing JSONL passage corpora.

Two line layouts are accepted:

- Search-R1 / wiki-18: ``{"id": "0", "contents": "\\"Title\\"\\ntext"}``;
- FlashRAG-style split fields: ``{"id": "0", "title": "Title", "text": "text"}``, turned into
  the ``contents`` layout above.

Extra keys are ignored. Integer ids are accepted and turned into strings. Blank lines are
skipped. Anything else raises :class:`CorpusFormatError` naming the file and line number.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path

from retrieval.base import Document


class CorpusFormatError(ValueError):
    """A corpus line is not a valid passage; the message names the file and line."""


def contents_from_title_text(title: str, text: str) -> str:
    """Search-R1's ``contents`` layout: the quoted title, a newline, the text."""
    return f'"{title}"\n{text}'


def parse_corpus_line(line: str, *, source: str = "<corpus>", line_number: int = 0) -> Document:
    """Parse one non-blank JSONL line into a :class:`Document`.

    Args:
        line: the raw line (with or without its trailing newline).
        source: a name for the file, used in error messages.
        line_number: the 1-based line number, used in error messages.

    Raises:
        CorpusFormatError: invalid JSON, not an object, or missing / mistyped fields.
    """
    where = f"{source}:{line_number}"
    try:
        row = json.loads(line)
    except json.JSONDecodeError as error:
        raise CorpusFormatError(
            f"{where}: invalid JSON ({error.msg} at column {error.colno})"
        ) from None
    if not isinstance(row, dict):
        raise CorpusFormatError(f"{where}: expected a JSON object, got {type(row).__name__}")
    if "id" not in row:
        raise CorpusFormatError(f"{where}: missing 'id' (keys: {sorted(row)})")
    doc_id = row["id"]
    if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)):
        raise CorpusFormatError(f"{where}: 'id' must be a string or an integer, got {doc_id!r}")
    if "contents" in row:
        contents = row["contents"]
        if not isinstance(contents, str):
            raise CorpusFormatError(
                f"{where}: 'contents' must be a string, got {type(contents).__name__}"
            )
    elif "text" in row:
        title, text = row.get("title", ""), row["text"]
        if not isinstance(text, str) or not isinstance(title, str):
            raise CorpusFormatError(f"{where}: 'title' and 'text' must be strings")
        contents = contents_from_title_text(title, text) if title else text
    else:
        raise CorpusFormatError(
            f"{where}: expected 'contents' or 'title'/'text' (keys: {sorted(row)})"
        )
    return Document(id=str(doc_id), contents=contents)


def read_corpus(path: str | Path) -> Iterator[Document]:
    """Stream the documents of a JSONL corpus, one line at a time.

    Args:
        path: a ``.jsonl`` file (see the module docstring for the accepted layouts).

    Yields:
        One :class:`Document` per non-blank line, in file order.

    Raises:
        FileNotFoundError: the file does not exist.
        CorpusFormatError: a malformed line (the message has the file name and line number).
    """
    path = Path(path)
    with path.open(encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if line.strip():
                yield parse_corpus_line(line, source=str(path), line_number=line_number)


def count_corpus_lines(path: str | Path) -> int:
    """The number of non-blank lines of a corpus (for progress bars), read in binary chunks."""
    count = 0
    with Path(path).open("rb") as handle:
        for line in handle:
            if line.strip():
                count += 1
    return count


def write_corpus(documents: Iterable[Document], path: str | Path) -> int:
    """Write documents as Search-R1 JSONL (``{"id", "contents"}`` per line).

    Returns:
        The number of documents written.
    """
    count = 0
    with Path(path).open("w", encoding="utf-8") as handle:
        for document in documents:
            handle.write(json.dumps(document.to_json(), ensure_ascii=False) + "\n")
            count += 1
    return count


def chunked(documents: Iterable[Document], size: int) -> Iterator[list[Document]]:
    """Consecutive lists of ``size`` documents (the last may be shorter), streaming."""
    iterator = iter(documents)
    while chunk := list(islice(iterator, size)):
        yield chunk
