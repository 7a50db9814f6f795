"""DRAS's state encoding and network (Fan et al., "DRAS: Deep reinforcement learning for cluster
scheduling in high performance computing", IEEE TPDS 2022, sections 3.1, 3.2, 5.3 and Table 3).

State (`DRASEncoder`, registered as the encoder "dras"): a table of 2W + N rows of 2 values.

- Rows 2k and 2k + 1 are window job k (k < W, queue order): row 2k = [size, estimated run time],
  row 2k + 1 = [priority flag, queued time] (DRAS: each job is a [2, 2] block of these four
  values, in this order). Missing jobs (queue shorter than W) are zero blocks; a real job has a
  size > 0, so a padding block is never mistaken for a job.
- Rows 2W + p are the nodes, [available, time until its estimated release] (DRAS: 1 if free
  and 0 time; else 0 and its estimated available time - now). The cluster here is a processor
  count, so each processor is a node: the F free processors first ([1, 0] each), then each
  running job's processors (its size many rows [0, remaining]), by estimated end. remaining is
  estimated end - now, at least 0 (a job past its estimate is expected to end now). N rows in
  all; any rows a cluster does not fill (e.g. an inconsistent observation) stay zero.

Normalisation (every value in [0, 1], as all hpcgym encoders): sizes / N; times (estimate,
queued time, remaining) on the toolkit's log scale `log1p(s) / log1p(one week)` clipped to 1
(`agents.encoders`); the flags are 0/1. The estimated run time is the observation's `estimate`
(what the simulator's reservations and the node release times use; the user's request under the
default `--estimate requested`). The priority flag: the observation holds no priority, so it is
0, unless `priority_size` is given: then 1 for a job of at least `priority_size` processors
(e.g. a capability job on Theta, where large jobs have high priority).

Network (`DRASNetwork`): input [B, 2W + N, 2] -> a 1x2 convolution (one filter, so one value per
row: 2W + N) -> fully connected h1 -> leaky ReLU -> fully connected h2 -> leaky ReLU -> a linear
policy head over the actions (the W window slots, plus any extra actions such as a wait action)
and, with `value_head=True` (default), a linear value head from the same h2 features (DRAS's
A2C/PPO networks have 51 = 50 + 1 outputs: the window's logits and V(s)). The convolution has no
activation (the paper names none for it). The two hidden layers have no bias: with that, the
parameter counts are exactly Table 3's (Theta: 21,890,053 for DRAS-PG, 21,891,054 for A2C/PPO,
21,449,004 for DRAS-DQL), which count biases only for the convolution and the outputs. Invalid actions get a -inf logit
(`agents.rl.policy.masked_logits`), so they have probability 0 and are never the argmax.

Hidden sizes (`dras_hidden`): Table 3 gives h1 = 4000, h2 = 1000 for Theta (N = 4360, W = 50,
conv width 4460). Rule: h1 = 0.9 (2W + N), h2 = h1 / 4, each rounded to a multiple of 8 and at
least 32 / 16. Theta: 4016 / 1008 (Table 3: 4000 / 1000). With W = 50: SDSC-SP2 (N = 128) 208 /
56, HPC2N (N = 240) 304 / 80, Lublin-256 (N = 256) 320 / 80. (Cori's 10000 / 4000 for 12176 is
a wider h2 than this rule gives; the rule follows Theta, the paper's capability system.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from .encoders import ENCODERS, Encoder, _log_time
from .rl.policy import MaskedCategorical, masked_logits


def _round8(x: float, floor: int) -> int:
    return max(floor, 8 * math.floor(x / 8 + 0.5))  # half up


def dras_hidden(window: int, nodes: int) -> tuple[int, int]:
    """The two fully connected sizes for a window of W jobs on N nodes (see the module
    docstring): h1 = 0.9 (2W + N), h2 = h1 / 4, rounded to multiples of 8, at least 32 / 16."""
    h1 = _round8(0.9 * (2 * window + nodes), 32)
    return h1, _round8(h1 / 4, 16)


class DRASEncoder(Encoder):
    """DRAS's state: a (2W + N, 2) table, flattened row by row (see the module docstring)."""

    def __init__(self, window: int, procs: int, priority_size: int | None = None) -> None:
        if window < 1:
            raise ValueError(f"window must be at least 1, got {window}")
        if not procs or procs < 1:
            raise ValueError("the dras encoder needs the cluster's processors (one row per node)")
        self.window = int(window)
        self.procs = int(procs)
        self.priority_size = priority_size
        self.rows = 2 * self.window + self.procs
        self.size = 2 * self.rows

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.rows, 2)

    def fill(self, observation: Mapping[str, Any], out: np.ndarray) -> None:
        if observation["procs"] != self.procs:
            raise ValueError(f"the dras encoder was made for {self.procs} processors, "
                             f"not {observation['procs']}")
        table = out.reshape(self.rows, 2)
        q = observation["queue"]
        n = min(len(q["id"]), self.window)
        if n:
            size = np.asarray(q["size"][:n], np.float64)
            times = np.array([q["estimate"][:n], q["wait"][:n]], np.float64)
            _log_time(times)
            jobs = table[:2 * n].reshape(n, 4)  # [size, estimate, priority, queued time]
            jobs[:, 0] = np.minimum(size / self.procs, 1.0)
            jobs[:, 1] = times[0]
            if self.priority_size is not None:
                jobs[:, 2] = size >= self.priority_size
            jobs[:, 3] = times[1]
        nodes = table[2 * self.window:]
        free = min(int(observation["free"]), self.procs)
        nodes[:free, 0] = 1.0
        r = observation["running"]
        if not r["id"]:
            return
        ends = np.asarray(r["estimated_end"], np.float64)
        order = np.argsort(ends, kind="stable")
        remaining = _log_time(ends[order] - observation["time"])
        sizes = np.asarray(r["size"], np.int64)[order]
        stop = np.minimum(free + np.cumsum(sizes), self.procs)
        start = np.concatenate(([free], stop[:-1]))
        nodes[free:stop[-1], 1] = np.repeat(remaining, stop - start)


