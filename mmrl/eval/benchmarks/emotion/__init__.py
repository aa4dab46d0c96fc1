"""The emotion benchmark (DSPO, issue 17): its metrics, the evaluation of a checkpoint and the hooks
``eval/emotion.yaml`` names."""
