"""DRAS's networks (Fan et al., "DRAS: Deep reinforcement learning for cluster scheduling in
high performance computing", IEEE TPDS 2022, sections 3.2, 5.3 and Table 3), built by the
algorithms for `net="dras"`. The state they read is `agents.encoders.DRASEncoder`'s table.

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
from collections.abc import Sequence

import torch
from torch import nn

from .policy import MaskedCategorical, masked_logits


def _round8(x: float, floor: int) -> int:
    return max(floor, 8 * math.floor(x / 8 + 0.5))  # half up


def dras_hidden(window: int, nodes: int) -> tuple[int, int]:
    """The two fully connected sizes for a window of W jobs on N nodes (see the module
    docstring): h1 = 0.9 (2W + N), h2 = h1 / 4, rounded to multiples of 8, at least 32 / 16."""
    h1 = _round8(0.9 * (2 * window + nodes), 32)
    return h1, _round8(h1 / 4, 16)


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
