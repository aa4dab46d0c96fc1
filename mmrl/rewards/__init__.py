from mmrl.rewards.base import REWARDS, RewardContext, compute_rewards  # noqa: F401
from mmrl.rewards import bpo_contract, builtin, dspo_rewards, reasoning, tool_use  # noqa: F401  (registers the built-in rewards)
from mmrl.rewards import tgrpo_length  # noqa: F401,E402  (Video-R1's length bonus for T-GRPO)
from mmrl.rewards import stream  # noqa: F401,E402  (Stream-GDPO's four streaming rewards)
from mmrl.rewards import coin_flip  # noqa: F401,E402  (the miniature protocol's coin-flip control)
