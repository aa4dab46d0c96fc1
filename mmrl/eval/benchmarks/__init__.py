"""The built-in benchmarks, one package each (``<name>/``): its reading, prompts and scoring beside ``hooks.py``, the
hooks the ``hooks`` key of ``eval/<name>.yaml`` names."""
