from mmrl.rewards.base import REWARDS, RewardContext, compute_rewards  # noqa: F401
from mmrl.rewards import bpo_contract, builtin, dspo_rewards, tool_use  # noqa: F401  (registers the built-in rewards)
