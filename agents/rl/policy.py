"""Masked policies: invalid actions get a logit of -inf, so probability exactly 0. Sampling is Gumbel-max
with numpy Generators, so the random stream is a plain numpy state a checkpoint resumes exactly."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from .networks import MLP, SlotConv, build_network


def masked_logits(logits: torch.Tensor, mask: torch.Tensor | np.ndarray) -> torch.Tensor:
    """`logits` with -inf where `mask` is False. A row with no valid action is left as it is
    (such rows only appear past an episode's end, and are never acted on). A numpy mask (acting)
    is worked out in numpy: on a few rows a numpy op costs a fraction of a torch call."""
    if isinstance(mask, np.ndarray):
        valid = mask.astype(bool, copy=False)
        fill = torch.from_numpy(~(valid | ~valid.any(axis=-1, keepdims=True))).to(logits.device)
    else:
        mask = mask.bool()
        # the max over a uint8 view: `any` over the rows of a bool tensor took 25x longer on CPU
        fill = ~(mask | (mask.view(torch.uint8).amax(dim=-1, keepdim=True) == 0))
    return logits.masked_fill(fill, float("-inf"))


class MaskedCategorical:
    """A categorical distribution over the valid actions only."""

    def __init__(self, logits: torch.Tensor, mask: torch.Tensor) -> None:
        self.logits = masked_logits(logits, mask)
        self.log_probs = torch.log_softmax(self.logits, dim=-1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return self.log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        # p * log p is 0 * -inf = nan at masked actions (and so would its gradient be, even behind
        # a torch.where): use log p = 0 there before multiplying
        p = self.log_probs.exp()
        log_p = torch.where(p > 0, self.log_probs, torch.zeros_like(self.log_probs))
        return -(p * log_p).sum(-1)

    def greedy(self) -> torch.Tensor:
        return self.logits.argmax(-1)


def choose(scores: np.ndarray, masks: np.ndarray,
           rng: np.random.Generator | Sequence[np.random.Generator] | None) -> np.ndarray:
    """Actions for a batch: the best valid one (`rng` None), or one sampled from softmax(scores) over the valid ones by
    Gumbel-max, row r's noise from rng[r] when `rng` is one generator per row."""
    scores = np.where(masks.astype(bool), scores.astype(np.float64), -np.inf)
    if isinstance(rng, np.random.Generator):
        scores = scores + rng.gumbel(size=scores.shape)
    elif rng is not None:
        scores = scores + np.stack([g.gumbel(size=scores.shape[1:]) for g in rng])
    return scores.argmax(-1)


def set_output_bias(actor: nn.Module, bias: Sequence[float]) -> None:
    """Start an actor's logits at `bias` (one per action slot): a prior for the untrained policy,
    e.g. one that should rarely take some slots (RLSchert's kills: docs/rlschert.md)."""
    bias = [float(b) for b in bias]
    if isinstance(actor, SlotConv) and actor.score is not None:
        # one kernel scores every row: its bias is the rows' one value, the pooled outputs take the rest
        rows = bias[actor.first:actor.first + actor.slots]
        if len(bias) != actor.slots + actor.extra or len(set(rows)) > 1:
            raise ValueError(f"initial_bias for a conv actor: one value per action slot ({actor.extra + actor.slots}), "
                             f"the same for its {actor.slots} table rows (one kernel scores them all)")
        with torch.no_grad():
            actor.score.bias.fill_(rows[0])
            if actor.pooled is not None:
                actor.pooled.bias.copy_(torch.as_tensor(bias[:actor.first] + bias[actor.first + actor.slots:]))
        return
    out = actor.body[-1] if isinstance(actor, MLP) else None
    if out is None:
        raise ValueError(f"initial_bias sets the output biases of an mlp or conv actor, not of {type(actor).__name__}")
    if len(bias) != out.out_features:
        raise ValueError(f"initial_bias has {len(bias)} values for {out.out_features} action slots: give one per slot")
    with torch.no_grad():
        out.bias.copy_(torch.as_tensor(bias))


class ActorCritic(nn.Module):
    """Separate policy and value networks (as in the RL scheduling papers): of the same kind, or
    a `value_net` of another (RL backfilling: a per-slot kernel actor, an MLP critic over the table)."""

    def __init__(self, obs_shape: Sequence[int], n_actions: int, net: str = "mlp",
                 hidden: Sequence[int] = (64, 64), activation: str = "tanh",
                 table: Sequence[int] | None = None, value_net: str | None = None,
                 initial_bias: Sequence[float] | None = None) -> None:
        super().__init__()
        self.actor = build_network(net, obs_shape, n_actions, hidden, activation, out_gain=0.01, table=table)
        if initial_bias is not None:
            set_output_bias(self.actor, initial_bias)
        self.critic = build_network(value_net or net, obs_shape, 1, hidden, activation, out_gain=1.0, per_slot=False,
                                    table=table)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits, values): what sampling reads, as DRAS's one-body network gives them."""
        return self.actor(obs), self.value(obs)

    def scores(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Masked logits: what greedy or sampled acting reads."""
        return masked_logits(self.actor(obs), mask)

    def distribution(self, obs: torch.Tensor, mask: torch.Tensor) -> MaskedCategorical:
        return MaskedCategorical(self.actor(obs), mask)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)


class QNetwork(nn.Module):
    """Action values Q(s, .) with invalid actions at -inf, so max and argmax skip them."""

    def __init__(self, obs_shape: Sequence[int], n_actions: int, net: str = "mlp",
                 hidden: Sequence[int] = (64, 64), activation: str = "relu",
                 table: Sequence[int] | None = None) -> None:
        super().__init__()
        self.q = build_network(net, obs_shape, n_actions, hidden, activation, out_gain=1.0, table=table)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q(obs)

    def scores(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return masked_logits(self.q(obs), mask)
