"""The page's charts, one ``ChartEntry`` each: its name (the key in ``ViewUpdate.plots``, the element id
``plot-NAME``), its title, its figure function and the row of the page it sits in. The live page
(``layout``), the Replay tab (``replay_tab``) and the views (``views.plots_view``) all read this table, so a new
chart is its figure function plus one row here.

A figure function takes ``ChartData`` (what a run gives the charts: every method's events, the oracle γ*, the
drafter's name) and returns a plotly figure; given an empty ``ChartData`` it returns the chart's empty state,
which the page shows before the first run. Pure: no Gradio, no model."""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import groupby
from typing import Callable

import plotly.graph_objects as go

from ..method_table import drafting_keys
from .plots_drafts import acceptance_figure, block_scores_figure, draft_length_figure
from .plots_smc import smc_ess_figure, smc_genealogy_figure, smc_weights_figure
from .plots_time import accepted_histogram_figure, speedup_figure, timeline_figure


@dataclass(frozen=True)
class ChartData:
    """What the charts read from one run. ``events``: method → its events (AR's when measured)."""
    events: dict[str, list] = field(default_factory=dict)
    oracle: list | None = None               # γ* per PACER step, when computed
    oracle_steps: list | None = None         # the PACER step each oracle value belongs to
    oracle_label: str = "oracle γ*"          # "oracle E[γ*] (sampling)" under sampling
    drafter: str | None = None               # the drafter's menu key, named in the speedup chart's title

    def of(self, method: str) -> list:
        return self.events.get(method, [])

    def drafting(self) -> dict[str, list]:
        """The events of the methods that draft step by step, in the method table's order."""
        return {key: self.of(key) for key in drafting_keys() if key in self.events}


@dataclass(frozen=True)
class ChartEntry:
    name: str                                   # ViewUpdate.plots key and element id ``plot-NAME``
    title: str                                  # the gr.Plot's label
    figure: Callable[[ChartData], go.Figure]    # the run's data → its figure (empty data: the empty chart)
    row: int                                    # which row of charts on the page, top first
    scored: bool = False                        # shows a figure of the scoring after the run (the oracle γ*)


CHARTS: tuple[ChartEntry, ...] = (
    ChartEntry("timeline", "Wall-clock timeline", lambda data: timeline_figure(data.events), row=0),
    ChartEntry("speedup", "Speedup against acceptance", lambda data: speedup_figure(data.events, data.drafter), row=1),
    ChartEntry("histogram", "Accepted tokens per pass", lambda data: accepted_histogram_figure(data.events), row=1),
    ChartEntry("lengths", "Draft length per step",
               lambda data: draft_length_figure(data.events, data.oracle, data.oracle_steps, data.oracle_label),
               row=2, scored=True),
    ChartEntry("accept", "Acceptance by position", lambda data: acceptance_figure(data.drafting()), row=2),
    ChartEntry("blocks", "PACER block scores", lambda data: block_scores_figure(data.of("pacer")), row=2),
    ChartEntry("weights", "SMC particle weights", lambda data: smc_weights_figure(data.of("smc")), row=3),
    ChartEntry("ess", "SMC ESS", lambda data: smc_ess_figure(data.of("smc")), row=3),
    ChartEntry("genealogy", "SMC genealogy", lambda data: smc_genealogy_figure(data.of("smc")), row=3),
)


def chart_names() -> tuple[str, ...]:
    return tuple(chart.name for chart in CHARTS)


def scored_names() -> frozenset[str]:
    """The charts that wait for the scoring after the run; the others can be drawn as soon as the run ends."""
    return frozenset(chart.name for chart in CHARTS if chart.scored)


def chart_rows() -> list[tuple[ChartEntry, ...]]:
    """The charts grouped by row, top first, each row in the table's order."""
    ordered = sorted(CHARTS, key=lambda chart: chart.row)
    return [tuple(charts) for _, charts in groupby(ordered, key=lambda chart: chart.row)]


def figures(data: ChartData, names=None) -> dict[str, go.Figure]:
    """The charts by name (all of them, or only ``names``)."""
    return {chart.name: chart.figure(data) for chart in CHARTS if names is None or chart.name in names}
