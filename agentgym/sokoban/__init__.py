"""Sokoban: generated rooms (:mod:`.rooms`) and the text env (:mod:`.env`)."""

from agentgym.sokoban.env import SokobanEnv, parse_action
from agentgym.sokoban.rooms import SokobanRoom, generate_room, render_room, reverse_play

__all__ = ["SokobanEnv", "SokobanRoom", "generate_room", "parse_action", "render_room",
           "reverse_play"]
