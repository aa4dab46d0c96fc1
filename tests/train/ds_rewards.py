"""A reward for the multi-rank tests: the tiny random model never answers correctly, so accuracy is always 0 and
advantages vanish. This one varies with the sampled tokens (share of response tokens with an even id), so
advantages, gradients and the KL term are non-zero and the ranks have something to agree on."""


def even_tokens(ctx):
    return [float((c.trajectory.response_ids % 2 == 0).float().mean()) for c in ctx]


def first_token_even(ctx):
    """A 0/1 ``accuracy`` component that varies within groups (parity of the first response token), so DAPO's
    dynamic sampling keeps some groups, drops others and resamples."""
    return {"accuracy": [float(int(c.trajectory.response_ids[0]) % 2 == 0) if c.trajectory.response_ids.numel() else 0.0
                         for c in ctx]}
