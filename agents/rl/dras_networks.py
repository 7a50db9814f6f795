"""DRAS's networks (Fan et al., IEEE TPDS 2022, sections 3.2, 5.3, Table 3) for `net="dras"` over `DRASEncoder`'s table;
docs/dras.md gives the layers and why the hidden layers have no bias."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from .policy import MaskedCategorical, masked_logits


def _round8(x: float, floor: int) -> int:
    return max(floor, 8 * math.floor(x / 8 + 0.5))  # half up


def dras_hidden(window: int, nodes: int) -> tuple[int, int]:
    """h1 = 0.9 (2W + N), h2 = h1 / 4, in multiples of 8, at least 32 / 16: Theta's ratio in Table 3."""
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
        """(B, 2W + N): the convolution over the table. Features past the table (a two-kind env's kind flag) are not
        DRAS's input: the level is implicit in the mask, as in the paper, where both levels share one network."""
        b = obs.shape[0]
        x = obs.reshape(b, -1)[:, :2 * self.rows].reshape(b, 1, self.rows, 2)
        return self.conv(x).reshape(b, self.rows)


class DRASNetwork(_DRASBase):
    """1x2 convolution, two leaky-ReLU layers, `n_actions` logits and an optional value head; it
    follows `ActorCritic`'s interface, so the algorithms use it in its place."""

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
    """DRAS-DQL's per-job network: one Q value per window slot from that job's block and the node rows, whose (linear)
    share of the first layer is computed once per state; a learned constant for each action past the window."""

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
    """The DRAS network a config asks for: `layout` is the `dras` encoder's (W, N), which the trainer
    fills in; an actor-critic, or with `q_values` DRAS-DQL's per-job network."""
    if layout is None or len(layout) != 2:
        raise ValueError("net 'dras' needs table = (window, nodes) of the dras encoder; "
                         "train with --encoder dras (the trainer fills it in)")
    window, nodes = (int(v) for v in layout)
    size = math.prod(obs_shape)
    if size < 2 * (2 * window + nodes):
        raise ValueError(f"observations of {size} features are smaller than the dras table of "
                         f"W={window}, N={nodes} ({2 * (2 * window + nodes)} features)")
    hidden = tuple(hidden) if hidden else None
    return DRASQNetwork(window, nodes, n_actions, hidden) if q_values else DRASNetwork(window, nodes, n_actions, hidden)
