"""Rewards: ``REWARDS`` names the module of each built-in and imports it on first lookup (``mmrl.registry``)."""
from mmrl.rewards.base import REWARDS, RewardContext, compute_rewards  # noqa: F401
