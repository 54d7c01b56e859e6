"""Pure plot-builder tests: the figures carry the right numbers, and token text in hover labels is
escaped (plotly renders a subset of HTML there)."""
from __future__ import annotations

import json

import plotly.graph_objects as go
import pytest

from pacer_core.events import BlockDecision, SMCCycleEvent, StepEvent, TokenRecord
from pacer_core.ui import plots_drafts, plots_smc

pytestmark = pytest.mark.pure

HOSTILE = "\u202e<script>alert(1)</script><b>b</b><img src=x onerror=alert(1)>%{x}"


def step(method, step_index, states, text=HOSTILE, blocks=None):
    tokens = [TokenRecord(1, text, state, 0.5, 0.4, 0.8) for state in states]
    for index, token_record in enumerate(tokens):
        token_record.block = index // 2 if blocks else None
    n_drafted = sum(s in ("accepted", "rejected") for s in states)
    n_accepted = sum(s == "accepted" for s in states)
    return StepEvent(method, step_index, tokens, [1] * (n_accepted + 1), "t", n_drafted, n_accepted, 0.0, 0.0,
                     (step_index + 1) * 3, blocks or [])


def cycle(index, weights, resampled=False, ancestors=None, text=HOSTILE):
    n = len(weights)
    return SMCCycleEvent("smc", index, [text] * n, [[1, 2]] * n, [0.0] * n, weights,
                         ess=1.0 / sum(w * w for w in weights), ess_threshold=0.5, resampled=resampled,
                         ancestors=ancestors or list(range(n)), finished=[False] * n, draft_seconds=0.0,
                         verify_seconds=0.0, total_new_tokens=2 * (index + 1))


FIXED = [step("fixed", 0, ["accepted", "accepted", "rejected", "rejected", "corrected"]),
         step("fixed", 1, ["accepted", "accepted", "accepted", "accepted", "bonus"])]
PACER = [step("pacer", 0, ["accepted", "accepted", "accepted", "rejected", "corrected"],
              blocks=[BlockDecision(0, 2, 0.9, 0.5, True), BlockDecision(1, 2, 0.3, 0.5, False)]),
         step("pacer", 1, ["accepted", "accepted", "bonus"], blocks=[BlockDecision(0, 2, 0.2, 0.5, False)])]
SMC = [cycle(0, [0.25, 0.25, 0.25, 0.25]), cycle(1, [0.7, 0.1, 0.1, 0.1], True, [0, 0, 0, 3]),
       cycle(2, [0.4, 0.2, 0.2, 0.2])]


def all_hover_text(fig: go.Figure) -> str:
    parts = []
    for trace in fig.data:
        hover = getattr(trace, "hovertext", None)
        if hover is not None:
            parts.extend([hover] if isinstance(hover, str) else list(hover))
        assert getattr(trace, "hovertemplate", None) in (None, ""), "hovertemplate would interpret %{...}"
    return "\n".join(str(p) for p in parts)


FIGURES = {
    "lengths": lambda: plots_drafts.draft_length_figure({"fixed": FIXED, "pacer": PACER}, oracle=[3, 5], oracle_steps=[1, 2]),
    "accept": lambda: plots_drafts.acceptance_figure({"fixed": FIXED, "pacer": PACER}),
    "blocks": lambda: plots_drafts.block_scores_figure(PACER),
    "weights": lambda: plots_smc.smc_weights_figure(SMC),
    "ess": lambda: plots_smc.smc_ess_figure(SMC),
    "genealogy": lambda: plots_smc.smc_genealogy_figure(SMC),
}


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_hover_labels_escape_token_text(name):
    fig = FIGURES[name]()
    hover = all_hover_text(fig)
    for raw in ("<script", "<img", "<b>b", "\u202e"):
        assert raw not in hover
    if name in ("lengths", "blocks", "weights", "genealogy"):
        assert "&lt;script&gt;" in hover and "&lt;b&gt;b" in hover
        assert "\u27e8U+202E\u27e9" in hover
    json.loads(fig.to_json())   # serialisable for gr.Plot


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_empty_inputs_give_a_placeholder_figure(name):
    builders = {"lengths": lambda: plots_drafts.draft_length_figure({}), "accept": lambda: plots_drafts.acceptance_figure({}),
                "blocks": lambda: plots_drafts.block_scores_figure([]), "weights": lambda: plots_smc.smc_weights_figure([]),
                "ess": lambda: plots_smc.smc_ess_figure([]), "genealogy": lambda: plots_smc.smc_genealogy_figure([])}
    fig = builders[name]()
    assert not fig.data and fig.layout.annotations


