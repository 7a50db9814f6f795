"""`hpcgym compare`: policies on identical job sequences, with paired statistics (docs/compare.md)."""

from .command import compare
from .policy import AgentSpec, PolicySpec, parse_policy
from .runner import Comparison, Outcome, run_comparison

__all__ = ["compare", "AgentSpec", "PolicySpec", "parse_policy", "Comparison", "Outcome", "run_comparison"]
