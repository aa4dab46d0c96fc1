"""Built-in benchmark hooks, one file per benchmark (named by the ``hooks`` key of ``eval/<name>.yaml``)."""