ENCODERS["dras"] = lambda window, procs, priority_size=None, **_: DRASEncoder(window, procs, priority_size)


class _DRASBase(nn.Module):
    """What both DRAS networks share: the sizes (W, N, the 2W + N table rows, the actions, the
    hidden widths) and the 1x2 convolution that turns each table row into one value."""

    def __init__(self, window: int, nodes: int, n_actions: int | None, hidden: Sequence[int] | None) -> None:
        super().__init__()
        self.window, self.nodes = int(window), int(nodes)
        self.rows = 2 * self.window + self.nodes
        self.n_actions = self.window if n_actions is None else int(n_actions)
        if self.n_actions < self.window:
            raise ValueError(f"need at least the {self.window} window slots as actions, got {self.n_actions}")
        h1, h2 = tuple(hidden) if hidden is not None else dras_hidden(self.window, self.nodes)
        self.hidden = (int(h1), int(h2))
        self.conv = nn.Conv2d(1, 1, kernel_size=(1, 2))

    def row_values(self, obs: torch.Tensor) -> torch.Tensor:
        """(B, 2W + N): the convolution over the table. Features past the table (a two-kind env's
        kind flag) are not DRAS's input: the level is implicit in the mask, as in the paper, where
        both levels share one network."""
        b = obs.shape[0]
        x = obs.reshape(b, -1)[:, :2 * self.rows].reshape(b, 1, self.rows, 2)
        return self.conv(x).reshape(b, self.rows)


