"""The synthetic benchmark: hooks over the held-out evaluation of ``mmrl.eval.synthetic`` (``eval/synthetic.yaml``)."""
