"""Training: the policy model (HF id or the offline SmolLM2 GGUF, LoRA, value head,
scoring), warm starts, the run's parts (:mod:`~algorithms.training.build`), advantage
estimation for ``--algo``, the learner's update and the :class:`~algorithms.training.trainer.Trainer`
loop that ties rollout, scores, advantages and update together."""
