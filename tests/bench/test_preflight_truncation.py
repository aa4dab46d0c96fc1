"""The pre-flight's truncation check (bench/_preflight.py): the share of sampled responses cut by max_new_tokens,
and the one-line failure above 5%."""
import sys

import pytest

from tests.support import BENCH

if str(BENCH) not in sys.path:  # the bench modules import their siblings by name (as the bench scripts do)
    sys.path.insert(0, str(BENCH))
import _preflight as F  # noqa: E402
from _protocol import ProtocolError  # noqa: E402


def test_truncation_share_and_the_5_percent_limit():
    assert F.truncation_share([True, False, False, False]) == 0.25
    assert F.truncation_share([]) != F.truncation_share([])  # nan: nothing sampled
    assert F.check_truncation([True] + [False] * 19, 64) == 0.05  # at the limit: passes
    with pytest.raises(ProtocolError, match=r"^protocol: 10\.0% of 20 sampled responses were cut at max_new_tokens = "
                                            r"64, above the 5% limit; raise max_new_tokens$"):
        F.check_truncation([True, True] + [False] * 18, 64)
    with pytest.raises(ProtocolError, match="greedy responses"):
        F.check_truncation([True], 40, limit=0.5, what="greedy responses")
    assert F.check_truncation([False] * 3, 8, limit=0.0) == 0.0


def test_sample_groups_records_truncation_on_the_real_trainer(tiny_model_path, image_world, tmp_path):
    from mmrl.config import load_config
    from mmrl.train.rl_trainer import RLTrainer
    from tests.support import small_overrides

    cfg = load_config([], small_overrides(image_world, tmp_path / "rl", tiny_model_path))  # max_new_tokens = 3
    trainer = RLTrainer(cfg, quiet=True)
    groups = F.sample_groups(trainer, trainer.samples[:2])
    flags = [x for g in groups.truncated for x in g]
    assert [len(g) for g in groups.truncated] == [len(g) for g in groups.rewards] == [4, 4]
    # the untrained tiny model rarely stops within 3 tokens: every response that did not stop is flagged
    assert sum(flags) >= 1 and all(isinstance(x, bool) for x in flags)
    with pytest.raises(ProtocolError, match="cut at max_new_tokens = 3"):
        F.check_truncation(flags, cfg.rollout.max_new_tokens)
