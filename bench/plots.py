"""PNG plots with matplotlib (Agg backend: no display needed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bench.common import RESULTS_DIR


def _file(name: str) -> str:
    return f"{name}.png"


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def bars(name: str, labels: Sequence[str], values: Sequence[float], title: str, ylabel: str) -> str:
    """A bar chart saved as bench/results/<name>.png; returns the file name."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.bar(list(labels), list(values), color="#4C72B0")
    for i, v in enumerate(values):
        ax.annotate(f"{v:,.0f}" if v >= 100 else f"{v:.2f}", (i, v), ha="center", va="bottom")
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.tick_params(axis="x", labelrotation=15)
    fig.tight_layout()
    RESULTS_DIR.mkdir(exist_ok=True)
    fig.savefig(RESULTS_DIR / _file(name), dpi=100)
    plt.close(fig)
    return _file(name)


def lines(
    name: str,
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    title: str,
    xlabel: str,
    ylabel: str,
    hline: float | None = None,
    logx: bool = False,
) -> str:
    """A line chart (one line per series, optional threshold line); returns the file name."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for label, (xs, ys) in series.items():
        ax.plot(list(xs), list(ys), marker="o", label=label)
    if hline is not None:
        ax.axhline(hline, color="red", linestyle="--", label="limit")
    if logx:
        ax.set_xscale("log")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    RESULTS_DIR.mkdir(exist_ok=True)
    fig.savefig(RESULTS_DIR / _file(name), dpi=100)
    plt.close(fig)
    return _file(name)
