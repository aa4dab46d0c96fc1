"""Helpers shared by the end-to-end evaluator tests."""


class CountingEngine:
    """Delegates to the real engine and counts ``generate`` calls and prompts."""

    def __init__(self, engine):
        self.engine, self.calls, self.prompts = engine, 0, 0

    def generate(self, requests, params):
        self.calls += 1
        self.prompts += len(requests)
        return self.engine.generate(requests, params)
