"""Scripted stand-ins for rollout tests: a generation engine that answers from a fixed
table, an env that crashes mid-episode, and a rollout whose trajectories end four ways."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agentgym.scripted import ScriptedTextEnv
from agentgym.vector import TextVectorEnv
from algorithms.agent.rollout import RolloutSettings, collect_rollout
from algorithms.agent.step_batch import StepBatch
from algorithms.config import PromptConfig
from algorithms.engines import FailedGeneration, stop_length


class ScriptedEngine:
    """Returns ``answer(turn, position, prompt_text)`` for each prompt, tokenized, cut
    after the first stop string like a real engine (no EOS then).

    Args:
        tokenizer: the tokenizer used to decode prompts and encode answers.
        answer: ``(turn, position_among_active_envs, prompt_text) -> response text`` (or a
            :class:`~algorithms.engines.FailedGeneration`, returned as is).
        eos: append the EOS token to every response.
    """

    def __init__(self, tokenizer: Any, answer: Callable[[int, int, str], str], *,
                 eos: bool = True):
        self.tokenizer = tokenizer
        self.answer = answer
        self.eos = eos
        self.turn = 0
        self.calls: list[list[tuple[int, ...]]] = []
        self.stops: list[tuple[str, ...]] = []

    def generate(self, prompts: Sequence[Sequence[int]], *, temperature: float,
                 max_new_tokens: int, seed: int, stop: Sequence[str] = ()
                 ) -> list[tuple[int, ...]]:
        self.calls.append([tuple(p) for p in prompts])
        self.stops.append(tuple(stop))
        out = []
        for position, prompt in enumerate(prompts):
            text = self.tokenizer.decode(list(prompt))
            answer = self.answer(self.turn, position, text)
            if isinstance(answer, FailedGeneration):  # the engine could not answer
                out.append(answer)
                continue
            ids = self.tokenizer(answer, add_special_tokens=False)["input_ids"]
            keep = stop_length(ids, stop, lambda t: self.tokenizer.decode(list(t)))
            if keep is not None:  # an engine ends the response at the stop string
                ids = ids[:keep]
            elif self.eos:
                ids = ids + [self.tokenizer.eos_token_id]
            out.append(tuple(ids[:max_new_tokens]))
        self.turn += 1
        return out

    def sync_weights(self, model: Any) -> None:
        """Nothing to sync."""

    def release(self) -> None:
        """Nothing to free."""


class StepFailingEnv(ScriptedTextEnv):
    """Raises on step ``fail_at`` (0-based) of every episode: an env fault that the vector
    env contains (the episode ends truncated with ``info["env_error"]``)."""

    def __init__(self, *, fail_at: int, **kwargs: Any):
        super().__init__(**kwargs)
        self.fail_at = fail_at
        self._steps = 0

    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        self._steps = 0
        return super()._reset_task(task_id)

    def _step_text(self, action: str):
        if self._steps == self.fail_at:
            raise RuntimeError("simulated crash")
        self._steps += 1
        return super()._step_text(action)


def one_turn_settings(*, penalty: float = 0.1, max_steps: int = 1,
                      max_prompt_tokens: int = 400,
                      keep_bootstrap_prompts: bool = False) -> RolloutSettings:
    """Rollout settings for short scripted rollouts: groups of 2, tag-only answers."""
    return RolloutSettings(group_size=2, max_steps=max_steps, temperature=1.0,
                           max_new_tokens=8, invalid_action_penalty=penalty,
                           prompt=PromptConfig(think=False, max_prompt_tokens=max_prompt_tokens),
                           keep_bootstrap_prompts=keep_bootstrap_prompts)


def collect_and_close(env: Any, engine: Any, tokenizer: Any, settings: RolloutSettings,
                      group_task_ids: Sequence[str] | None, seed: int = 0) -> StepBatch:
    """:func:`collect_rollout` on ``env``, which is closed afterwards."""
    try:
        return collect_rollout(env, engine, tokenizer, settings,
                               group_task_ids=group_task_ids, seed=seed)
    finally:
        env.close()


CUT_TASKS = ("doors-0003", "doors-0005")
"""The tasks of :func:`cut_rollout`'s two groups."""

CUT_PROMPT = PromptConfig(think=False, max_prompt_tokens=400)
"""The prompt settings of :func:`cut_rollout`."""


def cut_rollout(tokenizer: Any, *, max_steps: int = 2, keep_bootstrap_prompts: bool = True,
                fail_at: int | None = 1, generation_fails: bool = False) -> StepBatch:
    """Four trajectories on the 2-room door env (groups of 2) that end four ways.

    - 0 plays the solution and wins at step 1: terminated, reward 1.
    - 1 opens the right door to room 2, but its env allows one step: truncated by the
      env after step 0 (the next observation differs from the last one).
    - 2 looks around; its env crashes on step ``fail_at`` (0-based): truncated with an
      env error. With ``fail_at=None`` it does not crash and looks around until the
      rollout's ``max_steps`` cuts it. With ``generation_fails`` its env does not crash:
      the engine fails to answer it on step ``fail_at`` instead.
    - 3 answers an action the env rejects (reward -0.1) until the rollout's ``max_steps``
      cuts it (its env would allow 5 steps).
    """
    solution = ScriptedTextEnv(num_rooms=2).solution(CUT_TASKS[0])
    plans = {0: lambda turn: f"<action> {solution[turn]} </action>",
             1: lambda turn: f"<action> {solution[turn]} </action>",
             2: lambda turn: (FailedGeneration("server down")
                              if generation_fails and turn == fail_at
                              else "<action> look </action>"),
             3: lambda turn: "<action> open door </action>"}
    # The last turn each trajectory is given an action in (the crashing step included).
    last_turn = (1, 0, max_steps if fail_at is None else fail_at, max_steps)
    active_by_turn = [[i for i in range(4) if turn <= last_turn[i]]
                      for turn in range(max_steps)]
    engine = ScriptedEngine(tokenizer,
                            lambda turn, pos, _: plans[active_by_turn[turn][pos]](turn))
    failing = 10**9 if fail_at is None or generation_fails else fail_at
    env = TextVectorEnv([
        lambda: ScriptedTextEnv(num_rooms=2, max_steps=5),
        lambda: ScriptedTextEnv(num_rooms=2, max_steps=1),
        lambda: StepFailingEnv(fail_at=failing, num_rooms=2, max_steps=5),
        lambda: ScriptedTextEnv(num_rooms=2, max_steps=5),
    ], group_size=2)
    settings = RolloutSettings(group_size=2, max_steps=max_steps, temperature=1.0,
                               max_new_tokens=16, invalid_action_penalty=0.1,
                               prompt=CUT_PROMPT,
                               keep_bootstrap_prompts=keep_bootstrap_prompts)
    return collect_and_close(env, engine, tokenizer, settings, CUT_TASKS)
