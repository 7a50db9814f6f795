"""Reinforcement-learning building blocks, one module per concern (docs/architecture.md lists them). Nothing is imported
here, so `import hpcgym.agents.rl.storage` stays light; torch comes with the `rl` extra."""
