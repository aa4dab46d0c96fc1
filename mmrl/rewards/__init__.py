from mmrl.rewards.base import REWARDS, RewardContext, compute_rewards  # noqa: F401
<<<<<<< HEAD
from mmrl.rewards import bpo_contract, builtin, reasoning  # noqa: F401  (registers the built-in rewards)
=======
from mmrl.rewards import bpo_contract, builtin, dspo_rewards, tool_use  # noqa: F401  (registers the built-in rewards)
>>>>>>> main
