"""Every ``python`` and ``bash`` code block of README.md and of ``docs/**/*.md`` runs as pasted.

The blocks of one file run in that file's order, each in a fresh process, all in one
sandbox folder per file (links to the repository's files), so a block may use what an
earlier block of the same page wrote -- as a user following that page would. A block's
needs are written in an HTML comment on the line just above its opening fence (invisible
on GitHub)::

    <!-- readme-test: slow -->              only with ``pytest -m slow`` (long downloads of
                                            time: training, building indexes)
    <!-- readme-test: gpu -->               skipped without a CUDA GPU
    <!-- readme-test: data -->              skipped without ../shared/data
    <!-- readme-test: server -->            serves until stopped: started, its
                                            http://127.0.0.1:PORT/ line awaited and
                                            fetched, then stopped
    <!-- readme-test: skip=REASON -->       never run (say why: installs packages, runs
                                            this test suite, needs the internet)

Tags combine with commas (``<!-- readme-test: slow, server -->``); ``skip=REASON`` comes
last and its reason may hold commas. A block without a
comment runs in the default suite, so it must be quick and need nothing but the install.
A fence may be indented (a block inside a list item); its marker then has the same indent.

The same files' relative links must reach an existing file, and a ``#anchor`` a heading
of the page it names (GitHub's heading ids).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
DOC_FILES = [README, *sorted(DOCS.rglob("*.md"))]
SHARED = Path(os.environ.get("AGENTGYM_SHARED_DATA", REPO.parent / "shared" / "data"))
RUN_LANGUAGES = ("python", "bash")
TAGS = {"slow", "gpu", "data", "server", "skip"}
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*readme-test:\s*(.*?)\s*-->\s*$")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


@dataclass(frozen=True)
class Block:
    line: int
    language: str
    code: str
    tags: dict[str, str]
    file: str = "README.md"


def _name(path: Path) -> str:
    """``path`` relative to the repository, as the test ids and messages name it."""
    return path.relative_to(REPO).as_posix()


def readme_blocks(text: str, file: str = "README.md") -> list[Block]:
    """The fenced blocks of ``text`` (the page ``file``) with their ``readme-test`` tags.

    Raises:
        ValueError: an unknown tag, ``skip`` without a reason, or a fence never closed.
    """
    lines = text.splitlines()
    blocks = []
    index = 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if not match:
            index += 1
            continue
        start = index
        indent = match.group(1)
        end = next((i for i in range(start + 1, len(lines))
                    if lines[i].strip().startswith("```")), None)
        if end is None:
            raise ValueError(f"{file}:{start + 1}: code block never closed")
        tags: dict[str, str] = {}
        marker = MARKER.match(lines[start - 1]) if start else None
        if marker:
            content, has_skip, reason = marker.group(1).partition("skip=")
            if has_skip:
                if not reason.strip():
                    raise ValueError(f"{file}:{start}: bad readme-test tag 'skip=' "
                                     "(say why)")
                tags["skip"] = reason.strip()
            for item in filter(None, (t.strip() for t in content.split(","))):
                if item not in TAGS - {"skip"}:
                    raise ValueError(f"{file}:{start}: bad readme-test tag {item!r}")
                tags[item] = ""
        code = "\n".join(line[len(indent):] if line.startswith(indent) else line
                         for line in lines[start + 1:end])
        blocks.append(Block(start + 1, match.group(2), code, tags, file))
        index = end + 1
    return blocks


BLOCKS = [b for path in DOC_FILES
          for b in readme_blocks(path.read_text(encoding="utf-8"), _name(path))
          if b.language in RUN_LANGUAGES]


def _params():
    for block in BLOCKS:
        marks = [pytest.mark.slow] if "slow" in block.tags else []
        if "data" in block.tags:
            marks.append(pytest.mark.data)
        yield pytest.param(block, id=f"{block.file}-line-{block.line}", marks=marks)


@pytest.fixture(scope="module")
def sandboxes(tmp_path_factory):
    """``sandbox(file)``: the folder, made on first use, in which that page's blocks run and
    write; it looks like the repository root (links to its entries)."""
    made: dict[str, Path] = {}

    def sandbox(file: str) -> Path:
        if file not in made:
            root = tmp_path_factory.mktemp(re.sub(r"\W+", "-", file.removesuffix(".md")))
            for entry in REPO.iterdir():
                if entry.name not in {".git", "runs", "data"}:
                    (root / entry.name).symlink_to(entry)
            shared = root.parent / "shared"  # blocks reach the samples as ../shared/data
            if SHARED.is_dir() and not shared.exists():
                shared.symlink_to(SHARED.parent)
            made[file] = root
        return made[file]

    return sandbox


def _command(block: Block) -> list[str]:
    if block.language == "python":
        return [sys.executable, "-c", block.code]
    return ["bash", "-euo", "pipefail", "-c", block.code]


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def _serve(block: Block, cwd: Path) -> None:
    """Start a serving block, fetch the URL it prints, stop it."""
    process = subprocess.Popen(_command(block), cwd=cwd, env=_environment(), text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        output = []
        url = None
        while url is None and time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line and process.poll() is not None:
                break
            output.append(line)
            found = re.search(r"http://127\.0\.0\.1:\d+", line)
            url = found.group(0) + "/" if found else None
        assert url, f"no URL printed by the block:\n{''.join(output)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                status = response.status
        except urllib.error.HTTPError as error:  # an answer all the same (say 404 at /)
            status = error.code
        assert status < 500, f"{url} answered {status}"
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


def test_tags_are_known_and_every_run_block_has_a_language():
    """Unlabelled fences are not run; every python/bash block is in BLOCKS."""
    unlabelled = [f"{b.file}:{b.line}" for path in DOC_FILES
                  for b in readme_blocks(path.read_text(encoding="utf-8"), _name(path))
                  if not b.language]
    assert not unlabelled, f"code blocks without a language: {unlabelled}"
    assert {b.file for b in BLOCKS} >= {"README.md"}, "no runnable README blocks found"
    assert any(b.file.startswith("docs/") for b in BLOCKS), "no runnable docs blocks found"


def test_readme_blocks_parse_their_tags():
    text = ("text\n<!-- readme-test: slow, skip=needs the internet -->\n```bash\necho hi\n"
            "```\n```python\nprint(1)\n```\n")
    first, second = readme_blocks(text)
    assert first.tags == {"slow": "", "skip": "needs the internet"} and first.code == "echo hi"
    assert second.tags == {} and second.language == "python" and second.line == 6
    with pytest.raises(ValueError, match="bad readme-test tag 'fast'"):
        readme_blocks("<!-- readme-test: fast -->\n```bash\n```\n")
    with pytest.raises(ValueError, match="bad readme-test tag 'skip'"):
        readme_blocks("<!-- readme-test: skip -->\n```bash\n```\n")
    with pytest.raises(ValueError, match="say why"):
        readme_blocks("<!-- readme-test: skip= -->\n```bash\n```\n")
    (block,) = readme_blocks("<!-- readme-test: gpu, skip=a, b -->\n```bash\n```\n")
    assert block.tags == {"gpu": "", "skip": "a, b"}
    (block,) = readme_blocks("1. Run:\n\n   <!-- readme-test: slow -->\n   ```bash\n"
                             "   echo hi\n     echo indented\n   ```\n", "docs/x.md")
    assert block.tags == {"slow": ""} and block.code == "echo hi\n  echo indented"
    assert block.file == "docs/x.md" and block.line == 4
    with pytest.raises(ValueError, match="docs/x.md:1: code block never closed"):
        readme_blocks("```bash\necho hi\n", "docs/x.md")


@pytest.mark.parametrize("block", list(_params()))
def test_readme_block_runs(block: Block, sandboxes):
    where = f"{block.file} line {block.line}"
    if "skip" in block.tags:
        pytest.skip(f"{where}: {block.tags['skip']}")
    if "data" in block.tags and not SHARED.is_dir():
        pytest.skip(f"{where} needs {SHARED} (benchmark samples)")
    if "gpu" in block.tags:
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip(f"{where} needs a CUDA GPU")
    sandbox = sandboxes(block.file)
    if "server" in block.tags:
        _serve(block, sandbox)
        return
    timeout = 3600 if "slow" in block.tags else 600
    result = subprocess.run(_command(block), cwd=sandbox, env=_environment(), text=True,
                            capture_output=True, timeout=timeout)
    assert result.returncode == 0, (
        f"{where} failed ({result.returncode}):\n{block.code}\n"
        f"--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}")


def heading_id(text: str) -> str:
    """The id GitHub gives a heading: its text (links and code reduced to their text),
    lower case, without punctuation, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def _prose(text: str) -> list[tuple[int, str]]:
    """(line number, line) of ``text`` outside fenced code blocks."""
    lines, inside = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip().startswith("```"):
            inside = not inside
        elif not inside:
            lines.append((number, line))
    return lines


