"""The pure maths of the learners: advantage estimators (NumPy; GAE, GRPO, GiGPO, HGPO,
GraphGPO, RLOO, REINFORCE++ and their fast array kernels) and the losses (torch; PPO-clip with dual clip,
GSPO, aggregation, KL, entropy, the value loss). Nothing here imports another part of
``algorithms``: functions of arrays, tested against hand-computed cases and the reference
loops in ``tests/``."""
