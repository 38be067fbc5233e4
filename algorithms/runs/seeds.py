"""The seeds of a run, each derived from ``(run.seed, iteration, stream)``.

Every seed of iteration ``k`` -- the reset seed (so the task order), the sampling seeds,
the mini-batch order, the evaluation chunks -- comes from :func:`iteration_seed`, so
resuming from the checkpoint after iteration ``k`` replays iteration ``k + 1`` exactly as
an uninterrupted run would. Streams: 0 the training rollout, 1 the update's mini-batch
order, ``2 + start`` the evaluation chunk starting at episode ``start``.
"""

from __future__ import annotations

import numpy as np


def iteration_seed(seed: int, iteration: int, stream: int, attempt: int = 0,
                   round_: int = 0) -> int:
    """A 31-bit seed for ``stream`` of ``iteration`` (independent of every other pair);
    ``attempt`` > 0 gives a retry of that stream a seed of its own, and ``round_`` > 0 a
    further rollout of dynamic sampling."""
    entropy = [seed, iteration, stream] + ([attempt, round_] if round_ else
                                           [attempt] if attempt else [])
    state = np.random.SeedSequence(entropy).generate_state(1)[0]
    return int(state) & 0x7FFFFFFF
