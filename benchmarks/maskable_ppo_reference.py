"""A second, independent PPO on the same SchedInspector env: sb3-contrib's MaskablePPO.

Trains MaskablePPO with the `schedinspector` preset's settings (gamma 1, lr 3e-4, clip 0.2, target
KL 0.015, actor and critic 32-16-8 ReLU, 12,800 decisions per update, i.e. about 50 episodes of 128
jobs) on the very env `hpcgym train schedinspector` trains on, and prints each update's mean episode
return and length, so its curve can be set beside hpcgym's PPO for the same lambda
(docs/schedinspector.md, "Why most seeds collapsed"). Needs `pip install sb3-contrib`.

    .venv/bin/python benchmarks/maskable_ppo_reference.py --seed 11 --lam 0.97 --steps 128000
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from advantage_probe import training_workload

from hpcgym.agents.recipes import get_recipe
from hpcgym.gymbridge import make
from hpcgym.gymbridge.provenance import provenance


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="SDSC-SP2-1998-4.2-cln.swf.gz")
    parser.add_argument("--recipe", default="schedinspector:code", help="a SchedInspector recipe (hpcgym recipes)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--lam", type=float, default=0.97, help="GAE lambda")
    parser.add_argument("--steps", type=int, default=128_000, help="decisions in all")
    parser.add_argument("--n-steps", type=int, default=12_800, help="decisions per update")
    parser.add_argument("--json", help="also write the curve to this file")
    args = parser.parse_args()
    try:
        from sb3_contrib import MaskablePPO
        from stable_baselines3.common.callbacks import BaseCallback
        from stable_baselines3.common.monitor import Monitor
    except ImportError:
        raise SystemExit("this reference needs sb3-contrib: pip install sb3-contrib") from None
    torch.set_num_threads(1)
    workload = training_workload(get_recipe(args.recipe), args.trace)
    env = Monitor(make(recipe=args.recipe, workload=workload, seed=args.seed))
    curve: list[dict[str, float]] = []

    class Curve(BaseCallback):
        """One row per update: the episodes that ended during its rollout."""

        seen = 0

        def _on_rollout_end(self) -> None:
            ended = env.get_episode_rewards()[self.seen:]
            lengths = env.get_episode_lengths()[self.seen:]
            self.seen += len(ended)
            if ended:
                row = {"update": len(curve) + 1, "steps": self.num_timesteps, "episodes": len(ended),
                       "return": float(np.mean(ended)), "length": float(np.mean(lengths))}
                curve.append(row)
                print(f"update {row['update']:>3}  steps {row['steps']:>8}  episodes {row['episodes']:>3}  "
                      f"return {row['return']:>7.3f}  length {row['length']:>7.1f}", flush=True)

        def _on_step(self) -> bool:
            return True

    net = dict(pi=[32, 16, 8], vf=[32, 16, 8])
    model = MaskablePPO("MlpPolicy", env, gamma=1.0, gae_lambda=args.lam, learning_rate=3e-4, clip_range=0.2,
                        target_kl=0.015, n_steps=args.n_steps, batch_size=args.n_steps, n_epochs=80, ent_coef=0.0,
                        policy_kwargs=dict(net_arch=net, activation_fn=torch.nn.ReLU), seed=args.seed, verbose=0)
    print(f"MaskablePPO on {args.recipe}, seed {args.seed}, lambda {args.lam}")
    model.learn(total_timesteps=args.steps, callback=Curve())
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seed": args.seed, "lambda": args.lam, "recipe": args.recipe, "curve": curve,
                       "provenance": provenance(vars(args))}, f, indent=1)


if __name__ == "__main__":
    main()
