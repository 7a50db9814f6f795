"""A hand-made inspect task whose best policy is known: accept every pick.

Each step shows one job's seven SchedInspector-like features; accept (0) moves on to the next
job, reject (1) keeps it, and time passes: its wait and rejection count grow and processors free
up (the free-processor feature rises). Every rejection costs the episode's hidden load, and the
only reward comes at the end: -cost / (cost + jobs), so accepting every job (cost 0, reward 0) is
optimal from every state, and each rejection is a loss.

What makes it hard in the way real inspection is: the load is hidden, and lightly loaded episodes
show more free processors and cheaper rejections, so a critic of the features rates states with
many free processors higher. A rejection raises the free feature, and an advantage that
bootstraps from that critic credits the rejection with the rise (tests/test_learning_reliability.py).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

ACCEPT, REJECT = 0, 1


class AcceptIsBest(gym.Env):
    def __init__(self, jobs: int = 64, max_rejections: int = 72) -> None:
        self.jobs, self.max_rejections = jobs, max_rejections
        self.observation_space = gym.spaces.Box(0.0, 1.0, (7,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.info = {"action_mask": np.ones(2, dtype=bool)}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.load = self.np_random.random()
        self.left, self.cost = self.jobs, 0.0
        self._next_job()
        return self._observation(), self.info

    def step(self, action: int):
        if action == REJECT and self.rejections < self.max_rejections:
            self.cost += self.load
            self.rejections += 1
            self.wait += 0.01
            self.free += 0.1
            return self._observation(), 0.0, False, False, self.info
        self.left -= 1
        if self.left == 0:
            return self._observation(), -self.cost / (self.cost + self.jobs), True, False, self.info
        self._next_job()
        return self._observation(), 0.0, False, False, self.info

    def _next_job(self) -> None:
        wait, self.requested, self.size, free, self.delay = self.np_random.random(5)
        self.wait, self.free, self.rejections = 0.3 * wait, (1 - self.load) * free, 0

    def _observation(self) -> np.ndarray:
        return np.array([min(self.wait, 1.0), self.requested, self.size, min(self.free, 1.0),
                         1.0 if self.size <= self.free else 0.0, self.rejections / self.max_rejections, self.delay],
                        dtype=np.float32)
