"""Charts of SMC-SD's particles: normalised weights per cycle, effective sample size against the resampling
line, and the genealogy (which particle continues which)."""
from __future__ import annotations

import plotly.graph_objects as go

from ..method_table import colour_of
from .escape import hover_escape
from .genealogy import Fate, lineage
from .plots_style import (DUPLICATED, MAX_CYCLES_SHOWN, PARTICLE_COLOURS, STOPPED, cycles_of, empty_figure, styled,
                          thinned, thinned_title)

def last_cycles(title: str, cycles: list, unit: str) -> tuple[str, list]:
    """At most the last MAX_CYCLES_SHOWN cycles, and a title that says when some were left out."""
    if len(cycles) <= MAX_CYCLES_SHOWN:
        return title, cycles
    return f"{title} (the last {MAX_CYCLES_SHOWN} of {len(cycles)}{unit})", cycles[-MAX_CYCLES_SHOWN:]


def smc_weights_figure(smc_events) -> go.Figure:
    """Normalised particle weights per cycle as stacked bars (each particle one colour)."""
    title = "SMC-SD particle weights per cycle"
    cycles = cycles_of(smc_events)
    if not cycles:
        return empty_figure(title, "SMC-SD's particle weights appear here.")
    title, cycles = last_cycles(title, cycles, "")
    n = max(len(c.weights) for c in cycles)
    fig = go.Figure()
    for row in range(n):
        fig.add_trace(go.Bar(
            x=[c.step + 1 for c in cycles], y=[c.weights[row] if row < len(c.weights) else 0 for c in cycles],
            name=f"#{row + 1}", marker_color=PARTICLE_COLOURS[row % len(PARTICLE_COLOURS)],
            hovertext=[f"cycle {c.step + 1}, particle {row + 1}: weight {c.weights[row]:.3f}<br>"
                       f"new text: {hover_escape(c.particle_texts[row][:60] if row < len(c.particle_texts) else '')}"
                       for c in cycles if row < len(c.weights)], hoverinfo="text"))
    return styled(fig, title, "cycle", "weight", layout={"barmode": "stack", "yaxis": {"range": [0, 1.0]}})


def smc_ess_figure(smc_events) -> go.Figure:
    """Effective sample size per cycle against the resampling threshold; resampled cycles marked."""
    title = "SMC-SD effective sample size"
    cycles = cycles_of(smc_events)
    if not cycles:
        return empty_figure(title, "ESS per cycle appears here.")
    cycles, stride = thinned(cycles)
    title = thinned_title(title, stride, "cycle")
    x = [c.step + 1 for c in cycles]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=x, y=[c.ess for c in cycles], mode="lines+markers", name="ESS",
                             line={"color": colour_of("smc")},
                             hovertext=[f"cycle {c.step + 1}: ESS {c.ess:.2f} of {len(c.weights)}" for c in cycles],
                             hoverinfo="text"))
    fig.add_trace(go.Scatter(x=x, y=[c.resample_line for c in cycles], mode="lines",
                             name="threshold", line={"color": STOPPED, "dash": "dash"}, hoverinfo="skip"))
    resampled = [c for c in cycles if c.resampled]
    if resampled:
        fig.add_trace(go.Scatter(x=[c.step + 1 for c in resampled], y=[c.ess for c in resampled], mode="markers",
                                 name="resampled", marker={"symbol": "star", "size": 12, "color": DUPLICATED},
                                 hovertext=[f"cycle {c.step + 1}: resampled" for c in resampled], hoverinfo="text"))
    return styled(fig, title, "cycle", "ESS", layout={"yaxis": {"range": [0, max(len(c.weights) for c in cycles) + 0.3]}})


FATE_STYLES = ((Fate.KEPT, "kept", "#0072B2", 1.0), (Fate.DUPLICATED, "duplicated", DUPLICATED, 1.0),
               (Fate.RESAMPLED_AWAY, "resampled away", "#bbbbbb", 0.6))    # (fate, legend name, colour, opacity)


def _genealogy_edges(lines) -> tuple[list, list]:
    """Plotly line segments (None-separated) from each particle to the one it continues."""
    edge_x, edge_y = [], []
    for previous, line in zip(lines, lines[1:]):
        for row, parent in enumerate(line.parents):
            edge_x += [previous.event.step + 1, line.event.step + 1, None]
            edge_y += [parent + 1, row + 1, None]
    return edge_x, edge_y


def _genealogy_nodes(lines, fate: Fate, name: str) -> tuple[list, list, list, list]:
    """x, y, marker sizes and hover texts of every (cycle, particle) node with this fate."""
    xs, ys, sizes, texts = [], [], [], []
    for line in lines:
        cycle = line.event
        for row, weight in enumerate(cycle.weights):
            if line.fates[row] is not fate:
                continue
            xs.append(cycle.step + 1)
            ys.append(row + 1)
            sizes.append(6 + 22 * weight)
            new_text = cycle.particle_texts[row][:60] if row < len(cycle.particle_texts) else ""
            texts.append(f"cycle {cycle.step + 1}, particle {row + 1}<br>weight {weight:.3f} ({name})<br>"
                         f"{hover_escape(new_text)}")
    return xs, ys, sizes, texts


def smc_genealogy_figure(smc_events) -> go.Figure:
    """Genealogy: a node per (cycle, particle) sized by weight; an edge from each particle to the one it
    descends from in the previous cycle. Duplicated parents purple, dropped ones faded."""
    title = "SMC-SD genealogy"
    lines = lineage(smc_events)
    if not lines:
        return empty_figure(title, "Which particle descends from which appears here.")
    title, lines = last_cycles(title, lines, " cycles")
    edge_x, edge_y = _genealogy_edges(lines)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=edge_x, y=edge_y, mode="lines", line={"color": "#9a9a9a", "width": 1.5},
                             hoverinfo="skip", showlegend=False))
    for fate, name, colour, opacity in FATE_STYLES:
        xs, ys, sizes, texts = _genealogy_nodes(lines, fate, name)
        if xs:
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name=name, opacity=opacity,
                                     marker={"color": colour, "size": sizes, "line": {"width": 1, "color": "#333"}},
                                     hovertext=texts, hoverinfo="text"))
    n = max(len(line.event.weights) for line in lines)
    return styled(fig, title, "cycle", "particle", layout={"yaxis": {"range": [0.5, n + 0.5], "dtick": 1}})
