"""What every algorithm shares (a config dataclass, a network built from a seed, masked acting, one
epoch at a time, a state a checkpoint restores exactly), so each update rule's file holds only its rule."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from .runner import EpisodeRecord, Runner


class Adam(torch.optim.Adam):
    """torch's Adam, bit for bit, without the guards against torch.compile that import
    torch._dynamo (1.3 s of every training process; hpcgym never compiles), and on torch's multi-tensor path by
    default (the same numbers; on the CPU torch would take the slower one-tensor-at-a-time loop)."""

    def __init__(self, params, **options) -> None:
        super().__init__(params, **{"foreach": True, **options})

    add_param_group = inspect.unwrap(torch.optim.Adam.add_param_group)
    zero_grad = inspect.unwrap(torch.optim.Adam.zero_grad)
    state_dict = inspect.unwrap(torch.optim.Adam.state_dict)
    load_state_dict = inspect.unwrap(torch.optim.Adam.load_state_dict)

    step = torch.no_grad()(inspect.unwrap(torch.optim.Adam.step))


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """`auto`: CUDA when present, else CPU; anything else as torch reads it."""
    if device is None or str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def config_from_dict(cls: type, values: dict[str, Any] | None) -> Any:
    """A config dataclass from a map; unknown keys are an error, lists become tuples."""
    values = dict(values or {})
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(f"unknown {cls.__name__} option(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


@dataclasses.dataclass
class NetworkConfig:
    """The network every update rule builds (agents/rl/networks.py), declared once for all four
    algorithms' configs, which add their own learning settings after these fields."""

    net: str = "mlp"                 # mlp, conv or dras (agents/rl/dras_networks.py)
    hidden: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    table: tuple[int, ...] | None = None   # conv: (offset, slots, features) of the job table; dras: (W, N)


@dataclasses.dataclass
class PolicyNetworkConfig(NetworkConfig):
    """An actor-critic's network: a policy whose first output biases may be set."""

    initial_bias: tuple[float, ...] | None = None  # the actor's output biases at first (mlp; None: zeros)


def config_to_dict(config: Any) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(config).items()}


