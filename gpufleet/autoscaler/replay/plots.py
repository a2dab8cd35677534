"""The simulator's PNG plots: capacity against demand, latency CDFs, sweep Pareto fronts.

matplotlib is an optional extra (`pip install 'gpufleet[report]'`), imported only when a
plot is drawn; without it `write_plots` returns None and the Markdown report is written
alone. Figures are built with `matplotlib.figure.Figure` on the Agg backend, never pyplot,
so nothing global accumulates over a sweep's many plots.
"""

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gpufleet.autoscaler.core import factory as policies
from gpufleet.autoscaler.replay.core import sweep
from gpufleet.autoscaler.replay.core.report import by_trace
from gpufleet.autoscaler.replay.core.result import RunResult

INSTALL_HINT = "matplotlib is not installed, so no plots: pip install 'gpufleet[report]'"

Images = dict[str, list[tuple[str, str]]]  # trace -> (alt text, file name) pairs


def matplotlib_figure() -> Any | None:
    """matplotlib's Figure class on the Agg backend, or None where matplotlib is missing."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")  # no display: the report is written on servers and in CI
    from matplotlib.figure import Figure

    return Figure


def write_plots(
    results: Sequence[RunResult],
    out_dir: Path,
    *,
    gpus_per_node: int,
    sweep_mode: bool = False,
) -> Images | None:
    """Draw every trace's plots into `out_dir`; None (nothing written) without matplotlib.

    A run: `<trace>-capacity.png` and `<trace>-latency.png`. A sweep: `<trace>-pareto.png`.
    """
    figure = matplotlib_figure()
    if figure is None:
        return None
    images: Images = {}
    for trace, runs in by_trace(results).items():
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", trace)
        if sweep_mode:
            _save(pareto_figure(figure, trace, runs), out_dir / f"{slug}-pareto.png")
            images[trace] = [("SLO attainment against billed GPU-hours", f"{slug}-pareto.png")]
            continue
        _save(capacity_figure(figure, trace, runs, gpus_per_node), out_dir / f"{slug}-capacity.png")
        _save(latency_figure(figure, trace, runs), out_dir / f"{slug}-latency.png")
        images[trace] = [
            ("replicas and nodes against demand", f"{slug}-capacity.png"),
            ("latency CDFs", f"{slug}-latency.png"),
        ]
    return images


def _save(fig: Any, path: Path) -> None:
    # No Software/date metadata, so the same run draws the same bytes.
    fig.savefig(path, dpi=100, metadata={"Software": None})


def capacity_figure(figure: Any, trace: str, runs: Sequence[RunResult], gpus_per_node: int) -> Any:
    """One panel per policy: billed node GPUs, GPUs held by replicas, ready replicas and the
    policy's desired count, over the arrival rate (demand) shaded on a second axis."""
    fig = figure(figsize=(10, 2.4 * len(runs) + 1.0), layout="constrained")
    axes = fig.subplots(len(runs), 1, sharex=True, squeeze=False)[:, 0]
    for ax, run in zip(axes, runs, strict=True):
        tl = run.timeline
        minutes = np.asarray(tl.t) / 60.0
        demand = ax.twinx()
        demand.fill_between(
            minutes, tl.arrival_rate, step="post", color="0.85", lw=0, label="arrivals/s"
        )
        demand.set_ylabel("arrivals/s", color="0.4")
        ax.set_zorder(demand.get_zorder() + 1)  # lines above the shaded demand
        ax.patch.set_visible(False)
        ax.step(minutes, np.asarray(tl.nodes) * gpus_per_node, where="post", label="node GPUs")
        ax.step(minutes, tl.replicas, where="post", label="replica GPUs")
        ax.step(minutes, tl.ready, where="post", label="ready replicas")
        ax.step(minutes, tl.desired, where="post", ls=":", lw=1, label="desired")
        ax.set_ylim(bottom=0)
        ax.set_ylabel("GPUs / replicas")
        ax.set_title(
            f"{run.policy}: {100 * run.slo_attainment:.2f}% within SLO, "
            f"{run.node_gpu_hours:.2f} billed GPU-h",
            loc="left",
            fontsize=10,
        )
    handles = [*axes[0].get_legend_handles_labels()[0], *demand.get_legend_handles_labels()[0]]
    fig.legend(handles=handles, loc="outside lower center", ncols=5, fontsize=8)
    axes[-1].set_xlabel("minutes since the trace start")
    fig.suptitle(f"{trace}: capacity against demand")
    return fig


def latency_figure(figure: Any, trace: str, runs: Sequence[RunResult]) -> Any:
    """TTFT and end-to-end latency CDFs, one line per policy, the TTFT SLO marked."""
    fig = figure(figsize=(10, 4), layout="constrained")
    ttft_ax, e2e_ax = fig.subplots(1, 2)
    for run in runs:
        for ax, values in ((ttft_ax, run.ttft_seconds), (e2e_ax, run.e2e_seconds)):
            x, y = cdf(values)
            ax.plot(x, y, label=run.policy)
    slo = runs[0].slo_ttft_seconds
    ttft_ax.axvline(slo, color="k", ls="--", lw=1, label=f"SLO {slo:g} s")
    for ax, what in ((ttft_ax, "time to first token"), (e2e_ax, "end-to-end latency")):
        ax.set_xscale("log")
        ax.set_xlabel(f"{what} (s)")
        ax.set_ylabel("fraction of requests")
        ax.grid(True, which="both", alpha=0.3)
    ttft_ax.legend(fontsize=8)
    fig.suptitle(f"{trace}: latency")
    return fig


def pareto_figure(figure: Any, trace: str, runs: Sequence[RunResult]) -> Any:
    """Every sweep point, and each policy's front as a line; the oracle as a star."""
    fig = figure(figsize=(8, 5), layout="constrained")
    ax = fig.subplots()
    for (_, name), front in sweep.fronts(runs).items():
        points = [sweep.point(r) for r in runs if r.policy == name]
        if name == policies.ORACLE:
            ax.scatter(
                [p.gpu_hours for p in points],
                [100 * p.attainment for p in points],
                marker="*",
                s=150,
                color="k",
                label="oracle",
                zorder=3,
            )
            continue
        # A staircase: at any cost, the best attainment reachable is the last point left of it.
        line = ax.step(
            [p.gpu_hours for p in front],
            [100 * p.attainment for p in front],
            where="post",
            marker="o",
            label=f"{name} front",
        )[0]
        ax.scatter(
            [p.gpu_hours for p in points],
            [100 * p.attainment for p in points],
            facecolors="none",
            edgecolors=line.get_color(),
        )
        for p in front:
            ax.annotate(
                p.label,
                (p.gpu_hours, 100 * p.attainment),
                fontsize=7,
                xytext=(3, 3),
                textcoords="offset points",
            )
    ax.set_xlabel("billed node GPU-hours (lower is better)")
    ax.set_ylabel("SLO attainment, % (higher is better)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"{trace}: Pareto fronts")
    return fig


def cdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted finite values and the fraction of all values at or below each."""
    values = np.asarray(values, dtype=np.float64)
    finite = np.sort(values[np.isfinite(values)])
    if len(values) == 0:
        return finite, finite
    return finite, np.arange(1, len(finite) + 1) / len(values)
