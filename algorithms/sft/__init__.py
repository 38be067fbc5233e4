"""Supervised warm start (``--algo sft``, ``--sft.warm-start``): expert trajectories from the
envs or a JSONL file (:mod:`~algorithms.sft.data`), the trainer (:mod:`~algorithms.sft.trainer`)
and the SFT stage that an RL run runs first (:mod:`~algorithms.sft.stage`)."""
