"""Charts of drafting, a trace per method that drafts step by step: how many tokens each step drafted and kept
(with the oracle γ*), acceptance by position in the draft, and PACER's pre-verifier block scores."""
from __future__ import annotations

import html

import plotly.graph_objects as go

from ..acceptance import AcceptanceByPosition
from ..events import StepEvent
from ..method_table import colour_of, drafting_keys, short_label_of
from .columns import DRAFTED_STATES
from .escape import hover_escape
from .plots_style import ACCEPTED, STOPPED, empty_figure, hline, steps_of, styled, thinned, thinned_title

ORACLE_COLOUR = "#000000"     # the oracle γ* line: not a method, so not in the method table

STOPPED_BY = {"preverifier": "the pre-verifier", "cost": "the cost rule (drafting stopped paying)",
              "max_len": "the maximum draft length", "budget": "the token limit", "eos": "end of text"}


def _draft_tokens_hover(event: StepEvent) -> str:
    drafted = [t for t in event.tokens if t.state in DRAFTED_STATES]
    text = "".join(t.text for t in drafted)
    stopped = f"<br>stopped by {STOPPED_BY[event.stop_reason]}" if event.stop_reason in STOPPED_BY else ""
    return (f"step {event.step + 1}<br>drafted {event.n_drafted}, accepted {event.n_accepted}{stopped}<br>"
            f"draft: {hover_escape(text[:80])}")


def draft_length_figure(events_by_method: dict, oracle: list | None = None,
                        oracle_steps: list | None = None, oracle_label: str = "oracle γ*") -> go.Figure:
    """Draft length per step of every method that drafts step by step (``drafting_keys``: fixed γ, PACER's chosen
    length), and the oracle γ* when known."""
    title = "Draft length per step"
    drafted = {key: steps_of(events_by_method.get(key)) for key in drafting_keys()}
    drafted = {key: steps for key, steps in drafted.items() if steps}
    if not drafted:
        return empty_figure(title, "Run to see how many tokens each method drafts per step.")
    shown = {key: thinned(steps) for key, steps in drafted.items()}
    title = thinned_title(title, max(stride for _, stride in shown.values()))
    fig = go.Figure()
    for key, (events, _) in shown.items():
        add_length_traces(fig, key, events)
    if oracle:
        add_oracle_trace(fig, oracle, oracle_steps, oracle_label)
    return styled(fig, title, "step (target forward pass)", "tokens")


def add_length_traces(fig: go.Figure, method: str, events: list[StepEvent]) -> None:
    """A method's drafted length per step (a line) and how many of them were accepted (open circles)."""
    label, colour = short_label_of(method), colour_of(method)
    fig.add_trace(go.Scatter(
        x=[e.step + 1 for e in events], y=[sum(t.state in DRAFTED_STATES for t in e.tokens) for e in events],
        mode="lines+markers", name=f"{label} (drafted)", line={"color": colour, "shape": "hv", "dash": "solid"},
        hovertext=[_draft_tokens_hover(e) for e in events], hoverinfo="text"))
    fig.add_trace(go.Scatter(
        x=[e.step + 1 for e in events], y=[e.n_accepted for e in events], mode="markers",
        name=f"{label} (accepted)", marker={"color": colour, "symbol": "circle-open", "size": 9},
        hovertext=[f"step {e.step + 1}: {e.n_accepted} accepted" for e in events], hoverinfo="text"))


def add_oracle_trace(fig: go.Figure, oracle: list, oracle_steps: list | None, oracle_label: str) -> None:
    """The oracle γ* per step (dotted), thinned like the steps."""
    steps = oracle_steps or list(range(1, len(oracle) + 1))
    pairs, _ = thinned(list(zip(steps, oracle)))
    steps, oracle = [step for step, _ in pairs], [value for _, value in pairs]
    fig.add_trace(go.Scatter(x=steps, y=oracle, mode="lines+markers", name=html.escape(oracle_label),
                             line={"color": ORACLE_COLOUR, "dash": "dot", "shape": "hv"},
                             marker={"symbol": "x", "size": 7},
                             hovertext=[f"step {s}: {html.escape(oracle_label)} = {g:g}"
                                        for s, g in zip(steps, oracle)], hoverinfo="text"))


def acceptance_by_position(events) -> tuple[list[int], list[float], list[int]]:
    """For draft positions 1..G: the share of verified drafted tokens at that position that were accepted (every
    verified token counts, those after a step's first rejection too; ``acceptance.AcceptanceByPosition``)."""
    return AcceptanceByPosition.of_events(events).verified_rates()


def acceptance_figure(runs: dict) -> go.Figure:
    """Acceptance rate by draft position, one bar group per method (``runs``: method → its events)."""
    title = "Acceptance rate by draft position"
    fig = go.Figure()
    for method, events in runs.items():
        positions, rates, counts = acceptance_by_position(events)
        if not positions:
            continue
        label = short_label_of(method)
        fig.add_trace(go.Bar(x=positions, y=rates, name=label, marker_color=colour_of(method, "#777"),
                             hovertext=[f"{label}, position {p}: {r:.0%} of {c} drafted tokens accepted"
                                        for p, r, c in zip(positions, rates, counts)], hoverinfo="text"))
    if not fig.data:
        return empty_figure(title, "No drafted tokens yet.")
    return styled(fig, title, "position in the draft", "accepted",
                   layout={"barmode": "group", "yaxis": {"range": [0, 1.05], "tickformat": ".0%"}})


def block_scores_figure(pacer_events) -> go.Figure:
    """Every PACER block's pre-verifier score against the threshold (passed green, failed amber); the
    dashed line is the highest threshold any block was judged by."""
    title = "PACER pre-verifier block scores"
    points = []
    shown, stride = thinned(steps_of(pacer_events))
    title = thinned_title(title, stride)
    for event in shown:
        for block in event.blocks:
            tokens = [t for t in event.tokens if t.block == block.index]
            points.append((event.step + 1, block, "".join(t.text for t in tokens)))
    if not points:
        return empty_figure(title, "PACER's blocks appear here as it drafts.")
    fig = go.Figure()
    for passed, colour, name, symbol in ((True, ACCEPTED, "block passed", "circle"),
                                         (False, STOPPED, "block failed → stop", "x")):
        chosen = [(s, b, t) for s, b, t in points if b.passed == passed]
        if chosen:
            fig.add_trace(go.Scatter(
                x=[s + 0.12 * b.index for s, b, _ in chosen], y=[b.score for _, b, _ in chosen], mode="markers",
                name=name, marker={"color": colour, "size": 9, "symbol": symbol, "line": {"width": 1}},
                hovertext=[f"step {s}, block {b.index + 1} ({b.size} tokens)<br>score {b.score:.3f} vs "
                           f"threshold {b.threshold:.3f}<br>{hover_escape(t[:80])}" for s, b, t in chosen],
                hoverinfo="text"))
    line = max(b.threshold for _, b, _ in points)
    return styled(fig, title, "step (blocks of one step side by side)", "block score",
                   layout=hline(line, {"color": STOPPED, "dash": "dash"}, f"threshold {line:.2f}")
                   | {"yaxis": {"range": [-0.02, 1.05]}})
