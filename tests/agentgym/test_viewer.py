"""The rollout viewer: its JSON API on a recorded run, and the page in a real browser.

Browser tests drive Debian's ``chromium`` with Playwright for Python (Playwright's own
browser download cannot run here: ``executable_path`` points at the system binary). They
skip, with the reason, when either is missing; ``.ci/run`` installs both. Screenshots go to
``$AGENTGYM_SCREENSHOTS`` when set, else to the test's temporary folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agentgym.viewer.data import read_records, run_summary
from agentgym.viewer.server import make_server

REPO = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[Path]:
    """Two recorded runs on the scripted env (tiny model): GiGPO and GRPO, evaluated."""
    pytest.importorskip("transformers")
    from algorithms.training.trainer import Trainer
    from tests.algorithms.scripted_config import scripted_config
    from tests.algorithms.tiny import make_policy

    root = tmp_path_factory.mktemp("runs")
    made = []
    for algo, seed in (("gigpo", 0), ("grpo", 1)):
        config = scripted_config(algo, iterations=2, eval_every=2, seed=seed)
        Trainer(config, policy=make_policy(seed=seed), run_dir=root / algo).run()
        made.append(root / algo)
    return made


@pytest.fixture(scope="module")
def server(runs):
    server = make_server(runs, port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _get(url: str):
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def test_the_viewer_imports_nothing_from_algorithms():
    code = ("import sys, agentgym.viewer.__main__, agentgym.viewer; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('algorithms', 'torch'));"
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_api_serves_the_runs_records_and_metrics(runs, server):
    summaries = _get(f"{server}/api/runs")
    assert [s["name"] for s in summaries] == ["gigpo", "grpo"]
    assert summaries[0] == json.loads(json.dumps(run_summary(runs[0])))
    files = {(f["split"], f["iteration"]) for f in summaries[0]["records"]}
    assert files == {("train", 1), ("train", 2), ("eval", 2)}
    records = _get(f"{server}/api/records?run=0&split=train&iteration=2")
    assert records == read_records(runs[0] / "records" / "train" / "iter_000002.jsonl.gz")
    metrics = _get(f"{server}/api/metrics?run=1")
    assert [m["iteration"] for m in metrics] == [1, 2]
    assert summaries[1]["success"]["source"] == "evaluation iter_000002"
    with pytest.raises(urllib.error.HTTPError) as error:
        _get(f"{server}/api/records?run=0&split=train&iteration=9")
    assert error.value.code == 400


@pytest.fixture(scope="module")
def visual_run(tmp_path_factory) -> Path:
    """A recorded run of the tiny vision-language model on the visual grid."""
    pytest.importorskip("transformers")
    pytest.importorskip("PIL")
    from algorithms.training.trainer import Trainer
    from tests.algorithms.visual_env import make_vision_policy, visual_config

    root = tmp_path_factory.mktemp("visual") / "vlm"
    trainer = Trainer(visual_config(iterations=1, eval_every=1), policy=make_vision_policy(),
                      run_dir=root)
    trainer.run()
    return root


@pytest.fixture(scope="module")
def tool_run(tmp_path_factory) -> Path:
    """A recorded run of the tiny model acting through tool calls on the scripted env."""
    pytest.importorskip("transformers")
    import torch

    from algorithms.config import replace
    from algorithms.training.tiny_model import load_tiny_policy
    from algorithms.training.trainer import Trainer
    from tests.algorithms.scripted_config import scripted_config

    config = replace(scripted_config("gigpo", iterations=1, eval_every=1),
                     prompt={"action_format": "tool-call", "max_prompt_tokens": 2048},
                     generation={"max_new_tokens": 24}, model={"name_or_path": "tiny"})
    root = tmp_path_factory.mktemp("tools") / "tool-calls"
    Trainer(config, policy=load_tiny_policy(config, torch.device("cpu")), run_dir=root).run()
    return root


def test_tool_call_records_carry_the_statuses_and_the_tool_results(tool_run):
    records = read_records(tool_run / "records" / "train" / "iter_000001.jsonl.gz")
    steps = [step for record in records for step in record["steps"]]
    assert steps and all(step["tool_call"]["result"] for step in steps)
    from algorithms.agent.tool_calls import CALL_STATUSES

    assert all(set(step["tool_call"]["statuses"]) <= set(CALL_STATUSES) for step in steps)
    bad = [step for step in steps if step["tool_call"]["statuses"] != ["ok"]]
    assert all(not step["format_ok"] and step["action"] == "" for step in bad)
    assert all(step["tool_call"]["result"].startswith("Error: ") for step in bad)


@pytest.mark.browser
def test_a_tool_call_step_shows_its_call_and_result(tool_run, browser, shots):
    server = make_server([tool_run], port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        page = _open(browser, f"http://127.0.0.1:{server.server_address[1]}")
        records = read_records(tool_run / "records" / "train" / "iter_000001.jsonl.gz")
        page.click("#tab-rollouts")
        page.click('[data-testid="iteration-train-1"]')
        record = records[0]
        step = record["steps"][0]
        page.click(f'.step[data-traj="{record["traj_id"]}"][data-step="{step["step"]}"]')
        call = page.inner_text("#detail-tool-call")
        assert call.startswith(", ".join(step["tool_call"]["statuses"]) + " → ")
        assert page.inner_text("#detail-tool-result") == step["tool_call"]["result"]
        page.screenshot(path=str(shots / "tool-call-step.png"), full_page=True)
        page.close()
    finally:
        server.shutdown()
        server.server_close()


def test_api_serves_each_steps_image(visual_run):
    import io

    from PIL import Image

    server = make_server([visual_run], port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        for split in ("train", "eval"):
            records = _get(f"{url}/api/records?run=0&split={split}&iteration=1")
            steps = [step for record in records for step in record["steps"]]
            assert steps and all(len(step["images"]) == 1 for step in steps)
            name = steps[-1]["images"][0]
            assert name.startswith("iter_000001/t") and name.endswith("_0.png")
            with urllib.request.urlopen(f"{url}/api/image?run=0&split={split}&name={name}",
                                        timeout=30) as response:
                assert response.headers["Content-Type"] == "image/png"
                picture = Image.open(io.BytesIO(response.read()))
            assert picture.size == (24, 24)  # the grid as the env drew it (3 x 8 pixels)
            assert (visual_run / "records" / split / name).is_file()
        for bad in ("../config.json", "iter_000001/../../config.json", "iter_1/x.png",
                    "iter_000001/missing.png"):
            with pytest.raises(urllib.error.HTTPError) as error:
                urllib.request.urlopen(f"{url}/api/image?run=0&split=train&name={bad}",
                                       timeout=30)
            assert error.value.code == 400
    finally:
        server.shutdown()
        server.server_close()


def test_the_host_flag_binds_the_address_asked_and_says_a_bad_one_in_one_line(runs):
    server = make_server(runs, port=0, host="0.0.0.0")
    try:
        assert server.server_address[0] == "0.0.0.0"
    finally:
        server.server_close()
    result = subprocess.run([sys.executable, "-m", "agentgym.viewer", str(runs[0]), "--host",
                             "192.0.2.1", "--port", "0"],  # TEST-NET-1: never this machine's
                            cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip() == ("agentgym.viewer: error: cannot serve on 192.0.2.1:0: "
                                     "Cannot assign requested address")


def test_the_command_refuses_a_folder_without_a_run(tmp_path):
    result = subprocess.run([sys.executable, "-m", "agentgym.viewer", str(tmp_path)],
                            cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip() == (f"agentgym.viewer: error: {tmp_path} holds no run (no "
                                     "config.json, metrics.jsonl or records/); pass a folder "
                                     "under runs/")


# ---------------------------------------------------------------------- the browser
def _chromium() -> str:
    pytest.importorskip("playwright.sync_api",
                        reason="Playwright for Python is not installed (pip install playwright)")
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("no system Chromium (Debian: apt-get install chromium)")
    return path


@pytest.fixture(scope="module")
def browser():
    chromium = _chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True,
                                             args=["--no-sandbox"])
        yield browser
        browser.close()


def _open(browser, url: str):
    """A new 1400x900 page on the viewer at ``url``, its first run's iterations and
    metrics loaded (every run of these tests has metrics)."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(url)
    page.wait_for_selector(".iterations button, .iterations span")
    page.wait_for_selector("#metric-select option", state="attached")
    return page


