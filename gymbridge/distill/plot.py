"""The top levels of a tree as a picture (IRL's Figures 3 and 4 draw the first two)."""

from __future__ import annotations

from pathlib import Path

from ...agents.tree import TreeModel


def draw_tree(tree: TreeModel, path: str | Path, levels: int = 2, title: str | None = None) -> Path:
    """The first `levels` levels of `tree` to `path` (png, svg): each node's test or score, and its samples."""
    from ..compare.report import pyplot

    plt, names = pyplot(), tree.features
    boxes: list[tuple[float, int, str]] = []
    links: list[tuple[float, int, float, int, str]] = []

    def place(node: int, depth: int, lo: float, hi: float) -> float:
        x, inner = (lo + hi) / 2, tree.left[node] >= 0 and depth < levels
        if inner:
            f = int(tree.feature[node])
            label = f"{names[f] if f < len(names) else f'x[{f}]'} <= {tree.threshold[node]:.3g}"
        else:
            label = f"score {tree.value[node]:.3g}" + ("" if tree.left[node] < 0 else "\n(subtree)")
        boxes.append((x, depth, f"{label}\n{tree.samples[node]} samples"))
        if inner:
            mid = (lo + hi) / 2
            for child, a, b, word in ((tree.left[node], lo, mid, "yes"), (tree.right[node], mid, hi, "no")):
                links.append((x, depth, place(int(child), depth + 1, a, b), depth + 1, word))
        return x

    place(0, 0, 0.0, 1.0)
    fig, ax = plt.subplots(figsize=(3.2 * 2 ** levels, 1.8 * (levels + 1)))
    for x0, d0, x1, d1, word in links:
        ax.plot([x0, x1], [-d0, -d1], color="0.5", lw=1, zorder=1)
        ax.text((x0 + x1) / 2, -(d0 + d1) / 2, word, ha="center", va="center", fontsize=8, color="0.3",
                bbox={"fc": "white", "ec": "none", "pad": 0.5})
    for x, depth, text in boxes:
        ax.text(x, -depth, text, ha="center", va="center", fontsize=9, zorder=2,
                bbox={"boxstyle": "round", "fc": "#eef3fb", "ec": "#4a6fa5"})
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-levels - 0.5, 0.5)
    ax.axis("off")
    ax.set_title(title or f"top {levels} levels of a depth-{tree.depth} tree ({tree.node_count} nodes)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
