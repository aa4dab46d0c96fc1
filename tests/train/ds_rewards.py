"""A reward for the multi-rank tests: the tiny random model never answers correctly, so accuracy is always 0 and
advantages vanish. This one varies with the sampled tokens (share of response tokens with an even id), so
advantages, gradients and the KL term are non-zero and the ranks have something to agree on."""


def even_tokens(ctx):
    return [float((c.trajectory.response_ids % 2 == 0).float().mean()) for c in ctx]
