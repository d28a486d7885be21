"""The scaling study's figure (PNG): images/sec and efficiency against nodes, ideal, and the fitted model.

Rendered to PNG bytes with matplotlib's Agg backend (no display needed); the CLI writes them atomically.
"""

from __future__ import annotations

import io
from typing import Any, Mapping, Sequence

from .scaling.model import Fit, model_efficiency
from .scaling.plan import MODES
from .scaling.results import Row

_COLOURS = {"strong": "tab:blue", "weak": "tab:orange"}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def render_png(rows: Sequence[Row], fitted: Mapping[str, Fit], title: str) -> bytes:
    """The figure as PNG bytes: left, total images/sec per mode with its ideal (linear from the
    smallest point) and the model; right, efficiency with the ideal 1.0 and the model."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    figure = Figure(figsize=(11, 4.5), dpi=100)
    throughput, efficiency = figure.subplots(1, 2)
    all_nodes: set[int] = set()
    for mode in MODES:
        all_nodes |= _plot_mode(throughput, efficiency, [r for r in rows if r.point.mode == mode], fitted.get(mode))
    efficiency.axhline(1.0, linestyle="--", color="grey", label="ideal")
    throughput.set(xlabel="nodes", ylabel="images/sec (total)", title="throughput")
    efficiency.set(xlabel="nodes", ylabel="scaling efficiency", title="efficiency", ylim=(0, 1.15))
    for axes in (throughput, efficiency):
        axes.set_xticks(sorted(all_nodes) or [1])
        axes.grid(alpha=0.3)
        if axes.get_legend_handles_labels()[0]:
            axes.legend(fontsize=7)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def _plot_mode(throughput: Any, efficiency: Any, rows: Sequence[Row], fit: Fit | None) -> set[int]:
    """One mode's points on both axes: measured with its spread, the ideal line from its smallest point,
    and the fitted model; returns the node counts the mode spans (none when nothing was measured)."""
    measured = [r for r in rows if r.measured is not None]
    if not measured:
        return set()
    mode = measured[0].point.mode
    colour = _COLOURS[mode]
    base = min(measured, key=lambda r: r.point.ranks)
    nodes = [r.point.nodes for r in measured]
    span = sorted({r.point.nodes for r in rows})
    per_node = base.point.ranks / base.point.nodes
    throughput.errorbar(
        nodes,
        [r.measured.img_per_sec for r in measured],
        yerr=[r.measured.spread for r in measured],
        fmt="o",
        color=colour,
        capsize=3,
        label=f"{mode}: measured",
    )
    throughput.plot(
        span,
        [base.measured.img_per_sec * n / base.point.nodes for n in span],
        "--",
        color=colour,
        alpha=0.6,
        label=f"{mode}: ideal",
    )
    efficiency.plot(nodes, [r.efficiency for r in measured], "o", color=colour, label=f"{mode}: measured")
    if fit is not None and len(span) > 1:
        fine = [span[0] + (span[-1] - span[0]) * i / 100 for i in range(101)]
        throughput.plot(
            fine,
            [_images_per_step(base, n * per_node) / fit.step_seconds(n * per_node) for n in fine],
            "-",
            color=colour,
            label=f"{mode}: model G={fit.G:.3g}s a={fit.a:.3g}s b={fit.b:.3g}s",
        )
        efficiency.plot(
            fine,
            [model_efficiency(fit, n * per_node, base.point.ranks) for n in fine],
            "-",
            color=colour,
            label=f"{mode}: model",
        )
    return set(span)


def _images_per_step(base: Row, ranks: float) -> float:
    """Images all ranks process in one step at `ranks`: the fixed global batch (strong) or b*W (weak)."""
    point = base.point
    return float(point.global_batch) if point.mode == "strong" else float(point.batch_per_rank * ranks)
