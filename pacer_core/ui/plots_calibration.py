"""The pre-verifier calibration tab's charts: reliability (predicted against observed acceptance) and ROC on
held-out tokens, the trained layer beside the confidence rule."""
from __future__ import annotations

import plotly.graph_objects as go

from .plots_style import empty_figure, styled

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
    return styled(fig, title, "predicted P(accept)", y_title)


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
    return styled(fig, title, "false positive rate", "true positive rate")
