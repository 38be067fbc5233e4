"""The tasks a loop of your own plays (``--agent``): drawn from an env id, or read from a
JSONL file.

**From an env id** (``--env.env-id``, the default): iteration ``i``'s group ``g`` plays
the task the in-process rollout's group ``g`` plays on the same ``--run.seed``. That
rollout resets its vector env with seed ``s = iteration_seed(run.seed, i)``
(:mod:`algorithms.runs.seeds`), and the vector env resets group ``g``'s envs with seed
``s + g``, each drawing its task from that seed (``agentgym.core.TextEnv.reset``). So the
task dict is, for that seed::

    {"env_id": "AgentGym/KeyDoor-v0",          # the env to build: gym.make(env_id, **env_kwargs)
     "env_kwargs": {"width": 2, ..., "anchor": "state", "max_steps": 6},
     "seed": 12345,                            # reset(seed=seed, options={"task_id": task_id})
     "task_id": "...", "task": "...",          # the env's info["task_id"] and info["task"]
     "task_type": "...",                       # info["task_type"] ("" when the env has none)
     "observation": "..."}                     # the first observation (text)

and a loop plays it with ``env = gym.make(task["env_id"], **task["env_kwargs"])`` and
``env.reset(seed=task["seed"], options={"task_id": task["task_id"]})``: every AgentGym env
plays the task ``options["task_id"]`` names (``TextEnv.reset``), and the seed seeds what
the env draws after (FrozenLake's slips). The harness resets one env of its own per group
to read the task (no model call).

**From a file** (``--agent.tasks FILE.jsonl``): each non-blank line is one task dict, passed
to the loop as it is; iteration ``i`` plays lines ``i * num_groups`` onwards, in file order,
cycled. A line that is not a JSON object is a :class:`TaskFileError` naming the file and
line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from algorithms.config import ConfigError, TrainConfig
from algorithms.runs.seeds import iteration_seed


class TaskFileError(ConfigError):
    """``--agent.tasks`` names a file that cannot be read as task dicts (one line; exit
    status 2)."""


def read_task_file(path: str | Path) -> list[dict[str, Any]]:
    """The task dicts of a JSONL file (blank lines skipped).

    Raises:
        TaskFileError: the file is missing or empty, or a line is not a JSON object (the
            message names the line).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise TaskFileError(f"--agent.tasks {path}: cannot be read ({error})") from None
    tasks = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            task = json.loads(line)
        except json.JSONDecodeError as error:
            raise TaskFileError(f"--agent.tasks {path} line {number}: not JSON ({error.msg} "
                                f"at column {error.colno})") from None
        if not isinstance(task, dict):
            raise TaskFileError(f"--agent.tasks {path} line {number}: a task is a JSON "
                                f"object, got {type(task).__name__}")
        tasks.append(task)
    if not tasks:
        raise TaskFileError(f"--agent.tasks {path}: no tasks (the file has no lines)")
    return tasks


class TaskSource:
    """An iteration's ``env.num_groups`` task dicts (module docstring)."""

    def __init__(self, config: TrainConfig):
        self.config = config
        self.file_tasks = (read_task_file(config.agent.tasks)
                           if config.agent.tasks is not None else None)
        self._env: Any = None

    def describe(self) -> str:
        """One line: where the tasks come from."""
        if self.file_tasks is not None:
            return f"{len(self.file_tasks)} tasks from {self.config.agent.tasks}"
        return f"tasks drawn from {self.config.env.env_id} (the in-process rollout's seeds)"

    def tasks(self, iteration: int) -> list[dict[str, Any]]:
        """The task of each group of iteration ``iteration`` (0-based)."""
        groups = self.config.env.num_groups
        if self.file_tasks is not None:
            count = len(self.file_tasks)
            return [dict(self.file_tasks[(iteration * groups + g) % count])
                    for g in range(groups)]
        seed = iteration_seed(self.config.run.seed, iteration, 0, 0, 0)
        return [self.env_task(seed + group) for group in range(groups)]

    def env_task(self, seed: int) -> dict[str, Any]:
        """The env's task for reset seed ``seed``, as a task dict."""
        import gymnasium as gym

        import agentgym  # noqa: F401  (registers the ids)

        env = self.config.env
        kwargs = env.kwargs()
        if self._env is None:
            self._env = gym.make(env.env_id, **kwargs)
        observation, info = self._env.reset(seed=seed)
        return {"env_id": env.env_id, "env_kwargs": kwargs, "seed": int(seed),
                "task_id": str(info.get("task_id", "")), "task": str(info.get("task", "")),
                "task_type": str(info.get("task_type", "") or ""),
                "observation": observation if isinstance(observation, str)
                else str(observation)}

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
