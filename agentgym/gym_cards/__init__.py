"""gym-cards' EZPoints, NumberLine and Blackjack (verl-agent's ``gym_cards`` package) as
visual envs: :mod:`.rules` (deals, rules, action reading), :mod:`.pictures` (frames),
:mod:`.env` (the envs)."""
