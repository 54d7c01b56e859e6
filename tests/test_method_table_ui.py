"""A method registered in the method table appears on the page without any other edit: in the timeline's lanes,
the race's lane names and status lines, the charts' legends and colours, the columns and the metrics table; and
is gone again once its row is removed. Nothing here copies the table: the page reads it when it draws."""
from __future__ import annotations

import pytest

from pacer_core import method_table
from pacer_core.events import Metrics, Result, StepEvent, TokenRecord
from pacer_core.method_table import MethodEntry, lazy_decoder, numbers_for
from pacer_core.ui import charts, columns, race, tables, timeline
from pacer_core.ui.plots_time import accepted_histogram_figure, timeline_figure

pytestmark = pytest.mark.pure

TOY = MethodEntry("toy", "Toy decoder", "toy SD", "#123456",
                  lazy_decoder("pacer_core.decoders.fixed", "FixedSpeculative"), "toy:G", numbers_for("gamma"))


def step(method: str, index: int, states: list[str], draft_seconds: float = 0.01) -> StepEvent:
    tokens = [TokenRecord(1, "t", state, 0.5, 0.4, 0.8) for state in states]
    accepted = sum(state == "accepted" for state in states)
    drafted = sum(state in ("accepted", "rejected") for state in states)
    return StepEvent(method, index, tokens, [1] * (accepted + 1), "t", drafted, accepted, draft_seconds, 0.02,
                     (index + 1) * (accepted + 1))


def result(method: str, tokens: int, seconds: float) -> Result:
    metrics = Metrics(tau=2.0, alpha=0.5, target_calls=tokens // 2, draft_calls=4, new_tokens=tokens, seconds=seconds,
                      tokens_per_s=tokens / seconds)
    return Result(method=method, text="x", token_ids=[1] * tokens, events=[], metrics=metrics,
                  settings={"temperature": 0.0})


TOY_EVENTS = [step("toy", 0, ["accepted", "accepted", "rejected", "corrected"]),
              step("toy", 1, ["accepted", "accepted", "accepted", "bonus"])]
AR_EVENTS = [step("ar", index, ["bonus"], draft_seconds=0.0) for index in range(4)]


@pytest.fixture
def toy_row():
    with method_table.registered(TOY) as row:
        yield row


def test_the_toy_has_a_column_and_a_lane_after_the_others(toy_row):
    assert method_table.column_keys()[-1] == "toy" and method_table.method_keys()[0] == "ar"
    assert timeline.lane_order({"toy", "smc", "ar"}) == ["ar", "smc", "toy"]
    figure = timeline_figure({"ar": AR_EVENTS, "toy": TOY_EVENTS})
    lanes = {lane for trace in figure.data if trace.type == "bar" for lane in trace.y}
    assert lanes == {"AR", "toy SD"}
    assert "Toy decoder" in columns.column_html("toy", TOY_EVENTS)


def test_the_race_names_the_toy_by_its_labels(toy_row):
    lane = race.Lane("toy", (0.1, 0.2), (3, 7), 0.2)
    assert race.lane_word(lane, 0.15) == "toy SD 3 tokens"
    assert race.lane_word(lane, 1.0).startswith("toy SD ✓")
    assert "Toy decoder" in race.timing_line("toy", 1, 2)


def test_the_charts_draw_the_toy_in_its_colour(toy_row):
    histogram = accepted_histogram_figure({"toy": TOY_EVENTS})
    assert [(trace.name, trace.marker.color) for trace in histogram.data] == [("toy SD", "#123456")]
    figures = charts.figures(charts.ChartData({"ar": AR_EVENTS, "toy": TOY_EVENTS}), names={"lengths", "accept"})
    lengths = {trace.name: trace.line.color for trace in figures["lengths"].data if trace.mode == "lines+markers"}
    assert lengths == {"toy SD (drafted)": "#123456"}
    assert [(trace.name, trace.marker.color) for trace in figures["accept"].data] == [("toy SD", "#123456")]


def test_the_metrics_table_has_a_row_for_the_toy(toy_row):
    frame = tables.metrics_frame({"toy": result("toy", 20, 1.0), "ar": result("ar", 20, 2.0)})
    assert list(frame["method"]) == ["Autoregressive (AR)", "Toy decoder"]
    assert frame.set_index("method").loc["Toy decoder", "speedup"] == 2.0


def test_the_toy_is_gone_once_its_row_is_removed():
    with method_table.registered(TOY):
        assert "toy" in method_table.column_keys()
    assert "toy" not in method_table.column_keys()
    assert tables.metrics_frame({"toy": result("toy", 20, 1.0)}).empty
    assert race.lane_word(race.Lane("toy", (0.1,), (3,), 0.1), 1.0).startswith("toy ✓")
