"""The Replay tab (Gradio): open a recorded run, shipped in ``assets/traces`` or uploaded (a trace the
page's "⬇ JSON trace" exported), and step through it with no model. ``replay_tab()`` adds the tab to the
page ``layout.build_ui`` builds; ``build_replay_ui()`` is the page of ``python app.py --replay-only``, which
loads no model. What it shows is ``replay`` (plain functions returning ``ViewUpdate``s) drawn by the live
page's renderers; element ids start with ``replay-`` (the live tab's are unprefixed)."""
from __future__ import annotations

import html
import sys
import traceback
from dataclasses import dataclass

import gradio as gr

from ..method_table import column_keys, label_of
from . import charts, columns, live, narration, page, tables
from .downloads import CACHE_SCHEDULE
from .page_types import ViewUpdate
from .replay import (Replay, TraceError, check_drawable, error_view, open_trace_file, recorded_html, refused_view,
                     replay_view, shipped_traces)

INTRO = ("Replay a recorded run: pick one of the workshop's recorded runs, or upload a trace the Live demo "
         "exported (**⬇ JSON trace**). Nothing runs: press **Step ▸** to see each target pass drafted, then "
         "verified, as it was recorded; **▸▸ Whole run** shows the finished run.")
NOT_OPENED = '<div class="pair-status replay-meta"><span class="pair-item">No recorded run opened yet.</span></div>'


@dataclass
class ReplayView:
    """The replay's output components, and how a ViewUpdate lands on them (keyed by component)."""
    columns: dict
    plots: dict
    status: gr.HTML
    narration: gr.HTML
    table: gr.Dataframe
    recorded: gr.HTML
    state: gr.State

    def outputs(self) -> list:
        return (list(self.columns.values()) + list(self.plots.values())
                + [self.status, self.narration, self.table, self.recorded, self.state])

    def apply(self, update: ViewUpdate, replay: Replay | None = None) -> dict:
        out = {self.columns[m]: markup for m, markup in (update.columns or {}).items()}
        out |= {self.plots[name]: figure for name, figure in (update.plots or {}).items()}
        for field, component in (("status", self.status), ("narration", self.narration), ("table", self.table)):
            if getattr(update, field) is not None:
                out[component] = getattr(update, field)
        if replay is not None:
            out[self.state] = replay
        return out


def show(view: ReplayView, replay: Replay) -> dict:
    """A replay's current click on the page (an unexpected failure becomes the status line, never a crash)."""
    try:
        return view.apply(replay_view(replay), replay)
    except Exception as error:  # noqa: BLE001 - the page keeps serving
        traceback.print_exc(file=sys.stderr)
        return view.apply(error_view(f"This trace cannot be shown: {type(error).__name__}."))


def opened(view: ReplayView, path) -> dict:
    """A newly opened trace at its first click with its recorded-on line, or the reason it is refused."""
    if not path:
        return {}
    try:
        replay = open_trace_file(path)
    except TraceError as error:
        gr.Warning(html.escape(str(error)))
        return view.apply(refused_view(str(error))) | {view.recorded: NOT_OPENED, view.state: None}
    return show(view, replay) | {view.recorded: recorded_html(replay.recorded)}


def drawable(view: ReplayView, replay: Replay | None) -> dict:
    """After the first step is shown: refuse the trace now if its finished page cannot be drawn."""
    if replay is None:
        return {}
    try:
        check_drawable(replay)
    except TraceError as error:
        gr.Warning(html.escape(str(error)))
        return view.apply(refused_view(str(error))) | {view.recorded: NOT_OPENED, view.state: None}
    return {}


def moved(view: ReplayView, replay: Replay | None, move: str) -> dict:
    """Step, start or end of the replay in the state (a message when nothing is open)."""
    if replay is None:
        return view.apply(error_view("Open a recorded run first: pick one or upload a trace."))
    return show(view, getattr(replay, move)())


