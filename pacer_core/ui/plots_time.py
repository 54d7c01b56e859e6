"""Charts of time and speed (their numbers: ``ui/timeline.py``): the wall-clock timeline of every method's
target passes, the expected speedup against acceptance at each method's measured costs, and how many drafted
tokens each pass kept. A lane or trace per method, in the method table's order, named and coloured by it."""
from __future__ import annotations

import html

import plotly.graph_objects as go

from ..method_table import colour_of, column_keys, short_label_of
from . import timeline
from .plots_style import ACCEPTED, MAX_STEPS_SHOWN, PREFILL_GREY, REJECTED, empty_figure, hline, styled

SEGMENT_STYLES = {timeline.PREFILL: ("prompt prefill", PREFILL_GREY, ""),       # (legend name, colour, hatch)
                  timeline.KEPT_DRAFT: ("draft (kept)", ACCEPTED, ""),
                  timeline.WASTED_DRAFT: ("draft (rejected: wasted)", REJECTED, "x"),
                  timeline.VERIFY: ("target pass (verify)", "#0072B2", "")}


def _segment_hover(segment: timeline.Segment) -> str:
    label = short_label_of(segment.method)
    if segment.kind == timeline.PREFILL:
        return (f"{html.escape(label)}, before its first pass: fresh caches and the prompt's prefill "
                f"(the same work for every method)<br>{segment.seconds * 1000:.1f} ms")
    what = {timeline.KEPT_DRAFT: f"drafting the {segment.drafted - segment.wasted} kept of {segment.drafted} tokens",
            timeline.WASTED_DRAFT: f"drafting the {segment.wasted} of {segment.drafted} tokens the target did not keep",
            timeline.VERIFY: "target forward pass" + (" (verify)" if segment.method != "ar" else "")}[segment.kind]
    if segment.passes > 1:
        return (f"{html.escape(label)}, passes {segment.step + 1}–{segment.step + segment.passes}: {what}<br>"
                f"{segment.seconds * 1000:.1f} ms, from {segment.start:.2f} s; the passes added {segment.emitted} "
                f"token{'s' if segment.emitted != 1 else ''}")
    return (f"{html.escape(label)}, pass {segment.step + 1}: {what}<br>{segment.seconds * 1000:.1f} ms, "
            f"from {segment.start:.2f} s; the pass added {segment.emitted} token{'s' if segment.emitted != 1 else ''}")


def timeline_figure(events_by_method: dict) -> go.Figure:
    """One lane per method; each target pass a block of draft time (kept, then wasted, hatched) and verify
    time, on one axis of seconds. Each lane lays the method's own passes end to end: Run times each method
    alone, one after another (Step: between clicks), so a lane is its decoder's own time."""
    title = "Timeline: each target pass, draft → verify · each method timed alone, one after another"
    segments = timeline.timeline_segments({m: e for m, e in events_by_method.items() if e}, MAX_STEPS_SHOWN)
    if not segments:
        return empty_figure(title, "Run to see each method's target passes on one time axis.")
    if any(segment.passes > 1 for segment in segments):
        title += " (long lanes: a bar per group of passes)"
    lanes = [short_label_of(m) for m in timeline.lane_order({s.method for s in segments})]
    fig = go.Figure()
    for kind, (name, colour, hatch) in SEGMENT_STYLES.items():
        chosen = [s for s in segments if s.kind == kind]
        if not chosen:
            continue
        fig.add_trace(go.Bar(
            y=[short_label_of(s.method) for s in chosen], x=[s.seconds for s in chosen],
            base=[s.start for s in chosen], orientation="h", name=name, width=0.62,
            marker={"color": colour, "pattern": {"shape": hatch, "fgcolor": "#ffffff", "size": 5},
                    "line": {"color": "#ffffff", "width": 0.6}},
            hovertext=[_segment_hover(s) for s in chosen], hoverinfo="text"))
    ends = {}
    for segment in segments:
        ends[segment.method] = segment.start + segment.seconds
    fig.add_trace(go.Scatter(
        x=list(ends.values()), y=[short_label_of(m) for m in ends], mode="text", showlegend=False,
        text=[f"  {ends[m]:.2f} s" for m in ends], textposition="middle right", hoverinfo="text",
        hovertext=[f"{short_label_of(m)}: {ends[m]:.2f} s of its prefill and its own passes (the metrics table's "
                   "seconds add the decoder's work between model calls). Each method ran alone, one after another, "
                   "with nothing drawn while it decoded." for m in ends]))
    return styled(fig, title, "seconds of each method's prefill and own passes, timed alone", "", height=250 + 18 * len(lanes),
                   layout={"barmode": "overlay", "bargap": 0.3, "xaxis": {"range": [0, max(ends.values()) * 1.12]},
                           "yaxis": {"categoryorder": "array", "categoryarray": list(reversed(lanes))}})