class Algorithm:
    """Base class. Subclasses set `name`, `Config`, and implement `build` and `train_epoch`."""

    name: ClassVar[str] = ""
    Config: ClassVar[type] = object

    def __init__(self, obs_shape: Sequence[int], n_actions: int, config: Any = None,
                 device: str | torch.device = "cpu", seed: int = 0) -> None:
        self.obs_shape, self.n_actions = tuple(int(d) for d in obs_shape), int(n_actions)
        self.config = config_from_dict(self.Config, config) if config is None or isinstance(config, dict) else config
        self.device = resolve_device(device)
        self.seed = int(seed)
        self.rng = np.random.default_rng(seed)     # every random choice after initialisation
        self.updates = 0                           # gradient steps taken
        with torch.random.fork_rng(devices=[]):    # seeded weights, global torch RNG untouched
            torch.manual_seed(seed)
            self.build()

    # ---------------------------------------------------------------- to implement
    def build(self) -> None:
        """Create the networks (on self.device) and the optimizer."""
        raise NotImplementedError

    def acting_network(self) -> nn.Module:
        """The module whose `scores(obs, mask)` chooses actions (greedy: its argmax)."""
        raise NotImplementedError

    def train_epoch(self, runner: Runner, episodes: int) -> dict[str, float]:
        """Collect `episodes` episodes with `runner`, update, and return statistics."""
        raise NotImplementedError

    def extra_state(self) -> dict[str, Any]:
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        pass

    # ---------------------------------------------------------------- acting
    def tensor(self, array: np.ndarray, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.as_tensor(np.asarray(array), device=self.device).to(dtype)

    @torch.no_grad()
    def scores(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Masked action scores (logits or Q-values; -inf where invalid) for a batch."""
        net = self.acting_network()
        return net.scores(self.tensor(obs), np.asarray(mask)).float().cpu().numpy()

    def act(self, obs: np.ndarray, mask: np.ndarray, greedy: bool = True,
            rng: np.random.Generator | None = None) -> np.ndarray:
        """Actions for a batch of observations: the best valid one, or a sample (see `choose`)."""
        from .policy import choose

        return choose(self.scores(obs, mask), mask, None if greedy else (rng or self.rng))

    # ---------------------------------------------------------------- state
    def modules(self) -> dict[str, nn.Module]:
        return {k: v for k, v in vars(self).items() if isinstance(v, nn.Module)}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {k: v for k, v in vars(self).items() if isinstance(v, torch.optim.Optimizer)}

    def weights(self) -> dict[str, dict[str, torch.Tensor]]:
        return {k: {n: t.detach().cpu() for n, t in m.state_dict().items()} for k, m in self.modules().items()}

    def state_dict(self) -> dict[str, Any]:
        return {"weights": self.weights(),
                "optimizers": {k: o.state_dict() for k, o in self.optimizers().items()},
                "rng": self.rng.bit_generator.state, "updates": self.updates, "extra": self.extra_state()}

    def load_weights(self, weights: dict[str, dict[str, torch.Tensor]]) -> None:
        for k, m in self.modules().items():
            m.load_state_dict(weights[k])

    def acting_state(self) -> dict[str, Any]:
        """What a copy of this algorithm needs to act as it does now (a rollout worker's sync):
        the weights (on the CPU) and the counters acting reads."""
        return {"weights": self.weights(), "updates": self.updates}

    def load_acting_state(self, state: dict[str, Any]) -> None:
        self.load_weights(state["weights"])
        self.updates = int(state["updates"])

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_weights(state["weights"])
        for k, o in self.optimizers().items():
            o.load_state_dict(state["optimizers"][k])
        self.rng.bit_generator.state = state["rng"]
        self.updates = int(state["updates"])
        self.load_extra_state(state.get("extra", {}))


def explained_variance(pred: torch.Tensor, target: torch.Tensor) -> float:
    var = target.var(unbiased=False)
    return float("nan") if var == 0 else float(1 - (target - pred).var(unbiased=False) / var)


class ActorCriticAlgorithm(Algorithm):
    """Shared by PG, A2C and PPO: an `ActorCritic` model, one Adam optimizer, and sampling
    that records each step's log-probability and value for the update."""

    def build(self) -> None:
        from .policy import ActorCritic

        c = self.config
        if c.net == "dras":  # DRAS's one-body network with policy and value heads
            from .dras_networks import dras_network

            if c.initial_bias is not None:
                raise ValueError("initial_bias sets an mlp actor's output biases; net 'dras' has its own heads")
            self.model = dras_network(self.obs_shape, self.n_actions, c.table, c.hidden)
        else:
            self.model = ActorCritic(self.obs_shape, self.n_actions, c.net, c.hidden, c.activation, c.table,
                                     getattr(c, "value_net", None), c.initial_bias)
        self.model.to(self.device)
        vf_lr = getattr(c, "vf_lr", None)
        if vf_lr is not None and not isinstance(self.model, ActorCritic):
            raise ValueError(f"vf_lr needs separate actor and critic networks; net {c.net!r} shares one body")
        groups = ([{"params": self.model.actor.parameters()}, {"params": self.model.critic.parameters(), "lr": vf_lr}]
                  if vf_lr is not None else self.model.parameters())
        self.optimizer = Adam(groups, lr=c.lr, eps=1e-5)

    def acting_network(self) -> nn.Module:
        return self.model

    @torch.inference_mode()
    def sample(self, obs: np.ndarray, mask: np.ndarray, rngs: Sequence[np.random.Generator] | None = None
               ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """A runner policy: sampled actions (row r's from rngs[r]) with their log-probabilities and values, from one
        model call in inference mode (the same numbers as under no_grad, each small torch call cheaper)."""
        from .policy import choose, masked_logits

        logits, values = self.model(self.tensor(obs))
        logits = masked_logits(logits, mask)
        actions = choose(logits.float().cpu().numpy(), mask, self.rng if rngs is None else rngs)
        logp = torch.log_softmax(logits, -1).cpu().numpy()[np.arange(len(actions)), actions]
        return actions, {"logp": logp, "value": values.cpu().numpy()}

    @torch.no_grad()
    def values(self, obs: np.ndarray) -> np.ndarray:
        return self.model.value(self.tensor(obs)).cpu().numpy()

    def store(self, storage: Any, t: Any) -> None:
        """Add one runner transition to a RolloutStorage; a truncated episode's last reward gets
        gamma * V(last state), so it is bootstrapped like an unfinished rollout."""
        reward = t.reward
        if t.truncated and not t.terminated:
            reward += self.config.gamma * float(self.values(t.next_obs[None])[0])
        storage.add(t.env, t.obs, t.mask, t.action, t.extras["logp"], t.extras["value"], reward, t.done, t.teacher)

    def store_episode(self, storage: Any, env: int, e: EpisodeRecord) -> None:
        """Add a whole episode (a rollout worker's) at once: the entries `store` makes of its steps."""
        reward = e.reward.tolist()
        if e.truncated[-1] and not e.terminated[-1]:
            reward[-1] += self.config.gamma * float(self.values(e.obs[-1][None])[0])
        storage.add_steps(env, e.obs[:-1], e.mask[:-1], e.action, e.extras["logp"], e.extras["value"], reward,
                          e.terminated | e.truncated, e.teacher[:-1])

    def collect(self, runner: Runner, episodes: int) -> tuple[Any, list]:
        """`episodes` whole episodes into a fresh RolloutStorage."""
        from .storage import RolloutStorage

        storage = RolloutStorage(len(runner.envs))
        ended = runner.run_epoch(episodes, self.sample, lambda t: self.store(storage, t), storage.discard_open,
                                 lambda env, e: self.store_episode(storage, env, e))
        return storage, ended

    def clip_and_step(self, loss: torch.Tensor) -> float:
        """Backward, clip the gradient norm (config.max_grad_norm, if set), step; the norm."""
        self.optimizer.zero_grad()
        loss.backward()
        norm = nn.utils.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm or float("inf"))
        self.optimizer.step()
        self.updates += 1
        return float(norm)


#: Episode-end metrics (an hpcgym env's `info["metrics"]`) averaged into the learning curve (kills:
#: per episode, where a kill policy that stalls its schedule shows).
CURVE_METRICS = ("mean_bsld", "mean_wait", "utilization", "kills")


def episode_stats(ended: list) -> dict[str, float]:
    """An epoch's episodes: mean return and length, the share cut at the step cap (where a policy
    that stalls its schedule shows first), and their scheduling metrics' means."""
    if not ended:
        return {"episodes": 0}
    stats = {"episodes": len(ended), "return": float(np.mean([e.ret for e in ended])),
             "length": float(np.mean([e.length for e in ended])),
             "truncated": float(np.mean([bool(e.info.get("truncated")) for e in ended]))}
    for key in CURVE_METRICS:
        values = [e.info["metrics"][key] for e in ended if key in e.info.get("metrics", {})]
        if values:
            stats[key] = float(np.mean(values))
    return stats