class DRASNetwork(_DRASBase):
    """DRAS's network (see the module docstring): 1x2 convolution, two leaky-ReLU fully connected
    layers, `n_actions` logits (default W) and an optional value head.

    `forward(obs)` takes observations of shape (B, 2W + N, 2) or flattened (B, 2(2W + N)) and
    returns (logits (B, n_actions), value (B,) or None). `scores`, `distribution` and `value`
    follow `agents.rl.policy.ActorCritic`, so the RL algorithms can use it in its place.
    """

    def __init__(self, window: int, nodes: int, n_actions: int | None = None,
                 hidden: Sequence[int] | None = None, value_head: bool = True,
                 negative_slope: float = 0.01) -> None:
        super().__init__(window, nodes, n_actions, hidden)
        h1, h2 = self.hidden
        self.body = nn.Sequential(
            nn.Linear(self.rows, h1, bias=False), nn.LeakyReLU(negative_slope),
            nn.Linear(h1, h2, bias=False), nn.LeakyReLU(negative_slope))
        self.policy = nn.Linear(h2, self.n_actions)
        self.critic = nn.Linear(h2, 1) if value_head else None

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        return self.body(self.row_values(obs))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        h = self.features(obs)
        return self.policy(h), (self.critic(h).squeeze(-1) if self.critic is not None else None)

    def scores(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Masked logits (-inf for invalid actions)."""
        return masked_logits(self.policy(self.features(obs)), mask)

    def distribution(self, obs: torch.Tensor, mask: torch.Tensor) -> MaskedCategorical:
        return MaskedCategorical(self.policy(self.features(obs)), mask)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        if self.critic is None:
            raise ValueError("this DRAS network was built without a value head")
        return self.critic(self.features(obs)).squeeze(-1)

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())


class DRASQNetwork(_DRASBase):
    """DRAS-DQL's network: one job at a time. For window slot k the input is the [2 + N, 2] table of
    that job's [2, 2] block followed by the N node rows (Table 3: [4362, 2] on Theta), and the
    output is one Q value; the same network scores every slot. Actions past the window (an env's
    wait / stop action) get a learned constant each.

    The 1x2 convolution and the first fully connected layer are linear, so the nodes' share of the
    first layer is the same for every slot of a state: it is computed once per state and added to
    each job's share. That is the paper's per-job network exactly, at 2 instead of 2 + N inputs per
    job. `forward(obs)` takes (B, 2W + N, 2) or flattened observations (features past the table
    are ignored, as in `DRASNetwork`) and returns Q values (B, n_actions).
    """

    def __init__(self, window: int, nodes: int, n_actions: int | None = None,
                 hidden: Sequence[int] | None = None, negative_slope: float = 0.01) -> None:
        super().__init__(window, nodes, n_actions, hidden)
        h1, h2 = self.hidden
        self.fc1 = nn.Linear(2 + self.nodes, h1, bias=False)
        self.rest = nn.Sequential(nn.LeakyReLU(negative_slope), nn.Linear(h1, h2, bias=False),
                                  nn.LeakyReLU(negative_slope), nn.Linear(h2, 1))
        self.extra = nn.Parameter(torch.zeros(self.n_actions - self.window))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        b, w = obs.shape[0], self.window
        rows = self.row_values(obs)                                    # one value per row
        jobs = rows[:, :2 * w].reshape(b, w, 2)                        # each job's two rows
        weight = self.fc1.weight
        node_part = rows[:, 2 * w:] @ weight[:, 2:].T                  # (B, h1), once per state
        h = jobs @ weight[:, :2].T + node_part.unsqueeze(1)            # (B, W, h1)
        q = self.rest(h).squeeze(-1)                                   # (B, W)
        return torch.cat([q, self.extra.expand(b, -1)], dim=1)

    def scores(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return masked_logits(self(obs), mask)


def dras_network(obs_shape: Sequence[int], n_actions: int, layout: Sequence[int] | None,
                 hidden: Sequence[int] | None, q_values: bool = False) -> nn.Module:
    """The DRAS network an RL algorithm's config asks for (`net="dras"`): `layout` is (W, N), the
    window and the nodes of the `dras` encoder (the trainer fills it in from the env). An
    actor-critic network (policy and value heads over one body) or, with `q_values`, DRAS-DQL's
    per-job network."""
    if layout is None or len(layout) != 2:
        raise ValueError("net 'dras' needs table = (window, nodes) of the dras encoder; "
                         "train with --encoder dras (the trainer fills it in)")
    window, nodes = (int(v) for v in layout)
    size = math.prod(obs_shape)
    if size < 2 * (2 * window + nodes):
        raise ValueError(f"observations of {size} features are smaller than the dras table of "
                         f"W={window}, N={nodes} ({2 * (2 * window + nodes)} features)")
    hidden = tuple(hidden) if hidden else None
    if q_values:
        return DRASQNetwork(window, nodes, n_actions, hidden)
    return DRASNetwork(window, nodes, n_actions, hidden)


#: What `hpcgym train dras-ALGO` sets unless a flag says otherwise: DRAS's two levels in one env
#: (no wait at level 1, backfilling until no candidate is left at level 2), its state, network and
#: window, the capacity reward (eq. 2), the learning rate of section 5.3, DRAS-DQL's epsilon
#: decay and its update every ten decisions (section 3.3: "for every ten scheduling instances";
#: also what makes DQL's per-job network affordable here), and, with a trace, the three-phase curriculum in the paper's order. The paper gives no
#: discount; 0.95 is ours: DRAS's rewards arrive at every decision, and on short training runs a
#: horizon of about 20 decisions learned faster here than undiscounted whole episodes (docs/dras.md).
TRAINING_DEFAULTS: dict[str, Any] = {
    "kind": "select+backfill", "encoder": "dras", "window": 50, "no_wait": True, "reward": "dras_capacity",
    "config": {"net": "dras", "lr": 1e-3, "gamma": 0.95}, "dql_config": {"eps_decay": 0.995, "train_freq": 10},
    "curriculum": "sampled,real,synthetic",
}


def window_mask(n_jobs: int, window: int, extra: int = 0) -> np.ndarray:
    """The valid actions when `n_jobs` jobs wait: the first min(n_jobs, W) slots (and `extra`
    further actions, valid)."""
    mask = np.zeros(window + extra, bool)
    mask[:min(n_jobs, window)] = True
    mask[window:] = True
    return mask


__all__ = ["DRASEncoder", "DRASNetwork", "DRASQNetwork", "dras_hidden", "dras_network", "window_mask"]