@pytest.fixture(scope="module")
def page(browser, server):
    """One page the first browser tests share, in order."""
    page = _open(browser, server)
    yield page
    page.close()


@pytest.fixture()
def fresh_page(browser, server):
    """A page of its own on the GiGPO and GRPO runs."""
    page = _open(browser, server)
    yield page
    page.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    folder = os.environ.get("AGENTGYM_SCREENSHOTS")
    path = Path(folder) if folder else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.mark.browser
def test_click_through_to_a_step_shows_the_record(runs, page, shots):
    records = read_records(runs[0] / "records" / "train" / "iter_000002.jsonl.gz")
    page.click("#tab-rollouts")
    page.click('[data-testid="iteration-train-2"]')
    record = records[1]
    step = record["steps"][-1]
    target = f'.step[data-traj="{record["traj_id"]}"][data-step="{step["step"]}"]'
    page.click(target)
    assert page.inner_text("#detail-observation") == step["observation"]
    assert page.inner_text("#detail-response") == step["response"]
    assert page.inner_text("#detail-action") == step["action"]
    assert page.text_content("#detail-prompt") == step["prompt"]
    reward = page.inner_text("#detail-reward")
    assert reward.startswith(f"{round(step['reward'], 3):g}")
    group = page.inner_text("#detail-step-group")
    assert f"#{step['step_group']}, size {step['step_group_size']}" in group
    for traj, index in step["step_group_members"]:
        assert f"traj {traj} step {index}" in group
    assert page.locator(".group").count() == len({r["group"] for r in records})
    page.screenshot(path=str(shots / "step.png"), full_page=True)


