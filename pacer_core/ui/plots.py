"""Pure plotly figure builders: events in, ``go.Figure`` out. No model, no Gradio.

Any token text shown in a hover label is escaped first (plotly renders a subset of HTML in
labels), and labels use ``hovertext`` rather than ``hovertemplate`` so ``%{...}`` in a token is
never interpreted."""
from __future__ import annotations

import html

import plotly.graph_objects as go
import plotly.io as pio

from ..events import SMCCycleEvent, StepEvent, TokenState
from . import timeline
from .columns import DRAFTED_STATES
from .escape import hover_escape
from .genealogy import Fate, lineage

METHOD_COLOURS = {"ar": "#000000", "fixed": "#56B4E9", "pacer": "#0072B2", "smc": "#CC79A7", "oracle": "#000000"}
ACCEPTED, REJECTED, STOPPED, DUPLICATED = "#009E73", "#D55E00", "#E69F00", "#CC79A7"
PARTICLE_COLOURS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
# A long run's figures keep a bounded number of points, so a redraw costs about the same at 48 tokens as at
# 512: per-step plots show every k-th step (``thinned``), the timeline groups consecutive passes, the SMC-SD
# weights and genealogy show the latest cycles.
MAX_STEPS_SHOWN = 160
MAX_CYCLES_SHOWN = 48


def _page_template() -> go.layout.Template:
    """plotly_white reduced to what these 2-D bar and scatter figures read (its layout colours, axes, fonts and
    its bar and scatter defaults): the same look, ~0.8 KB per figure on the page instead of ~7 KB, and
    several times faster to apply (plotly validates and copies a figure's whole template)."""
    white = pio.templates["plotly_white"].to_plotly_json()
    kept = ("colorway", "font", "hovermode", "hoverlabel", "paper_bgcolor", "plot_bgcolor", "xaxis", "yaxis",
            "shapedefaults", "annotationdefaults", "title", "autotypenumbers")
    layout = {key: value for key, value in white["layout"].items() if key in kept}
    return go.layout.Template(layout=layout, data={kind: white["data"][kind] for kind in ("bar", "scatter")})


PAGE_TEMPLATE = _page_template()


