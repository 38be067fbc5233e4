"""A worked example of an env of one's own (docs/own-env.md): a number-guessing game.

Importing this package registers two ids with Gymnasium:

``OwnEnv/NumberGuess-v0``       :class:`~examples.own_env.guess.NumberGuessEnv`, built on
                                ``agentgym.TextEnv`` (the whole contract, state anchors,
                                an expert for SFT)
``OwnEnv/PlainNumberGuess-v0``  :class:`~examples.own_env.plain.PlainNumberGuessEnv`, a
                                plain Gymnasium env that ``train.py`` trains through
                                ``agentgym.PlainTextEnv``

so that ``--env.env-id examples.own_env:OwnEnv/NumberGuess-v0`` (Gymnasium's import form:
module, colon, id) finds them from ``train.py``, ``python -m agentgym.check`` and
``gym.make``. ``agentgym.register`` also gives the ids AgentGym's vector entry point:
``gym.make_vec(id, num_envs, group_size=G)`` builds a group-aware vector env.
"""

import agentgym

agentgym.register("OwnEnv/NumberGuess-v0", "examples.own_env.guess:NumberGuessEnv")
agentgym.register("OwnEnv/PlainNumberGuess-v0", "examples.own_env.plain:PlainNumberGuessEnv")
