"""The OpenEnv server and client, on real servers bound to 127.0.0.1.

Slow: needs OpenEnv (``pip install openenv==0.10.0``), which CI does not install because
it pins pillow<13 through gradio and so cannot share an environment with ``.[cpu]``.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time

import gymnasium as gym
import numpy as np
import pytest

import agentgym  # noqa: F401
from agentgym.openenv.codec import info_to_json
from tests.conftest import REPO_ROOT, SHARED_DATA

pytest.importorskip("openenv.core.env_server", reason="OpenEnv is not installed (pip install openenv)")
websockets_sync = pytest.importorskip("websockets.sync.client")
httpx = pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")

from agentgym.openenv import AgentGymClient  # noqa: E402
from agentgym.openenv import server as server_module  # noqa: E402

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_healthy(port: int, process: subprocess.Popen | None = None, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}: {process.stderr.read()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.3)
    raise TimeoutError(f"no server on port {port} after {timeout} s")


ALFWORLD_DATA = SHARED_DATA / "alfworld"
SERVED = {
    "AgentGym/Scripted-v0": {"anchor": "state"},
    "AgentGym/ALFWorld-v0": {"data_path": str(ALFWORLD_DATA), "split": "valid_seen",
                             "anchor": "state", "max_steps": 12},
    "AgentGym/WebShop-v0": {"anchor": "state", "max_steps": 8},
    "AgentGym/SearchQA-v0": {"anchor": "state"},
}


def _policy_action(rng: np.random.Generator, info: dict, turn: int) -> str:
    """A seeded stand-in for an agent: admissible actions, with an invalid one now and then."""
    if turn % 4 == 3:
        return "xyzzy ✓ not an action"
    actions = list(info["admissible_actions"])
    if not actions:  # free-form (Search-QA)
        return "<search>capital city</search>" if turn % 2 == 0 else "<answer>paris</answer>"
    action = actions[int(rng.integers(len(actions)))]
    return action.replace("<your query>", "red shoes")


@pytest.mark.parametrize("env_id", sorted(SERVED))
def test_full_episodes_through_the_server_equal_gym_make(env_id):
    kwargs = SERVED[env_id]
    if env_id == "AgentGym/ALFWorld-v0" and not ALFWORLD_DATA.exists():
        pytest.skip(f"real ALFWorld games not found at {ALFWORLD_DATA}")
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "agentgym.openenv", "serve", env_id, "--port", str(port),
         "--env-kwargs", json.dumps(kwargs)],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        _wait_healthy(port, process)
        local = gym.make(env_id, **kwargs)
        with AgentGymClient(base_url=f"http://127.0.0.1:{port}").sync() as remote:
            for seed in (0, 7):
                rng = np.random.default_rng(seed)
                observation, info = local.reset(seed=seed)
                result = remote.reset(seed=seed)
                assert result.observation.text == observation
                assert result.observation.info == info_to_json(info)
                assert result.reward is None and not result.done
                done, turn = False, 0
                while not done:
                    action = _policy_action(rng, info, turn)
                    observation, reward, terminated, truncated, info = local.step(action)
                    result = remote.step(action)
                    assert result.observation.as_gym_step() == (
                        observation, reward, terminated, truncated, info_to_json(info))
                    assert result.done == (terminated or truncated)
                    done, turn = terminated or truncated, turn + 1
                state = remote.state()
                assert (state.step_count, state.task_id) == (turn, info["task_id"])
                assert (state.terminated, state.truncated) == (terminated, truncated)
        local.close()
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture
def scripted_server(monkeypatch):
    """An in-process server of Scripted-v0 (2 sessions at most) that counts env closes."""
    closed: list[str] = []
    original_close = server_module.AgentGymEnvironment.close

    def counting_close(self):
        if self._env is not None:
            closed.append(self.state.task_id)
        original_close(self)

    monkeypatch.setattr(server_module.AgentGymEnvironment, "close", counting_close)
    app = server_module.create_app("AgentGym/Scripted-v0", max_sessions=2, check_env=False)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    _wait_healthy(port)
    yield port, closed
    server.should_exit = True
    thread.join(timeout=30)


def _wait_for(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_sessions_are_isolated_bounded_and_closed_on_disconnect(scripted_server):
    port, closed = scripted_server
    url = f"http://127.0.0.1:{port}"
    first = AgentGymClient(base_url=url).sync()
    second = AgentGymClient(base_url=url).sync()
    local_first, local_second = gym.make("AgentGym/Scripted-v0"), gym.make("AgentGym/Scripted-v0")
    with first, second:
        assert first.reset(seed=1).observation.text == local_first.reset(seed=1)[0]
        assert second.reset(seed=2).observation.text == local_second.reset(seed=2)[0]
        for action in ("open red door", "open green door", "open blue door"):  # interleaved
            assert first.step(action).observation.as_gym_step()[:4] == local_first.step(action)[:4]
            assert second.step(action).observation.as_gym_step()[:4] == local_second.step(action)[:4]
        third = AgentGymClient(base_url=url).sync()
        with pytest.raises(RuntimeError, match="CAPACITY_REACHED"):
            third.reset(seed=3)
        third.close()
        assert closed == []
    assert _wait_for(lambda: len(closed) == 2), closed
    assert sorted(closed) == sorted([local_first.unwrapped.task_id, local_second.unwrapped.task_id])
    with AgentGymClient(base_url=url).sync() as again:  # the slots are free again
        assert again.reset(seed=3).observation.text == gym.make("AgentGym/Scripted-v0").reset(seed=3)[0]


def test_bad_requests_get_openenv_errors_and_the_server_goes_on(scripted_server):
    port, _ = scripted_server
    with websockets_sync.connect(f"ws://127.0.0.1:{port}/ws") as ws:
        def send(message) -> dict:
            ws.send(message if isinstance(message, str) else json.dumps(message))
            return json.loads(ws.recv(timeout=30))

        reply = send("{not json")
        assert reply["type"] == "error" and reply["data"]["code"] == "INVALID_JSON"
        reply = send({"type": "step", "data": {"text": "look"}})
        assert reply["data"]["code"] == "EXECUTION_ERROR" and "reset" in reply["data"]["message"]
        reply = send({"type": "reset", "data": {"seed": 0, "tsak_id": "doors-0001"}})
        assert reply["data"]["code"] == "EXECUTION_ERROR" and "tsak_id" in reply["data"]["message"]
        reply = send({"type": "reset", "data": {"task_id": "doors-0005"}})
        assert reply["type"] == "observation"
        assert reply["data"]["observation"]["info"]["task_id"] == "doors-0005"
        reply = send({"type": "step", "data": {"txt": "look"}})
        assert reply["data"]["code"] == "VALIDATION_ERROR"
        reply = send({"type": "step", "data": {"text": 42}})
        assert reply["data"]["code"] == "VALIDATION_ERROR"
        reply = send({"type": "dance"})
        assert reply["data"]["code"] == "UNKNOWN_TYPE"
        reply = send({"type": "step", "data": {"text": "\x00" * 10_000 + "中文"}})
        assert reply["type"] == "observation"
        assert reply["data"]["observation"]["info"]["valid_action"] is False
        assert send({"type": "state"})["data"]["step_count"] == 1
    base = f"http://127.0.0.1:{port}"
    assert httpx.post(f"{base}/step", json={"action": {"text": "look"}}).status_code == 409
    assert httpx.post(f"{base}/step", json={"action": {"txt": "look"}}).status_code == 422
    reset = httpx.post(f"{base}/reset", json={"seed": 4})
    assert reset.status_code == 200
    assert reset.json()["observation"]["text"] == gym.make("AgentGym/Scripted-v0").reset(seed=4)[0]
    assert httpx.get(f"{base}/health").status_code == 200


def test_create_app_fails_early_on_bad_env_kwargs():
    with pytest.raises(TypeError, match="no_such_kwarg"):
        server_module.create_app("AgentGym/Scripted-v0", no_such_kwarg=1)
    with pytest.raises(ValueError, match="unknown env id"):
        server_module.create_app("AgentGym/Nope-v0")
    with pytest.raises(ValueError, match="max_sessions"):
        server_module.create_app("AgentGym/Scripted-v0", max_sessions=0)


@pytest.mark.parametrize("check_env", [True, False])
def test_a_visual_env_is_refused_in_one_line(check_env):
    for env_id in ("AgentGym/SokobanVisual-v0", "AgentGym/EZPoints-v0"):
        with pytest.raises(ValueError, match=f"serves text observations only: {env_id}"):
            server_module.create_app(env_id, check_env=check_env)
        with pytest.raises(ValueError, match="serves text observations only"):
            server_module.AgentGymEnvironment(env_id)


def test_remote_text_env_is_gym_shaped(scripted_server):
    from agentgym.openenv import RemoteTextEnv

    port, closed = scripted_server
    remote = RemoteTextEnv(f"http://127.0.0.1:{port}")
    local = gym.make("AgentGym/Scripted-v0")
    assert remote.spec.id == "AgentGym/Scripted-v0"
    observation, info = local.reset(options={"task_id": "doors-0003"})
    assert remote.reset(options={"task_id": "doors-0003"}) == (observation, info_to_json(info))
    for action in ("look", "open blue door", ""):
        observation, reward, terminated, truncated, info = local.step(action)
        assert remote.step(action) == (observation, reward, terminated, truncated, info_to_json(info))
    with pytest.raises(ValueError, match="unsupported reset options"):
        remote.reset(options={"reset_mask": [True]})
    remote.close()
    assert _wait_for(lambda: closed == ["doors-0003"]), closed