def thinned(items: list, limit: int = MAX_STEPS_SHOWN) -> tuple[list, int]:
    """At most ``limit`` of ``items`` and the stride k: every k-th item counted back from the last (the
    newest is always shown), k the smallest that fits; all of them (k = 1) when they fit."""
    if len(items) <= limit:
        return list(items), 1
    stride = -(-len(items) // limit)
    return items[len(items) - 1::-stride][::-1], stride


def _thinned_title(title: str, stride: int, unit: str = "step") -> str:
    return title if stride == 1 else f"{title} (one {unit} in {stride} shown)"


def _merged(base: dict, extra: dict) -> dict:
    """``base`` with ``extra`` laid over it, nested dicts merged key by key."""
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _hline(y: float, line: dict, text: str) -> dict:
    """A dashed horizontal line across the plot with its label at the top left (as ``add_hline`` draws it)."""
    return {"shapes": [{"type": "line", "xref": "x domain", "x0": 0, "x1": 1, "yref": "y", "y0": y, "y1": y,
                        "line": line}],
            "annotations": [{"text": text, "xref": "x domain", "x": 0, "xanchor": "left", "yref": "y", "y": y,
                             "yanchor": "bottom", "showarrow": False}]}


def _layout(fig: go.Figure, title: str, x_title: str, y_title: str, height: int = 340,
            layout: dict | None = None) -> go.Figure:
    """The page's look and ``layout`` (axis ranges, bar mode, lines), set in ONE assignment: plotly's
    update_layout / update_yaxes / add_hline each walk its property machinery, several times slower."""
    page = {"title": {"text": title, "font": {"size": 16}, "x": 0.01, "xanchor": "left", "y": 0.985,
                      "yanchor": "top"},
            "template": PAGE_TEMPLATE, "height": height, "margin": {"l": 55, "r": 15, "t": 88, "b": 45},
            "xaxis": {"title": {"text": x_title}}, "yaxis": {"title": {"text": y_title}},
            "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0, "font": {"size": 12}},
            "hoverlabel": {"font": {"size": 12}}, "font": {"size": 12}}
    existing = fig.layout.to_plotly_json()
    existing.pop("template", None)
    fig.layout = _merged(_merged(existing, page), layout or {})
    return fig


def empty_figure(title: str, message: str) -> go.Figure:
    fig = go.Figure()
    note = {"text": html.escape(message), "showarrow": False, "x": 0.5, "y": 0.5, "xref": "paper", "yref": "paper",
            "font": {"size": 13, "color": "#777"}}
    return _layout(fig, title, "", "", layout={"annotations": [note], "xaxis": {"visible": False},
                                              "yaxis": {"visible": False}})


def _steps(events) -> list[StepEvent]:
    return [event for event in events or [] if isinstance(event, StepEvent)]


STOPPED_BY = {"preverifier": "the pre-verifier", "cost": "the cost rule (drafting stopped paying)",
              "max_len": "the maximum draft length", "budget": "the token limit", "eos": "end of text"}


def _draft_tokens_hover(event: StepEvent) -> str:
    drafted = [t for t in event.tokens if t.state in DRAFTED_STATES]
    text = "".join(t.text for t in drafted)
    stopped = f"<br>stopped by {STOPPED_BY[event.stop_reason]}" if event.stop_reason in STOPPED_BY else ""
    return (f"step {event.step + 1}<br>drafted {event.n_drafted}, accepted {event.n_accepted}{stopped}<br>"
            f"draft: {hover_escape(text[:80])}")


def draft_length_figure(fixed_events, pacer_events, oracle: list | None = None,
                        oracle_steps: list | None = None, oracle_label: str = "oracle γ*") -> go.Figure:
    """Draft length per step: fixed γ, PACER's chosen length, and the oracle γ* when known."""
    title = "Draft length per step"
    fixed, pacer = _steps(fixed_events), _steps(pacer_events)
    if not fixed and not pacer:
        return empty_figure(title, "Run to see how many tokens each method drafts per step.")
    (fixed, stride), (pacer, pacer_stride) = thinned(fixed), thinned(pacer)
    stride = max(stride, pacer_stride)
    title = _thinned_title(title, stride)
    fig = go.Figure()
    for name, label, events, dash in (("fixed", "fixed γ", fixed, "solid"), ("pacer", "PACER", pacer, "solid")):
        if events:
            fig.add_trace(go.Scatter(
                x=[e.step + 1 for e in events],
                y=[sum(t.state in DRAFTED_STATES for t in e.tokens) for e in events],
                mode="lines+markers", name=f"{label} (drafted)", line={"color": METHOD_COLOURS[name], "shape": "hv",
                                                                      "dash": dash},
                hovertext=[_draft_tokens_hover(e) for e in events], hoverinfo="text"))
            fig.add_trace(go.Scatter(
                x=[e.step + 1 for e in events], y=[e.n_accepted for e in events], mode="markers",
                name=f"{label} (accepted)", marker={"color": METHOD_COLOURS[name], "symbol": "circle-open",
                                                    "size": 9},
                hovertext=[f"step {e.step + 1}: {e.n_accepted} accepted" for e in events], hoverinfo="text"))
    if oracle:
        steps = oracle_steps or list(range(1, len(oracle) + 1))
        pairs, _ = thinned(list(zip(steps, oracle)))
        steps, oracle = [step for step, _ in pairs], [value for _, value in pairs]
        fig.add_trace(go.Scatter(x=steps, y=oracle, mode="lines+markers", name=html.escape(oracle_label),
                                 line={"color": METHOD_COLOURS["oracle"], "dash": "dot", "shape": "hv"},
                                 marker={"symbol": "x", "size": 7},
                                 hovertext=[f"step {s}: {html.escape(oracle_label)} = {g:g}"
                                            for s, g in zip(steps, oracle)], hoverinfo="text"))
    return _layout(fig, title, "step (target forward pass)", "tokens")


def acceptance_by_position(events) -> tuple[list[int], list[float], list[int]]:
    """For draft positions 1..G: fraction of verified drafted tokens at that position accepted."""
    totals, accepted = {}, {}
    for event in _steps(events):
        position = 0
        for token in event.tokens:
            if token.state not in (TokenState.ACCEPTED, TokenState.REJECTED):
                continue
            position += 1
            totals[position] = totals.get(position, 0) + 1
            accepted[position] = accepted.get(position, 0) + (token.state is TokenState.ACCEPTED)
    positions = sorted(totals)
    return positions, [accepted[p] / totals[p] for p in positions], [totals[p] for p in positions]


def acceptance_figure(runs: dict) -> go.Figure:
    """Acceptance rate by draft position, one bar group per method."""
    title = "Acceptance rate by draft position"
    fig = go.Figure()
    for method, events in runs.items():
        positions, rates, counts = acceptance_by_position(events)
        if not positions:
            continue
        label = {"fixed": "fixed γ", "pacer": "PACER"}.get(method, method)
        fig.add_trace(go.Bar(x=positions, y=rates, name=label, marker_color=METHOD_COLOURS.get(method, "#777"),
                             hovertext=[f"{label}, position {p}: {r:.0%} of {c} drafted tokens accepted"
                                        for p, r, c in zip(positions, rates, counts)], hoverinfo="text"))
    if not fig.data:
        return empty_figure(title, "No drafted tokens yet.")
    return _layout(fig, title, "position in the draft", "accepted",
                   layout={"barmode": "group", "yaxis": {"range": [0, 1.05], "tickformat": ".0%"}})


def block_scores_figure(pacer_events) -> go.Figure:
    """Every PACER block's pre-verifier score against the threshold (passed green, failed amber); the
    dashed line is the highest threshold any block was judged by."""
    title = "PACER pre-verifier block scores"
    points = []
    shown, stride = thinned(_steps(pacer_events))
    title = _thinned_title(title, stride)
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
    return _layout(fig, title, "step (blocks of one step side by side)", "block score",
                   layout=_hline(line, {"color": STOPPED, "dash": "dash"}, f"threshold {line:.2f}")
                   | {"yaxis": {"range": [-0.02, 1.05]}})


def _cycles(events) -> list[SMCCycleEvent]:
    return [event for event in events or [] if isinstance(event, SMCCycleEvent)]


def smc_weights_figure(smc_events) -> go.Figure:
    """Normalised particle weights per cycle as stacked bars (each particle one colour)."""
    title = "SMC-SD particle weights per cycle"
    cycles = _cycles(smc_events)
    if not cycles:
        return empty_figure(title, "SMC-SD's particle weights appear here.")
    if len(cycles) > MAX_CYCLES_SHOWN:
        title = f"{title} (the last {MAX_CYCLES_SHOWN} of {len(cycles)})"
        cycles = cycles[-MAX_CYCLES_SHOWN:]
    n = max(len(c.weights) for c in cycles)
    fig = go.Figure()
    for row in range(n):
        fig.add_trace(go.Bar(
            x=[c.step + 1 for c in cycles], y=[c.weights[row] if row < len(c.weights) else 0 for c in cycles],
            name=f"#{row + 1}", marker_color=PARTICLE_COLOURS[row % len(PARTICLE_COLOURS)],
            hovertext=[f"cycle {c.step + 1}, particle {row + 1}: weight {c.weights[row]:.3f}<br>"
                       f"new text: {hover_escape(c.particle_texts[row][:60] if row < len(c.particle_texts) else '')}"
                       for c in cycles if row < len(c.weights)], hoverinfo="text"))
    return _layout(fig, title, "cycle", "weight", layout={"barmode": "stack", "yaxis": {"range": [0, 1.0]}})


def smc_ess_figure(smc_events) -> go.Figure:
    """Effective sample size per cycle against the resampling threshold; resampled cycles marked."""
    title = "SMC-SD effective sample size"
    cycles = _cycles(smc_events)
    if not cycles:
        return empty_figure(title, "ESS per cycle appears here.")
    cycles, stride = thinned(cycles)
    title = _thinned_title(title, stride, "cycle")
    x = [c.step + 1 for c in cycles]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=x, y=[c.ess for c in cycles], mode="lines+markers", name="ESS",
                             line={"color": METHOD_COLOURS["smc"]},
                             hovertext=[f"cycle {c.step + 1}: ESS {c.ess:.2f} of {len(c.weights)}" for c in cycles],
                             hoverinfo="text"))
    fig.add_trace(go.Scatter(x=x, y=[c.resample_line for c in cycles], mode="lines",
                             name="threshold", line={"color": STOPPED, "dash": "dash"}, hoverinfo="skip"))
    resampled = [c for c in cycles if c.resampled]
    if resampled:
        fig.add_trace(go.Scatter(x=[c.step + 1 for c in resampled], y=[c.ess for c in resampled], mode="markers",
                                 name="resampled", marker={"symbol": "star", "size": 12, "color": DUPLICATED},
                                 hovertext=[f"cycle {c.step + 1}: resampled" for c in resampled], hoverinfo="text"))
    return _layout(fig, title, "cycle", "ESS", layout={"yaxis": {"range": [0, max(len(c.weights) for c in cycles) + 0.3]}})


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
    if len(lines) > MAX_CYCLES_SHOWN:
        title = f"{title} (the last {MAX_CYCLES_SHOWN} of {len(lines)} cycles)"
        lines = lines[-MAX_CYCLES_SHOWN:]
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
    return _layout(fig, title, "cycle", "particle", layout={"yaxis": {"range": [0.5, n + 0.5], "dtick": 1}})


