"""The differential tests' machinery: recorded fixtures, their summaries, and CI's refusal
to let a ``differential`` test skip."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tools import originals

REPO = Path(__file__).resolve().parents[1]
FIXTURES = ("sokoban", "sokoban_visual", "gym_cards", "frozenlake", "prompts", "recipe")

SKIPPING = '''
import pytest

pytestmark = []


@pytest.fixture
def missing_checkout():
    pytest.skip("no checkout")


@pytest.mark.differential
@pytest.mark.skipif(True, reason="a skipif mark")
def test_marked_skipif():
    pass


@pytest.mark.differential
def test_marked_skip_in_the_body():
    pytest.skip("skipped in the body")


@pytest.mark.differential
def test_marked_skipping_fixture(missing_checkout):
    pass


def test_unmarked_skip():
    pytest.skip("not differential")


@pytest.mark.differential
@pytest.mark.xfail(reason="expected")
def test_marked_xfail():
    assert False


@pytest.mark.differential
def test_marked_pass():
    pass
'''


def _run_skipping(tmp_path: Path, require: bool) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import pytest_runtest_makereport  # noqa: F401\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    differential: x\n")
    (tmp_path / "test_skipping.py").write_text(textwrap.dedent(SKIPPING))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("AGENTGYM_REQUIRE_DIFFERENTIAL", None)
    if require:
        env["AGENTGYM_REQUIRE_DIFFERENTIAL"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfs", "-p", "no:cacheprovider",
                           str(tmp_path)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)


def test_a_skipped_differential_test_fails_when_they_are_required(tmp_path):
    done = _run_skipping(tmp_path, require=True)
    last = done.stdout.strip().splitlines()[-1]
    # a skip in setup (a skipif mark, a fixture) fails there: pytest counts it an error
    assert "1 failed, 1 passed, 1 skipped, 1 xfailed, 2 errors" in last, done.stdout
    assert done.returncode == 1
    for reason in ("a skipif mark", "skipped in the body", "no checkout"):
        assert f"AGENTGYM_REQUIRE_DIFFERENTIAL=1 (CI): {reason}" in done.stdout, done.stdout


def test_a_skipped_differential_test_skips_by_default(tmp_path):
    done = _run_skipping(tmp_path, require=False)
    assert "1 passed, 4 skipped, 1 xfailed" in done.stdout.strip().splitlines()[-1], done.stdout
    assert done.returncode == 0


def test_ci_requires_the_differential_tests():
    script = (REPO / ".ci" / "run").read_text()
    assert "export AGENTGYM_REQUIRE_DIFFERENTIAL=1" in script
    assert script.index("AGENTGYM_REQUIRE_DIFFERENTIAL=1") < script.index("python -m pytest")


@pytest.mark.parametrize("name", FIXTURES)
def test_every_fixture_says_what_made_it(name):
    fixture = originals.read_fixture(name)
    assert tuple(fixture) == originals.HEADER
    assert fixture["original"] in originals.ORIGINALS.values()
    for commit in fixture["commit"].values():
        repository, sha = commit.split("@")
        assert repository in originals.ORIGINALS.values() and len(sha) == 40
    assert fixture["command"].startswith("python tools/record_originals.py ")
    if "--only" in fixture["command"]:
        assert name in fixture["command"].split("--only", 1)[1].split()
    assert fixture["recorded_with"]["python"] and fixture["what"]


def test_the_fixtures_stay_small():
    sizes = {name: originals.fixture_path(name).stat().st_size for name in FIXTURES}
    assert sum(sizes.values()) < 2_000_000, sizes
    assert sorted(p.name for p in originals.FIXTURES.iterdir()) == sorted(
        f"{name}.json.gz" for name in FIXTURES)


def test_a_fixture_is_written_the_same_way_every_time(tmp_path):
    fixture = dict.fromkeys(originals.HEADER, "x") | {"cases": {"a": [1.5, None]}}
    first = originals.write_fixture("f", fixture, tmp_path).read_bytes()
    second = originals.write_fixture("f", fixture, tmp_path).read_bytes()
    assert first == second
    assert json.loads(gzip.decompress(first)) == fixture
    with pytest.raises(ValueError, match="keys"):
        originals.write_fixture("g", {"cases": 1}, tmp_path)
    with pytest.raises(FileNotFoundError, match="record_originals"):
        originals.read_fixture("none", tmp_path)


def test_a_summary_sees_a_change_of_any_single_element():
    rng = np.random.default_rng(0)
    values = rng.normal(0.0, 3.0, size=(300, 24))
    summary = originals.summarize(values)
    assert originals.summary_difference(summary, values.copy()) < 1e-12
    for row, column in ((0, 0), (123, 7), (299, 23), (17, 5)):  # sampled or not
        changed = values.copy()
        changed[row, column] += 2e-6
        assert originals.summary_difference(summary, changed) == pytest.approx(2e-6, rel=1e-3)
    assert originals.summary_difference(summary, values[:-1]) == float("inf")
    spread = values + rng.normal(0.0, 1e-5, size=values.shape)  # many small changes
    assert originals.summary_difference(summary, spread) > 1e-5


def test_a_summary_samples_where_the_mask_is_true():
    values = np.arange(12.0).reshape(3, 4)
    mask = np.array([[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1]], dtype=bool)
    summary = originals.summarize(values, mask)
    assert summary["values"] == values[mask].tolist() and summary["shape"] == [3, 4]


def test_the_recorder_names_a_folder_that_is_no_checkout(tmp_path):
    done = subprocess.run([sys.executable, "tools/record_originals.py", "--verl-agent",
                           str(tmp_path), "--verl-agent-commit", "0" * 40, "--only", "sokoban",
                           "--out", str(tmp_path / "out")], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"sokoban: {tmp_path} has no agent_system/environments/env_package/sokoban")
    assert not (tmp_path / "out").exists()
