"""`hpcgym distill` and `hpcgym tree`: agents distilled into decision trees (docs/irl.md)."""

from .command import distill, tree_command

__all__ = ["distill", "tree_command"]