def diagonal_figure(name: str) -> go.Figure:
    """A figure holding only the dashed y = x reference line of the unit square, labelled `name`."""
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name=name, line={"dash": "dash", "color": "#999"},
                             hoverinfo="skip"))
    return fig


def reliability_figure(heldout_metrics: dict | None, title: str = "Pre-verifier reliability (held-out tokens)",
                       y_title: str = "fraction accepted") -> go.Figure:
    """Pre-verifier calibration: predicted acceptance vs the fraction actually accepted (greedy) or the mean
    acceptance probability (sampled tokens), per bin; the confidence rule's on the same tokens beside it."""
    bins = (heldout_metrics or {}).get("reliability") or []
    if not bins:
        return empty_figure(title, "No trained pre-verifier for this pair (heuristic rule).")
    fig = diagonal_figure("perfect calibration")
    named = [("trained layer", bins, "#0072B2"),
             ("confidence rule", heldout_metrics.get("reliability_confidence_rule") or [], "#D55E00")]
    for name, rows, colour in named:
        if rows:
            fig.add_trace(go.Scatter(x=[b["mean_predicted"] for b in rows], y=[b["fraction_accepted"] for b in rows],
                                     mode="lines+markers", name=name, line={"color": colour},
                                     marker={"size": [6 + min(14, b["count"] ** 0.5 / 3) for b in rows]},
                                     hovertext=[f"{name}: {b['count']} tokens predicted {b['bin_low']:.1f}–"
                                                f"{b['bin_high']:.1f}: {b['fraction_accepted']:.0%} {y_title}"
                                                for b in rows], hoverinfo="text"))
    return _layout(fig, title, "predicted P(accept)", y_title)


