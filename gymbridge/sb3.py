"""Stable-Baselines3 (and MaskablePPO) on a `make_vector(..., autoreset_mode="same_step")` env; the per-step
`env_method("action_masks")` is answered from the last step's info, with no round trip to the workers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from stable_baselines3.common.vec_env import VecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvObs, VecEnvStepReturn


class SB3VecEnv(VecEnv):
    """A Gymnasium vector env (autoreset_mode="same_step") behind SB3's `VecEnv` interface."""

    def __init__(self, vector: gym.vector.VectorEnv) -> None:
        mode = vector.metadata.get("autoreset_mode")
        if mode != AutoresetMode.SAME_STEP:
            raise ValueError(f"SB3 resets an ended env in the same step: make the vector env with "
                             f"autoreset_mode='same_step' (this one has {mode})")
        self.vector = vector
        self._masks: np.ndarray | None = None
        self._actions: np.ndarray | None = None
        super().__init__(vector.num_envs, vector.single_observation_space, vector.single_action_space)

    def reset(self) -> VecEnvObs:
        seeds = None if all(s is None for s in self._seeds) else list(self._seeds)
        obs, info = self.vector.reset(seed=seeds)
        self._masks, self.reset_infos = info["action_mask"], [_unbatched(info, i) for i in range(self.num_envs)]
        self._reset_seeds()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        obs, rewards, terminated, truncated, info = self.vector.step(self._actions)
        self._masks, dones = info["action_mask"], terminated | truncated
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        for i in np.flatnonzero(dones):
            infos[i] = _unbatched(info["final_info"], i)
            infos[i]["terminal_observation"] = info["final_obs"][i]
            infos[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
        return obs, rewards.astype(np.float32), dones, infos

    def close(self) -> None:
        self.vector.close()

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> list[Any]:
        if method_name == "action_masks" and self._masks is not None:
            return [self._masks[i].copy() for i in self._get_indices(indices)]
        return self._pick(self.vector.call(method_name, *method_args, **method_kwargs), indices)

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return self._pick(self.vector.get_attr(attr_name), indices)

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        chosen = set(self._get_indices(indices))
        current = self.vector.get_attr(attr_name) if len(chosen) < self.num_envs else [value] * self.num_envs
        self.vector.set_attr(attr_name, [value if i in chosen else old for i, old in enumerate(current)])

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]  # make_vector's envs are bare HpcEnvs

    def _pick(self, values: Sequence[Any], indices: VecEnvIndices) -> list[Any]:
        return [values[i] for i in self._get_indices(indices)]


def _unbatched(info: dict[str, Any], i: int) -> dict[str, Any]:
    """Env i's own info out of a vector info (the keys its `_key` mask marks)."""
    return {key: _unbatched(value, i) if isinstance(value, dict) else value[i]
            for key, value in info.items() if not key.startswith("_") and info[f"_{key}"][i]}
