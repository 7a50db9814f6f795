"""Reinforcement-learning building blocks: networks, rollout storage, update rules, checkpoints."""
