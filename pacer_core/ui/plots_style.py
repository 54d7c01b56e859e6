"""What every chart of the page shares: its look (one small template, titles, legends, margins set in one
assignment), the colours of token verdicts and particles, an empty chart's message, and ``thinned``, which keeps a
long run's figures to a bounded number of points. Method colours and legend names come from the method table
(``method_table.colour_of``, ``short_label_of``).

The charts themselves are pure plotly builders (events in, ``go.Figure`` out; no model, no Gradio), one module per
family: ``plots_drafts`` (draft lengths, acceptance by position, PACER's blocks), ``plots_smc`` (SMC-SD's
particles), ``plots_time`` (timeline, speedup, accepted drafts per pass) and ``plots_calibration`` (the
pre-verifier tab). Any token text shown in a hover label is escaped first (plotly renders a subset of HTML in
labels), and labels use ``hovertext`` rather than ``hovertemplate`` so ``%{...}`` in a token is never
interpreted."""
from __future__ import annotations

import html

import plotly.graph_objects as go
import plotly.io as pio

from ..events import SMCCycleEvent, StepEvent

ACCEPTED, REJECTED, STOPPED, DUPLICATED = "#009E73", "#D55E00", "#E69F00", "#CC79A7"
PREFILL_GREY = "#999999"      # the timeline's prompt prefill: work every method does alike
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


def thinned_title(title: str, stride: int, unit: str = "step") -> str:
    return title if stride == 1 else f"{title} (one {unit} in {stride} shown)"


def _merged(base: dict, extra: dict) -> dict:
    """``base`` with ``extra`` laid over it, nested dicts merged key by key."""
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def hline(y: float, line: dict, text: str) -> dict:
    """A dashed horizontal line across the plot with its label at the top left (as ``add_hline`` draws it)."""
    return {"shapes": [{"type": "line", "xref": "x domain", "x0": 0, "x1": 1, "yref": "y", "y0": y, "y1": y,
                        "line": line}],
            "annotations": [{"text": text, "xref": "x domain", "x": 0, "xanchor": "left", "yref": "y", "y": y,
                             "yanchor": "bottom", "showarrow": False}]}


def styled(fig: go.Figure, title: str, x_title: str, y_title: str, height: int = 340,
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
    return styled(fig, title, "", "", layout={"annotations": [note], "xaxis": {"visible": False},
                                              "yaxis": {"visible": False}})


def steps_of(events) -> list[StepEvent]:
    return [event for event in events or [] if isinstance(event, StepEvent)]


def cycles_of(events) -> list[SMCCycleEvent]:
    return [event for event in events or [] if isinstance(event, SMCCycleEvent)]

