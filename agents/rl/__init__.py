"""Reinforcement-learning building blocks: networks, rollout storage, update rules, checkpoints.

One module per concern, each readable on its own (CleanRL's one-file-per-algorithm spirit):

| module          | what it holds                                                                    |
|-----------------|----------------------------------------------------------------------------------|
| `networks`      | `MLP`, `SlotConv` (kernel-size-1 convolution over the window's job rows)          |
| `policy`        | `masked_logits` (-inf for invalid actions), `MaskedCategorical`, `ActorCritic`,   |
|                 | `QNetwork`, `choose` (greedy or seeded Gumbel-max sampling)                       |
| `storage`       | `gae`, `discounted_returns`, `RolloutStorage`, `ReplayBuffer`                     |
| `runner`        | `Runner`: envs stepped in lockstep, seeded episodes, one batched forward per round |
| `algorithm`     | the `Algorithm` base (acting, state), `resolve_device`                            |
| `algorithms`    | the update rules by name: `ALGORITHMS`, `get_algorithm(name)`                     |
| `pg`            | REINFORCE with a value baseline (`pg_update`)                                    |
| `a2c`           | synchronous advantage actor-critic with an entropy bonus (`a2c_update`)           |
| `ppo`           | clipped PPO with value loss, entropy and KL early stop (`ppo_update`)              |
| `dql`           | deep Q-learning: epsilon decay, replay, target network, masked max (`dql_update`) |
| `checkpoint`    | `save_checkpoint` / `load_checkpoint`: weights + config + encoder, window, kind   |
| `serve`         | `RLAgent`: a checkpoint as an `Agent` (in process or `hpcgym agent --model`)       |
| `online`        | `OnlineRLAgent`: a served checkpoint that keeps updating itself (`--online`)      |
| `dras_networks` | DRAS's conv + fully connected networks (`net="dras"`) and their sizes           |

Nothing is imported here, so `import hpcgym.agents.rl.storage` stays light; torch (and, for
the env side, gymnasium) come with the `rl` extra.
"""