def heading_ids(text: str) -> set[str]:
    """The ids of the headings of a markdown page (a repeated one gets ``-1``, ``-2``...)."""
    ids: set[str] = set()
    for _, line in _prose(text):
        match = HEADING.match(line)
        if match:
            base = heading_id(match.group(1))
            found, count = base, 0
            while found in ids:
                count += 1
                found = f"{base}-{count}"
            ids.add(found)
    return ids


def broken_links(path: Path) -> list[str]:
    """The relative links of the page ``path`` (outside code) whose file does not exist, or
    whose ``#anchor`` is no heading of the page it names."""
    text = path.read_text(encoding="utf-8")
    broken = []
    for number, line in _prose(text):
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
                continue  # http(s):, mailto: ...
            file, _, anchor = target.partition("#")
            resolved = (path.parent / file).resolve() if file else path
            where = f"{_name(path)}:{number}: {target}"
            if not resolved.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and resolved.suffix == ".md" and \
                    anchor not in heading_ids(resolved.read_text(encoding="utf-8")):
                broken.append(f"{where} (no heading #{anchor} there)")
            elif anchor and resolved.suffix != ".md":
                broken.append(f"{where} (an anchor into a file that is not markdown)")
    return broken


def test_heading_ids_are_githubs():
    assert heading_id("Learning: does step-level credit help?") == \
        "learning-does-step-level-credit-help"
    assert heading_id("Many GPUs and machines (`torchrun`, FSDP2, Ray)") == \
        "many-gpus-and-machines-torchrun-fsdp2-ray"
    assert heading_id("Retrieval (`retrieval/`)") == "retrieval-retrieval"
    assert heading_id("See [the recipe](recipe.md) × 2") == "see-the-recipe--2"
    assert heading_ids("# A\n```bash\n# not a heading\n```\n## A\n") == {"a", "a-1"}


def test_broken_links_are_found(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text("# Title\n\n## Part two\n", encoding="utf-8")
    page = tmp_path / "README.md"
    page.write_text("[ok](docs/b.md#part-two) [ok](#top) [web](https://x.org/a#b)\n"
                    "[gone](docs/c.md) [bad anchor](docs/b.md#part-three)\n"
                    "`[in code](nowhere.md)`\n```text\n[in a block](nowhere.md)\n```\n"
                    "# Top\n", encoding="utf-8")
    assert broken_links(page) == ["README.md:2: docs/c.md (no such file)",
                                  "README.md:2: docs/b.md#part-three (no heading "
                                  "#part-three there)"]


@pytest.mark.parametrize("path", DOC_FILES, ids=_name)
def test_relative_links_resolve(path: Path):
    """Every relative link of README.md and docs/ reaches a file, and its #anchor a heading."""
    assert not broken_links(path), "broken links:\n" + "\n".join(broken_links(path))