def roc_figure(heldout_metrics: dict | None) -> go.Figure:
    """ROC of per-token acceptance prediction on held-out tokens (greedy labels), the confidence rule's beside it."""
    title = "Pre-verifier ROC (held-out tokens)"
    points = (heldout_metrics or {}).get("roc") or []
    if not points:
        return empty_figure(title, "No trained pre-verifier for this pair (heuristic rule).")
    fig = diagonal_figure("chance")
    named = [("trained layer", points, heldout_metrics.get("roc_auc_greedy"), "#009E73"),
             ("confidence rule", heldout_metrics.get("roc_confidence_rule") or [],
              heldout_metrics.get("roc_auc_confidence_rule"), "#D55E00")]
    for name, rows, auc, colour in named:
        if rows:
            fig.add_trace(go.Scatter(x=[p["fpr"] for p in rows], y=[p["tpr"] for p in rows], mode="lines",
                                     name=f"{name} (AUC {auc:.3f})" if auc is not None else name,
                                     line={"color": colour},
                                     hovertext=[f"{name}, cut {p['threshold']:.2f}: TPR {p['tpr']:.2f}, FPR {p['fpr']:.2f}"
                                                for p in rows], hoverinfo="text"))
    return _layout(fig, title, "false positive rate", "true positive rate")


