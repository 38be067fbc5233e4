"""Training: the policy model (HF id or the offline SmolLM2 GGUF:
:mod:`~algorithms.training.policy`; LoRA: :mod:`~algorithms.training.lora`), the log-prob,
entropy and value maths of responses (:mod:`~algorithms.training.scoring`) and phase 1's
passes over a rollout batch (:mod:`~algorithms.training.batch_scoring`), warm starts, the
run's parts (:mod:`~algorithms.training.build`), advantage estimation for ``--algo``
(GiGPO, HGPO, GraphGPO, GRPO, RLOO, REINFORCE++, GAE:
:mod:`~algorithms.training.estimation`), the learner's update and the
:class:`~algorithms.training.trainer.Trainer` loop that ties rollout, scores, advantages and
update together."""
