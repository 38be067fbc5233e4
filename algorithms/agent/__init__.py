"""The agent loop: prompts (window and transcript layouts, user templates), action parsing,
the rollout through a vector env into a :class:`~algorithms.agent.step_batch.StepBatch`, an
iteration's sampling (retries, dynamic sampling), held-out evaluation, metrics and rollout
records. Reads the engines (:mod:`algorithms.engines`) and what envs declare; no learner."""
