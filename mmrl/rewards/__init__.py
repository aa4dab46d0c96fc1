from mmrl.rewards.base import REWARDS, RewardContext, compute_rewards  # noqa: F401
from mmrl.rewards import builtin  # noqa: F401  (registers accuracy, format, length)