ALPHAS = [i / 50 for i in range(51)]


def speedup_figure(events_by_method: dict, drafter: str | None = None) -> go.Figure:
    """Expected speedup against per-token acceptance α for each speculative method's measured γ, draft cost
    c and verify cost v (Leviathan et al. 2023; ui/timeline.py), its measured operating point on it, AR at 1.
    ``drafter``: named in the title (c is that drafter's cost per drafted token)."""
    title = "Speedup vs acceptance (measured costs" + (f"; drafter {drafter})" if drafter else ")")
    ar_seconds = timeline.ar_seconds_per_token(events_by_method.get("ar"))
    if ar_seconds is None:
        return empty_figure(title, "Needs the AR baseline's time per token (tick “Measure the AR baseline”).")
    points = [point for method in column_keys()
              if (point := timeline.operating_point(method, events_by_method.get(method), ar_seconds))]
    fig = go.Figure()
    for point in points:
        label, colour = short_label_of(point.method), colour_of(point.method)
        costs = f"γ = {point.gamma:.1f}, c = {point.draft_cost:.2f}, v = {point.verify_cost:.2f}"
        curve = point.curve(ALPHAS)
        fig.add_trace(go.Scatter(
            x=ALPHAS, y=curve, mode="lines", name=f"{label} ({costs})",
            line={"color": colour, "dash": "dot" if point.method == "smc" else "solid"},
            hovertext=[f"{label}: α = {a:.2f} → {timeline.expected_tokens_per_step(a, point.gamma):.2f} tokens "
                       f"per pass, speedup {s:.2f}×" for a, s in zip(ALPHAS, curve)], hoverinfo="text"))
        kept = (f"<br>accepted / drafted = {point.kept_fraction:.2f}" if point.kept_fraction is not None
                else "<br>SMC-SD keeps every draft (reweights particles): α = 1 by construction")
        fig.add_trace(go.Scatter(
            x=[point.alpha_hat], y=[point.speedup], mode="markers", showlegend=False,
            marker={"color": colour, "size": 13, "symbol": "diamond", "line": {"color": "#000", "width": 1}},
            hovertext=[f"{label} now: τ = {point.tokens_per_step:.2f} tokens per pass → "
                       f"α̂ = {point.alpha_hat:.2f}, speedup {point.speedup:.2f}×<br>{costs} (in AR steps){kept}"],
            hoverinfo="text"))
    top = max([1.2] + [max(p.curve([1.0])[0], p.speedup) for p in points])
    return styled(fig, title, "per-token acceptance α (◆ = this run)", "speedup vs AR",
                   layout=hline(1.0, {"color": colour_of("ar"), "dash": "dash", "width": 1.5}, "AR = 1")
                   | {"xaxis": {"range": [0, 1.0], "tickformat": ".1f"}, "yaxis": {"range": [0, top * 1.08]}})


def accepted_histogram_figure(events_by_method: dict) -> go.Figure:
    """How many drafted tokens the target kept per pass, a bar group per method (SMC-SD: all K)."""
    title = "Accepted drafts per target pass"
    fig = go.Figure()
    for method in column_keys():
        counts = timeline.accepted_histogram(events_by_method.get(method))
        if not counts:
            continue
        label, total = short_label_of(method), sum(counts.values())
        note = " (SMC-SD keeps every draft)" if method == "smc" else ""
        fig.add_trace(go.Bar(x=list(counts), y=list(counts.values()), name=label,
                             marker_color=colour_of(method),
                             hovertext=[f"{label}: {n} of {total} passes kept {k} drafted token{'s' if k != 1 else ''}"
                                        f"{note}" for k, n in counts.items()], hoverinfo="text"))
    if not fig.data:
        return empty_figure(title, "Run to see how many drafted tokens each pass kept.")
    return styled(fig, title, "accepted drafted tokens in the pass", "passes",
                   layout={"barmode": "group", "xaxis": {"dtick": 1}})
