"""Streaming video agents (WTI setting, specs/algorithms.md section 5): the action grammar (``actions``), the
episode record (``record``), the environment and its agent loop (``env``, ``loop``), the world's oracle
(``teacher``); docs/streaming.md."""
