"""MVBench (the original notebook and the lmms-eval variant): reading the annotations, prompts and aggregates,
and the hooks ``eval/mvbench*.yaml`` name."""
