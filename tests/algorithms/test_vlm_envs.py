"""A vision-language policy on the real visual envs, through ``train.py`` as a user runs it:
``--algo sft`` on visual Sokoban's BFS expert and on the EZPoints expert, ``--eval-only``
from that checkpoint, RL from it with ``--resume``, and the viewer serving each step's
frame. The tiny random Qwen2.5-VL of :mod:`studies.tiny_vlm` is saved as a model folder
(its words read from the env) and loaded by ``--model.name-or-path``, as a hub model would
be."""

from __future__ import annotations

import io
import json
import threading
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("PIL")

import train  # noqa: E402
from agentgym.viewer.data import read_records  # noqa: E402
from agentgym.viewer.server import make_server  # noqa: E402
from algorithms.agent.metrics import read_metrics  # noqa: E402

FRAMES = {"AgentGym/SokobanVisual-v0": (96, 96), "AgentGym/EZPoints-v0": (300, 300)}
MAX_STEPS = {"AgentGym/SokobanVisual-v0": "15", "AgentGym/EZPoints-v0": "8"}  # the presets'



def _common(model: Path, env_id: str, out: Path) -> list[str]:
    return ["--model.name-or-path", str(model), "--env.env-id", env_id, "--env.env-kwargs",
            "{}", "--env.eval-env-kwargs", json.dumps({"first_seed": 65_536}),
            "--prompt.no-think", "--generation.engine", "hf", "--generation.max-new-tokens",
            "8", "--env.num-groups", "2", "--env.group-size", "2", "--env.max-steps",
            MAX_STEPS[env_id],
            "--env.eval-episodes", "2", "--run.output-dir", str(out), "--run.no-tensorboard",
            "--run.no-progress", "--run.torch-threads", "1", "--run.record-trajectories", "4"]


@pytest.fixture(scope="module", params=sorted(FRAMES))
def sft_run(request, tmp_path_factory):
    """``--algo sft`` on the env's expert: (env id, model folder, common flags, run dir)."""
    import algorithms.precision as precision
    from benchmarks.vlm_smoke import env_texts
    from studies.tiny_vlm import save_tiny_vlm

    env_id = request.param
    root = tmp_path_factory.mktemp(env_id.split("/")[-1])
    model = save_tiny_vlm(root / "model", env_texts(env_id, {}))
    common = _common(model, env_id, root)
    with pytest.MonkeyPatch.context() as patch:  # float32, as conftest's patch gives the tests
        patch.setattr(precision, "cpu_has_bf16", lambda: False)
        metrics = train.main(["--algo", "sft", *common, "--run.run-name", "sft",
                              "--sft.episodes", "4", "--sft.max-steps", "3",
                              "--sft.batch-size", "4", "--sft.micro-batch-size", "4",
                              "--sft.lr", "1e-3"])
    assert metrics["sft/loss"] > 0
    return env_id, common, root


def test_sft_trains_on_the_envs_expert_with_its_frames(sft_run):
    from algorithms.sft.data import read_trajectories

    env_id, _, root = sft_run
    trajectories = read_trajectories(root / "sft" / "sft_data.jsonl")
    assert len(trajectories) == 4 and all(t.extra["success"] for t in trajectories)
    steps = [step for trajectory in trajectories for step in trajectory.steps]
    assert all(step.image is not None and step.image.shape[:2] == FRAMES[env_id]
               for step in steps)
    if env_id == "AgentGym/EZPoints-v0":  # the expert answers as verl-agent's prompt asks
        assert all(json.loads(step.action)["action"] for step in steps)
        assert [json.loads(s.action)["action"] for s in trajectories[0].steps][-1] == "="
    assert len(read_metrics(root / "sft" / "metrics.jsonl")) == 3


def test_eval_only_from_the_sft_checkpoint_and_the_viewer_shows_each_frame(sft_run):
    env_id, common, root = sft_run
    metrics = train.main(["--algo", "gigpo", *common, "--run.run-name", "eval",
                          "--eval-only", "--checkpoint", str(root / "sft")])
    assert 0 <= metrics["eval/success"] <= 1
    records = read_records(next((root / "eval" / "records" / "eval").glob("*.jsonl.gz")))
    steps = [step for record in records for step in record["steps"]]
    assert steps and all(len(step["images"]) == 1 for step in steps)
    server = make_server([root / "eval"], port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        from PIL import Image

        name = steps[-1]["images"][0]
        iteration = int(name.split("/")[0].split("_")[1])
        with urllib.request.urlopen(f"{url}/api/records?run=0&split=eval&iteration="
                                    f"{iteration}", timeout=30) as response:
            served = json.loads(response.read())
        assert [s["images"] for r in served for s in r["steps"]] == \
            [s["images"] for s in steps]
        with urllib.request.urlopen(f"{url}/api/image?run=0&split=eval&name={name}",
                                    timeout=30) as response:
            assert response.headers["Content-Type"] == "image/png"
            picture = Image.open(io.BytesIO(response.read()))
        assert picture.size[::-1] == FRAMES[env_id]  # the frame as the env drew it
    finally:
        server.shutdown()
        server.server_close()


def test_rl_from_the_sft_checkpoint_resumes_exactly(sft_run):
    env_id, common, root = sft_run
    start = ["--algo", "gigpo", *common, "--model.init-checkpoint", str(root / "sft")]
    train.main([*start, "--run.run-name", "straight", "--run.iterations", "2"])
    train.main([*start, "--run.run-name", "resumed", "--run.iterations", "1"])
    train.main([*start, "--run.run-name", "resumed", "--run.iterations", "2", "--resume"])
    straight = read_metrics(root / "straight" / "metrics.jsonl")
    resumed = read_metrics(root / "resumed" / "metrics.jsonl")
    assert len(straight) == len(resumed) == 2
    keys = [k for k in straight[1] if not k.startswith(("time/", "throughput/"))]
    assert {k: resumed[1][k] for k in keys} == pytest.approx(
        {k: straight[1][k] for k in keys}, abs=1e-6)
    records = read_records(root / "resumed" / "records" / "train" / "iter_000002.jsonl.gz")
    assert all(len(step["images"]) == 1 for record in records for step in record["steps"])