# ---------------------------------------------------------------- time and speed (numbers: ui/timeline.py)

SHORT_LABELS = {"ar": "AR", "fixed": "fixed γ", "pacer": "PACER", "smc": "SMC-SD"}
SEGMENT_STYLES = {timeline.KEPT_DRAFT: ("draft (kept)", ACCEPTED, ""),          # (legend name, colour, hatch)
                  timeline.WASTED_DRAFT: ("draft (rejected: wasted)", REJECTED, "x"),
                  timeline.VERIFY: ("target pass (verify)", "#0072B2", "")}


def _segment_hover(segment: timeline.Segment) -> str:
    label = SHORT_LABELS.get(segment.method, segment.method)
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
    lanes = [SHORT_LABELS.get(m, m) for m in timeline.LANES if any(s.method == m for s in segments)]
    fig = go.Figure()
    for kind, (name, colour, hatch) in SEGMENT_STYLES.items():
        chosen = [s for s in segments if s.kind == kind]
        if not chosen:
            continue
        fig.add_trace(go.Bar(
            y=[SHORT_LABELS.get(s.method, s.method) for s in chosen], x=[s.seconds for s in chosen],
            base=[s.start for s in chosen], orientation="h", name=name, width=0.62,
            marker={"color": colour, "pattern": {"shape": hatch, "fgcolor": "#ffffff", "size": 5},
                    "line": {"color": "#ffffff", "width": 0.6}},
            hovertext=[_segment_hover(s) for s in chosen], hoverinfo="text"))
    ends = {}
    for segment in segments:
        ends[segment.method] = segment.start + segment.seconds
    fig.add_trace(go.Scatter(
        x=list(ends.values()), y=[SHORT_LABELS.get(m, m) for m in ends], mode="text", showlegend=False,
        text=[f"  {ends[m]:.2f} s" for m in ends], textposition="middle right", hoverinfo="text",
        hovertext=[f"{SHORT_LABELS.get(m, m)}: {ends[m]:.2f} s of its own passes. Each method ran alone, one "
                   "after another, with nothing drawn while it decoded." for m in ends]))
    return _layout(fig, title, "seconds of each method's own passes, timed alone", "", height=250 + 18 * len(lanes),
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
    points = [point for method in ("fixed", "pacer", "smc")
              if (point := timeline.operating_point(method, events_by_method.get(method), ar_seconds))]
    fig = go.Figure()
    for point in points:
        label, colour = SHORT_LABELS[point.method], METHOD_COLOURS[point.method]
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
    return _layout(fig, title, "per-token acceptance α (◆ = this run)", "speedup vs AR",
                   layout=_hline(1.0, {"color": METHOD_COLOURS["ar"], "dash": "dash", "width": 1.5}, "AR = 1")
                   | {"xaxis": {"range": [0, 1.0], "tickformat": ".1f"}, "yaxis": {"range": [0, top * 1.08]}})


def accepted_histogram_figure(events_by_method: dict) -> go.Figure:
    """How many drafted tokens the target kept per pass, a bar group per method (SMC-SD: all K)."""
    title = "Accepted drafts per target pass"
    fig = go.Figure()
    for method in ("fixed", "pacer", "smc"):
        counts = timeline.accepted_histogram(events_by_method.get(method))
        if not counts:
            continue
        label, total = SHORT_LABELS[method], sum(counts.values())
        note = " (SMC-SD keeps every draft)" if method == "smc" else ""
        fig.add_trace(go.Bar(x=list(counts), y=list(counts.values()), name=label,
                             marker_color=METHOD_COLOURS[method],
                             hovertext=[f"{label}: {n} of {total} passes kept {k} drafted token{'s' if k != 1 else ''}"
                                        f"{note}" for k, n in counts.items()], hoverinfo="text"))
    if not fig.data:
        return empty_figure(title, "Run to see how many drafted tokens each pass kept.")
    return _layout(fig, title, "accepted drafted tokens in the pass", "passes",
                   layout={"barmode": "group", "xaxis": {"dtick": 1}})