def test_draft_length_traces():
    fig = plots_drafts.draft_length_figure({"fixed": FIXED, "pacer": PACER}, oracle=[3, 5], oracle_steps=[1, 2])
    by_name = {trace.name: trace for trace in fig.data}
    assert list(by_name["fixed SD (drafted)"].y) == [4, 4]
    assert list(by_name["PACER (drafted)"].y) == [4, 2]
    assert list(by_name["PACER (accepted)"].y) == [3, 2]
    assert list(by_name["oracle γ*"].y) == [3, 5]
    assert "oracle γ*" not in {t.name for t in plots_drafts.draft_length_figure({"fixed": FIXED, "pacer": PACER}).data}


def test_acceptance_by_position():
    positions, rates, counts = plots_drafts.acceptance_by_position(FIXED)
    assert positions == [1, 2, 3, 4] and counts == [2, 2, 2, 2]
    assert rates == [1.0, 1.0, 0.5, 0.5]


def test_block_scores_and_threshold_line():
    fig = plots_drafts.block_scores_figure(PACER)
    names = {trace.name: trace for trace in fig.data}
    assert sorted(names["block passed"].y) == [0.9]
    assert sorted(names["block failed → stop"].y) == [0.2, 0.3]
    assert any(shape.y0 == 0.5 for shape in fig.layout.shapes)


def test_smc_weights_ess_and_genealogy():
    weights = plots_smc.smc_weights_figure(SMC)
    assert len(weights.data) == 4 and list(weights.data[0].y) == [0.25, 0.7, 0.4]
    ess = plots_smc.smc_ess_figure(SMC)
    by_name = {trace.name: trace for trace in ess.data}
    assert list(by_name["threshold"].y) == [2.0, 2.0, 2.0]
    assert list(by_name["resampled"].x) == [2]
    genealogy = plots_smc.smc_genealogy_figure(SMC)
    edges = genealogy.data[0]
    pairs = [(edges.x[i], edges.y[i], edges.x[i + 1], edges.y[i + 1]) for i in range(0, len(edges.x), 3)]
    # cycle 2 resampled with ancestors [0, 0, 0, 3]: particles 1-3 of cycle 3 descend from particle 1.
    assert (2, 1, 3, 2) in pairs and (2, 1, 3, 3) in pairs and (2, 4, 3, 4) in pairs
    kinds = {trace.name for trace in genealogy.data[1:]}
    assert {"duplicated", "resampled away", "kept"} <= kinds


def test_calibration_figures_from_shipped_metrics():
    from pacer_core.ui.plots_calibration import reliability_figure, roc_figure

    metrics = {"reliability": [{"bin_low": 0.8, "bin_high": 0.9, "count": 40, "mean_predicted": 0.85,
                                "fraction_accepted": 0.8}],
               "roc": [{"threshold": 0.0, "tpr": 1.0, "fpr": 1.0}, {"threshold": 1.0, "tpr": 0.0, "fpr": 0.0}],
               "roc_auc_greedy": 0.86}
    assert len(reliability_figure(metrics).data) == 2
    assert "AUC 0.860" in roc_figure(metrics).data[1].name
    assert reliability_figure(None).layout.annotations  # heuristic pairs get a message, not an empty plot