def replay_outputs(state: gr.State) -> ReplayView:
    """The recorded-on line, status and legend, the three columns, narration, plots and metrics table."""
    recorded = gr.HTML(NOT_OPENED, elem_id="replay-recorded")
    with gr.Row(elem_id="replay-view-row", equal_height=True):
        status = gr.HTML(page.run_status_html("Open a recorded run."), elem_id="replay-status", scale=2,
                         min_width=200)
        gr.HTML(page.legend_html(hint=False), elem_id="replay-legend", scale=5, min_width=300)
    boxes = {}
    with gr.Row(elem_id="replay-columns", equal_height=False):
        for method in column_keys():
            with gr.Column(min_width=280):
                boxes[method] = gr.HTML(columns.column_html(method, []), elem_id=f"replay-col-{method}",
                                        label=label_of(method), elem_classes=["pacer-col-box"], max_height=480,
                                        autoscroll=False, container=True, padding=True,
                                        html_template=live.COLUMN_TEMPLATE)
    narration_box = gr.HTML(narration.narration_html({}), elem_id="replay-narration")
    plots = {}
    for row in charts.chart_rows():
        with gr.Row():
            for chart in row:
                plots[chart.name] = gr.Plot(None, elem_id=f"replay-plot-{chart.name}", show_label=False)
    table = gr.Dataframe(tables.empty_frame(), label="Metrics (speedup = tokens/s ÷ AR tokens/s)", interactive=False,
                         elem_id="replay-metrics-table", wrap=True)
    return ReplayView(boxes, plots, status, narration_box, table, recorded, state)


def replay_panel() -> None:
    """The tab's content: the choice of a recorded run, the upload, the buttons and the outputs, wired."""
    state = gr.State(None, time_to_live=3600)
    shipped = shipped_traces()
    with gr.Row(equal_height=False, elem_id="replay-controls"):
        with gr.Column(scale=3, min_width=300):
            gr.Markdown(INTRO)
            example = gr.Dropdown([(title, str(path)) for title, path in shipped.items()], value=None,
                                  label="Recorded runs (the workshop's exercises)", elem_id="replay-example",
                                  filterable=False)
        with gr.Column(scale=1, min_width=240):
            upload = gr.UploadButton("⬆ Upload a trace (.json)", file_types=[".json"], type="filepath",
                                     elem_id="replay-file")
            step_button = gr.Button("Step ▸", variant="primary", elem_id="replay-step")
            end_button = gr.Button("▸▸ Whole run", elem_id="replay-end")
            start_button = gr.Button("◂◂ First step", elem_id="replay-start")
    view = replay_outputs(state)
    outputs = view.outputs()
    options = {"outputs": outputs, "show_progress": "minimal", "concurrency_limit": None}
    def open_path(path):
        return opened(view, path)

    def check(replay):
        return drawable(view, replay)

    # A client replays through the API too: /replay_open (a shipped trace's path), /replay_step, /replay_end,
    # /replay_start (benchmarks/class_load.py); the upload and the check after an open stay page-only.
    opens = ((upload.upload, upload, {"api_visibility": "private"}), (example.change, example,
                                                                       {"api_name": "replay_open"}))
    for listener, source, api in opens:
        listener(open_path, inputs=source, **api, **options).then(
            check, inputs=state, api_visibility="private", **(options | {"show_progress": "hidden"}))
    for button, move in ((step_button, "step"), (end_button, "end"), (start_button, "start")):
        button.click(mover(view, move), inputs=state, api_name=f"replay_{move}", **options)


def mover(view: ReplayView, move: str):
    """The click handler of one button: ``moved`` with that move."""
    def handler(replay):
        return moved(view, replay, move)
    return handler


def replay_tab() -> None:
    """The Replay tab, inside the page's ``gr.Tabs``."""
    with gr.Tab("Replay", id="replay"):
        replay_panel()


def build_replay_ui(title: str = "PACER Lab: replay") -> gr.Blocks:
    """The page of ``app.py --replay-only``: replay and the Explain tab, no model loaded (a class's Space at
    no compute)."""
    from .widgets import EXPLAIN_PATH

    explain_text = EXPLAIN_PATH.read_text(encoding="utf-8") if EXPLAIN_PATH.exists() else ""
    with gr.Blocks(title=title, fill_width=True, delete_cache=CACHE_SCHEDULE) as demo:
        gr.Markdown("# PACER Lab: speculative decoding, replayed\nRecorded runs of **fixed-length SD**, **PACER** "
                    "and **SMC-SD** side by side, step by step (this page runs no model).", elem_id="replay-title")
        with gr.Tabs():
            replay_tab()
            with gr.Tab("Explain", id="explain"):
                gr.HTML(page.legend_html())
                gr.Markdown(explain_text or "See the README.", elem_id="explain-text")
    return demo