@pytest.mark.browser
def test_a_visual_step_shows_its_image(visual_run, browser, shots):
    server = make_server([visual_run], port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        page = _open(browser, f"http://127.0.0.1:{server.server_address[1]}")
        records = read_records(visual_run / "records" / "train" / "iter_000001.jsonl.gz")
        page.click("#tab-rollouts")
        page.click('[data-testid="iteration-train-1"]')
        record = records[0]
        step = record["steps"][0]
        page.click(f'.step[data-traj="{record["traj_id"]}"][data-step="{step["step"]}"]')
        image = page.locator("img.observation-image")
        image.wait_for()
        page.wait_for_function(
            "() => document.querySelector('img.observation-image').naturalWidth > 0")
        assert image.get_attribute("alt") == step["images"][0]
        assert image.evaluate("node => node.naturalWidth") == 24
        page.screenshot(path=str(shots / "visual-step.png"), full_page=True)
        page.close()
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.browser
def test_filters_and_search(runs, page, shots):
    records = read_records(runs[0] / "records" / "train" / "iter_000001.jsonl.gz")
    page.click("#tab-rollouts")
    page.click('[data-testid="iteration-train-1"]')
    page.select_option("#filter-outcome", "success")
    successes = [r for r in records if r["outcome"]["success"]]
    assert page.locator(".traj").count() == len(successes)
    page.select_option("#filter-outcome", "failure")
    assert page.locator(".traj").count() == len(records) - len(successes)
    page.select_option("#filter-outcome", "all")
    page.check("#filter-invalid")
    invalid = [r for r in records
               if any(not s["valid_action"] or not s["format_ok"] for s in r["steps"])]
    assert page.locator(".traj").count() == len(invalid)
    page.uncheck("#filter-invalid")
    word = records[0]["steps"][0]["action"] or records[0]["steps"][0]["observation"].split()[0]
    page.fill("#search", word)
    hits = [r for r in records if any(word.lower() in "\n".join(
        [s["observation"], s["response"], s["action"], s["prompt"]]).lower()
        for s in r["steps"]) or word.lower() in r["task"].lower()]
    assert page.locator(".traj").count() == len(hits) > 0
    page.screenshot(path=str(shots / "search.png"), full_page=True)
    page.fill("#search", "")


@pytest.mark.browser
def test_evaluation_records_curves_and_comparison(runs, page, shots):
    page.click("#tab-rollouts")
    page.click('[data-testid="iteration-eval-2"]')
    evaluation = read_records(runs[0] / "records" / "eval" / "iter_000002.jsonl.gz")
    assert page.locator(".traj").count() == len(evaluation)
    page.click("#tab-curves")
    page.select_option("#metric-select", "rollout/return")
    assert page.locator("#curve circle").count() == 2
    page.hover('#curve circle[data-iteration="2"]')
    metrics = [json.loads(line) for line in
               (runs[0] / "metrics.jsonl").read_text().splitlines()]
    value = round(metrics[1]["rollout/return"], 3)
    assert page.inner_text("#curve-value") == f"rollout/return at iteration 2: {value:g}"
    page.screenshot(path=str(shots / "curves.png"), full_page=True)
    page.click("#tab-compare")
    row = page.locator('#compare-table tr[data-task-type="overall"] td')
    for index, run in enumerate(runs):
        results = json.loads((run / "eval" / "iter_000002.json").read_text())
        assert row.nth(index + 1).inner_text() == f"{round(results['success'], 3):g}"
    page.screenshot(path=str(shots / "compare.png"), full_page=True)


@pytest.mark.browser
def test_the_page_opens_on_the_newest_training_iteration(runs, fresh_page):
    """Issue 60: the page used to open on an empty pane until an iteration was clicked."""
    from playwright.sync_api import expect

    records = read_records(runs[0] / "records" / "train" / "iter_000002.jsonl.gz")
    expect(fresh_page.locator(".iterations button.active")).to_have_attribute(
        "data-testid", "iteration-train-2")  # not eval 2, the newest file of another kind
    expect(fresh_page.locator(".traj")).to_have_count(len(records))
    expect(fresh_page.locator("#shown")).to_have_text(
        f"{len(records)} of {len(records)} trajectories")


@pytest.mark.browser
def test_the_envs_reply_to_each_action_is_shown_and_the_final_one_ends_each_column(
        runs, fresh_page, shots):
    """Issue 60: the env's answer to the last action ("Game over", "Invalid move", a turn
    limit) was never recorded; it ends each trajectory's column and is the last step's
    reply, and an earlier step's reply is the next step's observation."""
    from playwright.sync_api import expect

    page = fresh_page
    records = read_records(runs[0] / "records" / "train" / "iter_000002.jsonl.gz")
    expect(page.locator(".traj")).to_have_count(len(records))
    record = next(r for r in records if len(r["steps"]) > 1)
    final = page.locator(f'.final[data-final="{record["traj_id"]}"]')
    assert final.inner_text() == f"end: {record['final_observation']}"
    _step(page, record, record["steps"][-1]).click()
    assert page.inner_text("#detail-reply") == record["final_observation"]
    _step(page, record, record["steps"][0]).click()
    assert page.inner_text("#detail-reply") == record["steps"][1]["observation"]
    final.click()  # the end shows the last step
    expect(page.locator("#detail-title")).to_have_text(
        f"train 2 · traj {record['traj_id']}, step {record['steps'][-1]['step']} "
        f"(group {record['group']})")
    page.screenshot(path=str(shots / "final-observation.png"), full_page=True)


# -------------------------------------- issue 27: a new user's four findings, one test each
SUCCESS_CURVE = (0.05, 0.08, 0.12, 0.15, 0.2, 0.26, 0.31, 0.38, 0.44, 0.5, 0.57, 0.62)
"""``rollout/success`` of the hand-written run, iterations 1 to 12."""


@pytest.fixture(scope="module")
def more_runs(tmp_path_factory) -> list[Path]:
    """A recorded GiGPO run with groups of 4 trajectories (one iteration), and a
    hand-written run folder whose env has task types: 12 iterations of metrics and an
    evaluation with success per task type (the files the viewer reads, nothing else)."""
    pytest.importorskip("transformers")
    from algorithms.training.trainer import Trainer
    from tests.algorithms.scripted_config import scripted_config
    from tests.algorithms.tiny import make_policy

    root = tmp_path_factory.mktemp("more_runs")
    config = scripted_config("gigpo", iterations=1, group_size=4, seed=2)
    Trainer(config, policy=make_policy(seed=2), run_dir=root / "groups-of-4").run()
    typed = root / "typed"
    (typed / "eval").mkdir(parents=True)
    (typed / "config.json").write_text(json.dumps(
        {"algo": "gigpo", "env": {"env_id": "AgentGym/ALFWorld-v0"}}))
    (typed / "metrics.jsonl").write_text("".join(
        json.dumps({"iteration": iteration, "rollout/success": success,
                    "rollout/return": 0.0}) + "\n"
        for iteration, success in enumerate(SUCCESS_CURVE, start=1)))
    (typed / "eval" / "iter_000012.json").write_text(json.dumps(
        {"success": 0.5, "per_task_type": {"pick": {"success": 0.75},
                                           "clean": {"success": 0.25}}}))
    return [root / "groups-of-4", typed]


@pytest.fixture()
def more_page(browser, more_runs):
    """A page of its own on :func:`more_runs`."""
    server = make_server(more_runs, port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    page = _open(browser, f"http://127.0.0.1:{server.server_address[1]}")
    yield page
    page.close()
    server.shutdown()
    server.server_close()


def _step(page, record: dict, step: dict):
    return page.locator(f'.step[data-traj="{record["traj_id"]}"][data-step="{step["step"]}"]')


@pytest.mark.browser
def test_a_new_iteration_or_run_clears_the_selected_step(runs, fresh_page, shots):
    """Issue 27, 1: the detail panel never shows a step of another iteration than the one
    on screen (it used to keep the old step while the highlight moved to the new one)."""
    from playwright.sync_api import expect

    page = fresh_page
    first, second = (read_records(runs[0] / "records" / "train" / f"iter_00000{i}.jsonl.gz")
                     for i in (1, 2))
    # a (trajectory, step) slot both iterations have, with different responses
    slot = next((record, step) for record, other in zip(first, second, strict=True)
                for step, other_step in zip(record["steps"], other["steps"], strict=False)
                if record["traj_id"] == other["traj_id"]
                and step["response"] != other_step["response"])
    record, step = slot
    page.click('[data-testid="iteration-train-1"]')
    _step(page, record, step).click()
    assert page.inner_text("#detail-response") == step["response"]

    page.click('[data-testid="iteration-train-2"]')
    expect(page.locator("#detail")).to_have_text("Click a step.")
    assert page.locator(".step.selected").count() == 0
    other = next(r for r in second if r["traj_id"] == record["traj_id"])
    other_step = other["steps"][step["step"]]
    _step(page, other, other_step).click()
    expect(page.locator("#detail-title")).to_have_text(
        f"train 2 · traj {other['traj_id']}, step {other_step['step']} "
        f"(group {other['group']})")
    assert page.inner_text("#detail-response") == other_step["response"]
    assert page.locator(".step.selected").count() == 1
    page.screenshot(path=str(shots / "selection-after-switch.png"), full_page=True)

    page.select_option("#run-select", "1")  # another run: it opens on its own newest
    expect(page.locator("#detail")).to_have_text("Click a step.")
    expect(page.locator(".iterations button.active")).to_have_attribute(
        "data-testid", "iteration-train-2")
    expect(page.locator(".traj")).to_have_count(len(
        read_records(runs[1] / "records" / "train" / "iter_000002.jsonl.gz")))
    assert page.locator(".step.selected").count() == 0
    expect(page.locator("#detail")).to_have_text("Click a step.")


@pytest.mark.browser
@pytest.mark.parametrize("width", [1400, 1024])
def test_every_trajectory_of_a_group_of_four_is_in_view(more_runs, more_page, shots, width):
    """Issue 27, 2: at 1400 px the fourth trajectory of a group was cut off behind a
    scroller that showed no bar; columns now wrap onto further rows."""
    page = more_page
    page.set_viewport_size({"width": width, "height": 900})
    records = read_records(more_runs[0] / "records" / "train" / "iter_000001.jsonl.gz")
    page.click('[data-testid="iteration-train-1"]')
    page.wait_for_selector(".traj")
    groups = page.evaluate("""() => [...document.querySelectorAll('.group')].map((g) => {
        const box = g.getBoundingClientRect();
        const row = g.querySelector('.trajs');
        return {left: box.left, right: box.right,
                scroll: row.scrollWidth, client: row.clientWidth,
                trajs: [...g.querySelectorAll('.traj')].map((t) => {
                    const r = t.getBoundingClientRect();
                    return {left: r.left, right: r.right, width: r.width}; })}; })""")
    assert [len(g["trajs"]) for g in groups] == [4, 4] == [
        sum(r["group"] == group for r in records) for group in (0, 1)]
    for group in groups:
        assert group["scroll"] <= group["client"]  # nothing hidden sideways
        for traj in group["trajs"]:
            assert group["left"] <= traj["left"] and traj["right"] <= group["right"] <= width
            assert traj["width"] >= 150 - 4  # the 150 px column (its 3 px border, padding)
    page.screenshot(path=str(shots / f"groups-of-4-{width}px.png"), full_page=True)


@pytest.mark.browser
def test_compare_shows_one_summary_row(more_runs, more_page, fresh_page, shots):
    """Issue 27, 3: a run without task types has the one bucket "all", which repeated the
    "overall" row; only named task types get rows."""
    rows = """() => [...document.querySelectorAll('#compare-table tr[data-task-type]')]
              .map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent))"""
    fresh_page.click("#tab-compare")
    assert [row[0] for row in fresh_page.evaluate(rows)] == ["overall"]
    more_page.click("#tab-compare")
    assert more_page.evaluate(rows) == [["overall", "0", "0.5"], ["clean", "–", "0.25"],
                                        ["pick", "–", "0.75"]]
    more_page.screenshot(path=str(shots / "compare-task-types.png"), full_page=True)


@pytest.mark.browser
def test_curve_axes_have_labelled_ticks(more_page, shots):
    """Issue 27, 4: the curves were labelled only at their ends; both axes now carry
    ticks at round steps (1, 2 or 5 times a power of ten), labelled, and a title."""
    from playwright.sync_api import expect

    page = more_page
    page.select_option("#run-select", "1")
    expect(page.locator("#metric-select option")).to_have_count(2)  # its two metrics
    page.click("#tab-curves")
    page.select_option("#metric-select", "rollout/success")
    axes = """() => ({
        y: [...document.querySelectorAll('#curve .y-tick')].map((g) =>
            [g.querySelector('text').textContent, Number(g.querySelector('line').getAttribute('y1'))]),
        x: [...document.querySelectorAll('#curve .x-tick')].map((g) =>
            [g.querySelector('text').textContent, Number(g.querySelector('line').getAttribute('x1'))]),
        points: [...document.querySelectorAll('#curve circle')].map((c) =>
            [Number(c.getAttribute('cx')), Number(c.getAttribute('cy'))]),
        titles: [...document.querySelectorAll('#curve .x-label, #curve .y-label')]
            .map((t) => t.textContent)})"""
    drawn = page.evaluate(axes)
    assert [label for label, _ in drawn["y"]] == ["0", "0.1", "0.2", "0.3", "0.4", "0.5",
                                                  "0.6", "0.7"]
    assert [label for label, _ in drawn["x"]] == ["0", "2", "4", "6", "8", "10", "12"]
    assert drawn["titles"] == ["iteration", "rollout/success"]

    def at(ticks, value):  # the position of value on an axis, from its end ticks
        (low, low_px), (high, high_px) = ticks[0], ticks[-1]
        return low_px + (value - float(low)) / (float(high) - float(low)) * (high_px - low_px)

    for ticks in (drawn["x"], drawn["y"]):
        gaps = [b[1] - a[1] for a, b in zip(ticks, ticks[1:], strict=False)]
        assert max(gaps) - min(gaps) < 1e-6 and abs(gaps[0]) > 20  # evenly spaced
    for (cx, cy), (iteration, success) in zip(drawn["points"], enumerate(SUCCESS_CURVE, 1),
                                              strict=True):
        assert cx == pytest.approx(at(drawn["x"], iteration), abs=1e-6)
        assert cy == pytest.approx(at(drawn["y"], success), abs=1e-6)
    page.screenshot(path=str(shots / "curve-ticks.png"), full_page=True)

    cases = [  # (low, high, count, integer) -> ticks, computed by hand
        ((0.05, 0.62, 5, False), [0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]),
        ((0.3, 0.9, 5, False), [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]),
        ((-1, 1, 5, False), [-1, -0.5, 0, 0.5, 1]),
        ((0.00012, 0.00047, 5, False), [0.0001, 0.00015, 0.0002, 0.00025, 0.0003,
                                        0.00035, 0.0004, 0.00045, 0.0005]),
        ((100, 1000, 5, True), [0, 200, 400, 600, 800, 1000]),
        ((1, 12, 6, True), [0, 2, 4, 6, 8, 10, 12]),
        ((1, 2, 6, True), [1, 2]),
    ]
    for args, ticks in cases:
        assert page.evaluate("(args) => axisTicks(...args)", list(args)) == ticks, args

    page.select_option("#metric-select", "rollout/return")  # constant: centred, ±1 around 0
    drawn = page.evaluate(axes)
    assert [label for label, _ in drawn["y"]] == ["-1", "-0.5", "0", "0.5", "1"]
    assert [cy for _, cy in drawn["points"]] == pytest.approx([at(drawn["y"], 0.0)] * 12)


@pytest.fixture(scope="module")
def harness_run(tmp_path_factory) -> Path:
    """A recorded ``train.py --agent`` run: the tiny model played by an openai-SDK loop of
    one's own through the gateway (one iteration)."""
    pytest.importorskip("openai")
    import train
    from tests.algorithms.gateway.test_agent_training import LOOPS, SMOKE

    root = tmp_path_factory.mktemp("harness")
    train.main([*SMOKE, "--run.iterations", "1", "--run.output-dir", str(root),
                "--run.run-name", "harness", "--agent", f"{LOOPS}:keydoor"])
    return root / "harness"


def test_harness_records_carry_each_call(harness_run):
    records = read_records(harness_run / "records" / "train" / "iter_000001.jsonl.gz")
    steps = [step for record in records for step in record["steps"]]
    assert steps and all(step["call"]["response"]["role"] == "assistant" for step in steps)
    assert all(step["call"]["joined"] == (step["step"] > 0) for step in steps)
    assert all(step["call"]["anchor_from"] == "default" for step in steps)
    assert all(record["final_observation"] is None for record in records)


@pytest.mark.browser
def test_a_harness_step_shows_the_call_as_made(harness_run, browser, shots):
    server = make_server([harness_run], port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        page = _open(browser, f"http://127.0.0.1:{server.server_address[1]}")
        records = read_records(harness_run / "records" / "train" / "iter_000001.jsonl.gz")
        page.click("#tab-rollouts")
        page.click('[data-testid="iteration-train-1"]')
        record = records[0]
        first, second = record["steps"][0], record["steps"][1]
        label = page.inner_text(f'.step[data-traj="{record["traj_id"]}"][data-step="1"]')
        assert label.startswith("call 1: ") and " · joined · r " in label
        page.click(f'.step[data-traj="{record["traj_id"]}"][data-step="0"]')
        messages = page.inner_text("#detail-call-messages")
        assert messages.startswith("[user] Your task: ")
        assert page.inner_text("#detail-call-joined") == "the episode's first call"
        page.click(f'.step[data-traj="{record["traj_id"]}"][data-step="1"]')
        assert page.inner_text("#detail-call-messages").startswith(
            f"[{second['call']['messages'][0]['role']}] ")
        assert page.inner_text("#detail-call-joined").startswith(
            "joined: the prompt extends the previous call's prompt and completion")
        assert page.inner_text("#detail-anchor") == (
            f"{second['call']['anchor']} (default: what the loop sent since the model last "
            "spoke)")
        assert first["call"]["anchor"] != second["call"]["anchor"]
        page.screenshot(path=str(shots / "harness-call.png"), full_page=True)
        page.close()
    finally:
        server.shutdown()
        server.server_close()
