"""An OpenAI-compatible gateway to the policy: a user's own agent loop calls it, and each
call is recorded with the exact token ids the engine sampled (``docs/own-agent.md``).

Modules: :mod:`~algorithms.gateway.records` (what a session recorded),
:mod:`~algorithms.gateway.joining` (a session's calls joined into sample rows by exact
token prefix), :mod:`~algorithms.gateway.anchors` (a call's default step anchor),
:mod:`~algorithms.gateway.server` (the server and its sessions).
"""
