"""This rank's block of a step's prompts, sampled with per-group seeds (``mmrl.dist`` states the rule)."""
from __future__ import annotations

from mmrl.dist import rank, shard_range, world_size
from mmrl.rollout.seeded import generate_seeded, group_seed


class RankInvariantRollout:
    """Mixin for ``RLTrainer``: this rank's block of the step's prompts, sampled with per-group seeds.

    ``class T(RankInvariantRollout, RLTrainer)`` with one process gives the reference the DeepSpeed run at W ranks
    is compared with (``tests/train/test_deepspeed_cpu.py``).
    """

    def rollout(self, samples, group_offset: int = 0):
        from mmrl.rollout.base import SamplingParams
        from mmrl.rollout.step_inputs import build_step_inputs

        lo, hi = shard_range(len(samples), world_size(), rank())
        si = build_step_inputs(samples[lo:hi], self.processor, self.cfg.data, self.n_for_role, self.viewset,
                               seed=self.cfg.train.seed * 1000003 + self.step, group_offset=group_offset + lo)
        r = self.cfg.rollout
        params = SamplingParams(temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens)
        with self.rollout_context():
            trajs = generate_seeded(self.engine, si.requests, params,
                                    lambda gid: group_seed(self.cfg.train.seed, self.step, gid))
        return si, trajs

    def rollout_context(self):
        from contextlib import nullcontext

        return nullcontext()
