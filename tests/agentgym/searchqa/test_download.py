"""The download command, offline: the plan, and the fetch/concatenate/gunzip steps on local files."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from agentgym.searchqa import download


def test_plan_lists_verified_sources() -> None:
    items = download.plan()
    assert {i.group for i in items} == {"qa", "corpus", "index"}
    urls = [i.url for i in items]
    assert all(u.startswith("https://huggingface.co/datasets/") for u in urls)
    assert any(u.endswith("PeterJinGo/wiki-18-e5-index/resolve/main/part_aa") for u in urls)
    assert any(u.endswith("PeterJinGo/wiki-18-corpus/resolve/main/wiki-18.jsonl.gz") for u in urls)
    assert any(u.endswith("nq_hotpotqa_train/resolve/main/train.parquet") for u in urls)
    assert len({i.relative_path for i in items}) == len(items)
    assert [i.group for i in download.plan(["qa"])] == ["qa"] * 9
    with pytest.raises(ValueError, match="unknown groups"):
        download.plan(["weights"])


def test_dry_run_fetches_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert download.main(["--out", str(tmp_path / "data"), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("https://") == len(download.plan())
    assert not (tmp_path / "data").exists()


def test_bad_group_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit_info:
        download.main(["--out", str(tmp_path), "--what", "qa,models"])
    assert exit_info.value.code == 2


def test_fetch_concatenate_gunzip_on_local_files(tmp_path: Path) -> None:
    source = tmp_path / "source.bin"
    source.write_bytes(b"abc" * 1000)
    target = download.fetch(source.as_uri(), tmp_path / "out" / "copy.bin")
    assert target.read_bytes() == source.read_bytes()
    assert not (tmp_path / "out" / "copy.bin.part").exists()
    source.write_bytes(b"changed")
    assert download.fetch(source.as_uri(), target).read_bytes() == b"abc" * 1000  # skipped

    parts = [tmp_path / "part_aa", tmp_path / "part_ab"]
    parts[0].write_bytes(b"first-")
    parts[1].write_bytes(b"second")
    assert download.concatenate(parts, tmp_path / "e5_Flat.index").read_bytes() == b"first-second"

    with gzip.open(tmp_path / "c.jsonl.gz", "wb") as handle:
        handle.write(b'{"id": "0", "contents": "\\"T\\"\\ntext"}\n')
    out = download.gunzip(tmp_path / "c.jsonl.gz", tmp_path / "c.jsonl")
    assert out.read_text().startswith('{"id": "0"')


def test_fetch_reports_failure(tmp_path: Path) -> None:
    missing = (tmp_path / "missing.bin").as_uri()
    with pytest.raises(RuntimeError, match="failed after 1 tries"):
        download.fetch(missing, tmp_path / "x.bin", retries=1)
    assert not (tmp_path / "x.bin").exists()
