"""``build_ui(target, drafters)``: the Gradio Blocks app. It lays out components and wires events, nothing else:
what the buttons do is ``handlers`` (plain functions returning ``ViewUpdate``s), what the page shows
comes from the pure renderers (columns, narration, page, the charts of ``charts``, tables).

Gradio handlers take one dict of input values (a set of components as ``inputs``) and return dicts
keyed by component (``PageView.apply``), never positional tuples. Bad settings become a warning
toast plus an error line in the page, never a stack trace; the app keeps serving."""
from __future__ import annotations

import html
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import gradio as gr
from starlette.middleware import Middleware

from ..method_table import column_keys, label_of
from ..settings import FIELD_BY_NAME, Limits
from . import charts, columns, frames, handlers, live, narration, page, tables
from .atlas_tab import atlas_tab
from .downloads import CACHE_SCHEDULE
from .drafter_menu import DrafterMenu
from .drafter_switch import app_context, drafter_context
from .frames import AcknowledgeRoute, DrawnFrames
from .page_types import AppContext, PageInputs, ViewUpdate
from .queue_watch import client_still_there, quiet_queue
from .quiet_frames import HeadScript
from .reading_tabs import other_tabs
from .replay_tab import replay_tab
from .session import user_message
from .starts import DRAFTER_STARTS, drafter_starts
from .widgets import EXPLAIN_PATH, control, gpu as _gpu

ASSETS = Path(__file__).resolve().parent.parent.parent / "assets"
CSS_PATH = ASSETS / "style.css"
EXAMPLES_PATH = ASSETS / "examples.json"
INTRO = ("# PACER Lab: speculative decoding, live\n"
         "A small **draft** model guesses the next tokens, the big **target** checks them all in one pass: "
         "**fixed-length SD**, **PACER** and **SMC-SD** side by side (tab *Explain*).")


def load_examples(path: Path = EXAMPLES_PATH) -> list[dict]:
    try:
        return [item for item in json.loads(path.read_text(encoding="utf-8")) if item.get("prompt")]
    except (OSError, ValueError):
        return [{"label": "Counting", "prompt": "Count from 1 to 20, separated by commas."}]


def launch_options(drawn_frames: DrawnFrames | None = None) -> dict:
    """Arguments for ``demo.launch`` that Gradio 6 takes there rather than in ``gr.Blocks`` (``drawn_frames``: the
    app's, which the page acknowledges at ``frames.ACKNOWLEDGE_PATH``)."""
    middleware = [Middleware(HeadScript)]
    if drawn_frames is not None:
        middleware.append(Middleware(AcknowledgeRoute, frames=drawn_frames))
    return {"css": CSS_PATH.read_text(encoding="utf-8") if CSS_PATH.exists() else "",
            # System fonts only: a workshop room may have no internet (no web-font downloads).
            "theme": gr.themes.Soft(primary_hue="blue", font=["ui-sans-serif", "system-ui", "Segoe UI", "Roboto",
                                                              "Helvetica", "Arial", "sans-serif"],
                                    font_mono=["ui-monospace", "SFMono-Regular", "Menlo", "Consolas",
                                               "DejaVu Sans Mono", "monospace"]),
            "footer_links": ["api"],
            "js": frames.DRAWN_JS,     # the page acknowledges each timing frame once drawn (ui/frames.py)
            # ... and holds its animation frames while a method is timed (ui/quiet_frames.py)
            "app_kwargs": {"middleware": middleware}}


@dataclass
class Controls:
    """The input components: settings by setting name, plus the switches that are not settings."""
    prompt: gr.Textbox
    settings: dict
    chat: gr.Checkbox
    own_threshold: gr.Checkbox
    measure_ar: gr.Checkbox
    drafter: gr.Dropdown
    drawn: gr.Textbox           # hidden: the page's script writes its ready mark, then each drawn frame's token

    def inputs(self, session_state: gr.State) -> set:
        return set(self.settings.values()) | {self.prompt, self.chat, self.own_threshold, self.measure_ar,
                                               self.drafter, self.drawn, session_state}

    def read(self, values: dict) -> PageInputs:
        settings = {name: values[component] for name, component in self.settings.items()}
        if values[self.own_threshold]:
            settings["threshold"] = None
        return PageInputs(values[self.prompt], settings, bool(values[self.chat]), bool(values[self.measure_ar]),
                          values[self.drafter] or None, acknowledges=bool(values.get(self.drawn)))


@dataclass
class PageView:
    """The output components, and how a ViewUpdate lands on them."""
    columns: dict
    plots: dict
    status: gr.HTML
    narration: gr.HTML
    table: gr.Dataframe
    download_json: gr.DownloadButton
    download_csv: gr.DownloadButton
    session_state: gr.State

    def outputs(self) -> list:
        return (list(self.columns.values()) + list(self.plots.values())
                + [self.status, self.narration, self.table, self.download_json, self.download_csv, self.session_state])

    def apply(self, update: ViewUpdate) -> dict:
        out = {self.columns[m]: markup for m, markup in (update.columns or {}).items()}
        out |= {self.plots[name]: figure for name, figure in (update.plots or {}).items()}
        for field, component in (("status", self.status), ("narration", self.narration), ("table", self.table),
                                 ("session", self.session_state)):
            if getattr(update, field) is not None:
                out[component] = getattr(update, field)
        if update.downloads is not None:
            out[self.download_json], out[self.download_csv] = update.downloads
        return out


def settings_panel(target, limits: Limits, starts: dict) -> tuple[dict, gr.Checkbox, gr.Checkbox]:
    """The Settings accordion: shared settings, then one column per method; the drafter-dependent controls start
    at ``starts`` (``drafter_starts``). Returns (settings by name, the chat-template switch, the "use the
    pre-verifier's own threshold" switch)."""
    with gr.Accordion("Settings", open=False, elem_id="settings"), gr.Row():
        with gr.Column(min_width=220):
            gr.Markdown("**Shared**")
            shared = {"temperature": control("temperature", limits, elem_id="temperature"),
                      "seed": control("seed", limits),
                      "max_new_tokens": control("max_new_tokens", limits, elem_id="max-new-tokens"),
                      "top_k": control("top_k", limits), "top_p": control("top_p", limits)}
            chat = gr.Checkbox(value=bool(target.use_chat_template), label="Use the chat template")
        with gr.Column(min_width=200):
            gr.Markdown(f"**{label_of('fixed')}**")
            fixed = {"gamma": control("gamma", limits, starts["gamma"])}
        with gr.Column(min_width=220):
            gr.Markdown(f"**{label_of('pacer')}**")
            pacer = {"block_size": control("block_size", limits, starts["block_size"]),
                     "max_draft_len": control("max_draft_len", limits, starts["max_draft_len"])}
            own_threshold = gr.Checkbox(value=starts["own_threshold"], label="Use the pre-verifier's own threshold")
            pacer["threshold"] = control("threshold", limits, starts["threshold"])
            pacer["on_fail"] = gr.Radio([("submit failing block (lossless)", "submit"),
                                         ("discard it (exact only when greedy)", "discard")],
                                        value=FIELD_BY_NAME["on_fail"].default, label=FIELD_BY_NAME["on_fail"].label)
            pacer["preverifier_choice"] = gr.Radio([("trained layer", "trained"), ("confidence rule", "confidence")],
                                            value=FIELD_BY_NAME["preverifier_choice"].default,
                                            label=FIELD_BY_NAME["preverifier_choice"].label,
                                            info=FIELD_BY_NAME["preverifier_choice"].help, elem_id="preverifier-choice")
            pacer["stop_rule"] = gr.Radio([("pre-verifier threshold", "threshold"), ("expected gain vs measured cost", "cost"),
                                           ("auto: threshold greedy, cost sampling", "auto")],
                                          value=starts["stop_rule"], label=FIELD_BY_NAME["stop_rule"].label,
                                          info=FIELD_BY_NAME["stop_rule"].help)
            pacer["phrase_len"] = control("phrase_len", limits, starts["phrase_len"])
        with gr.Column(min_width=200):
            gr.Markdown(f"**{label_of('smc')}**")
            smc = {name: control(name, limits, starts.get(name)) for name in ("n_particles", "draft_len", "ess_threshold")}
    return shared | fixed | pacer | smc, chat, own_threshold


def live_outputs(session_state: gr.State) -> tuple[PageView, gr.Checkbox, gr.Checkbox]:
    """The run status, the legend and the display switches on one line, the columns, the narration, the charts
    (``charts.CHARTS``, by row), the metrics table and the downloads. Returns the view and the two display switches
    (show the step trace, show rejected drafts)."""
    with gr.Row(elem_id="view-row", equal_height=True):
        status = gr.HTML(page.run_status_html("Ready."), elem_id="run-status", label="Run status", scale=1,
                         min_width=200)
        gr.HTML(page.legend_html(hint=False), elem_id="legend", scale=5, min_width=300)
        show_trace = gr.Checkbox(value=True, label="Step trace", elem_id="show-trace", container=False, scale=0,
                                 min_width=120)
        show_rejected = gr.Checkbox(value=True, label="Rejected drafts", elem_id="show-rejected",
                                    container=False, scale=0, min_width=150)
    column_boxes = {}
    with gr.Row(elem_id="pacer-columns", equal_height=False):
        for method in column_keys():
            with gr.Column(min_width=280):
                # No autoscroll: the answer stays at the top of the box while the trace grows beneath it.
                # The template joins a running column's parts (ui/live.py), so a streamed update sends only
                # what changed; a plain string shows as it is.
                column_boxes[method] = gr.HTML(columns.column_html(method, []), elem_id=f"col-{method}",
                                               label=label_of(method), elem_classes=["pacer-col-box"],
                                               max_height=480, autoscroll=False, container=True, padding=True,
                                               html_template=live.COLUMN_TEMPLATE)
    narration_box = gr.HTML(narration.narration_html({}), elem_id="narration", label="Step-through narration")
    plot_boxes, empty = {}, charts.ChartData()
    for row in charts.chart_rows():
        with gr.Row():
            for chart in row:
                plot_boxes[chart.name] = gr.Plot(chart.figure(empty), elem_id=f"plot-{chart.name}", show_label=False,
                                                 label=chart.title, elem_classes=["pacer-run-plot"])
    table = gr.Dataframe(tables.empty_frame(), label=tables.LABEL, interactive=False,
                         elem_id="metrics-table", wrap=True)
    with gr.Row():
        download_json = gr.DownloadButton("⬇ JSON trace", value=None, elem_id="download-json")
        download_csv = gr.DownloadButton("⬇ CSV metrics", value=None, elem_id="download-csv")
    view = PageView(column_boxes, plot_boxes, status, narration_box, table, download_json, download_csv, session_state)
    return view, show_trace, show_rejected


def drafter_dropdown(menu: DrafterMenu) -> gr.Dropdown:
    """The drafter choice: every drafter the loaded target offers, each with its one-line description."""
    options = menu.options()
    return gr.Dropdown([(f"Drafter: {option.description}", option.key) for option in options], value=menu.default_key,
                       label="Drafter (all three columns)", show_label=False, container=False,
                       elem_id="drafter", filterable=False)


def left_out_text(left_out: dict[str, str]) -> str:
    """One small line under the drafter list: the kinds not offered here and why (markdown, escaped)."""
    reasons = "; ".join(f"**{key}**: {html.escape(why)}" for key, why in left_out.items())
    return f"<small>Not offered here — {reasons}</small>"


def drafter_choice_view(context: AppContext, key: str, pair_note: str | None) -> dict:
    """What the page shows for a drafter: the pair line, and where its drafter-dependent controls start."""
    chosen = drafter_context(context, key)
    starts = drafter_starts(chosen.target, chosen.drafter, chosen.preverifier, key or context.drafter_menu.default_key)
    return {"pair": page.pair_status_html(chosen.target.describe(chosen.drafter), chosen.preverifier_kind,
                                          pair_note)} | starts


@dataclass
class LiveTab:
    """The live tab's components that events are wired to."""
    controls: Controls
    view: PageView
    pair_status: gr.HTML
    run_button: gr.Button
    step_button: gr.Button
    stop_button: gr.Button
    show_trace: gr.Checkbox
    show_rejected: gr.Checkbox


def prompt_column(context: AppContext, examples: list[dict]) -> tuple[gr.Textbox, dict, gr.Checkbox, gr.Checkbox,
                                                                       gr.Dropdown]:
    """The prompt, and beneath it the examples, the settings and the drafter choice. Returns (prompt, settings by
    name, the chat-template switch, the own-threshold switch, the drafter menu)."""
    menu = context.drafter_menu
    with gr.Column(scale=4, min_width=300):
        prompt = gr.Textbox(label="Prompt", show_label=False, lines=2, max_lines=6, elem_id="prompt",
                            value=examples[0]["prompt"] if examples else "",
                            placeholder="Type a prompt, or pick one of the workshop examples")
        with gr.Row(equal_height=False, elem_id="options-row"):
            with gr.Column(min_width=260):
                with gr.Accordion(f"Workshop examples ({len(examples)})", open=False, elem_id="examples"):
                    gr.Examples(examples=[[item["prompt"]] for item in examples], inputs=[prompt],
                                example_labels=[item.get("label", item["prompt"][:30]) for item in examples],
                                label=None)
            with gr.Column(min_width=260):
                starts = drafter_starts(context.target, context.drafter, context.preverifier, menu.default_key)
                settings, chat, own_threshold = settings_panel(context.target, context.limits, starts)
            with gr.Column(min_width=300, elem_id="drafter-column"):
                drafter_menu = drafter_dropdown(menu)
                if menu.left_out():
                    gr.Markdown(left_out_text(menu.left_out()), elem_id="drafters-left-out")
    return prompt, settings, chat, own_threshold, drafter_menu


def live_tab(context: AppContext, pair_note: str | None, examples: list[dict], session_state: gr.State) -> LiveTab:
    """One screen (1366x768): title and model line, prompt and buttons, examples and settings collapsed, then run
    status, legend and the columns; narration, charts and table below."""
    with gr.Tab("Live demo", id="live"):
        with gr.Row(elem_id="pacer-header", equal_height=False):
            gr.Markdown(INTRO, elem_id="pacer-title", scale=2, min_width=300)
            pair_status = gr.HTML(page.pair_status_html(context.target.describe(context.drafter),
                                                        context.preverifier_kind, pair_note),
                                  elem_id="pair-status", scale=3, min_width=300)
        with gr.Row(equal_height=False, elem_id="prompt-row"):
            prompt, settings, chat, own_threshold, drafter_menu = prompt_column(context, examples)
            with gr.Column(scale=1, min_width=240, elem_id="buttons"):
                run_button = gr.Button("▶ Run", variant="primary", elem_id="run-button")
                with gr.Row(elem_id="step-stop"):
                    step_button = gr.Button("Step ▸", variant="secondary", elem_id="step-button", scale=1,
                                            min_width=90)
                    stop_button = gr.Button("■ Stop", variant="stop", elem_id="stop-button", scale=1, min_width=90)
                measure_ar = gr.Checkbox(value=True, label="Measure the AR baseline too", elem_id="measure-ar",
                                         container=False)
        view, show_trace, show_rejected = live_outputs(session_state)
        drawn = gr.Textbox("", visible="hidden", elem_id="pacer-drawn", show_label=False, container=False,
                           label="Drawn frame")
    controls = Controls(prompt, settings, chat, own_threshold, measure_ar, drafter_menu, drawn)
    return LiveTab(controls, view, pair_status, run_button, step_button, stop_button, show_trace, show_rejected)


def build_ui(target, drafters, preverifier=None, limits: Limits | None = None, pair_note: str | None = None,
             title: str = "PACER Lab", warm: bool = False) -> gr.Blocks:
    """The whole app for one Target loaded once per process, drafting with the loader's drafter
    (``drafters.default``, a ``drafters.LoadedDrafters``) until the page chooses another. ``warm``: run
    ``handlers.warm_up`` first (app.py does), so that the first visitor's Run is timed like every later one."""
    context = app_context(target, drafters, preverifier, limits)
    if warm:
        warm_up_or_say_why(context)
    explain_text = EXPLAIN_PATH.read_text(encoding="utf-8") if EXPLAIN_PATH.exists() else ""
    with gr.Blocks(title=title, fill_width=True, delete_cache=CACHE_SCHEDULE) as demo:
        session_state = gr.State(None, time_to_live=3600)   # per browser session, dropped after an hour idle
        with gr.Tabs():
            live = live_tab(context, pair_note, load_examples(), session_state)
            other_tabs(context.preverifier, explain_text)
            replay_tab()
            atlas_tab(context, live.controls.prompt, live.controls.settings, live.controls.drafter)
        wire_buttons(demo, context, live, session_state)
        wire_drafter_choice(context, live, pair_note)
        wire_display_switches(live)
    demo.pacer_frames = context.frames      # serve() routes the page's acknowledgements to them
    return demo


def warm_up_or_say_why(context: AppContext) -> None:
    """``handlers.warm_up``, its seconds in the log; a failure is logged and the app serves anyway (the first Run
    then pays the first-call costs, or shows the same error in its columns)."""
    try:
        seconds = handlers.warm_up(context)
    except Exception as error:  # noqa: BLE001 - the page reports a real Run's errors itself
        print(f"[pacer] warm-up failed ({user_message(error)}); the first Run will include first-call costs",
              file=sys.stderr, flush=True)
        return
    print(f"[pacer] warmed up every method in {seconds:.1f} s", file=sys.stderr, flush=True)


def wire_buttons(demo: gr.Blocks, context: AppContext, live: LiveTab, session_state: gr.State) -> None:
    """Run, Step (and Enter in the prompt) stream ViewUpdates onto the page; Stop ends the running session."""
    controls, view = live.controls, live.view

    def show(updates):
        """ViewUpdates → Gradio update dicts; a warning also becomes a toast (HTML: escape it)."""
        for update in handlers.guarded(updates):
            if update.warning:
                gr.Warning(html.escape(update.warning))
            yield view.apply(update)

    @_gpu
    def run_all(values: dict, request: gr.Request = None):   # None: called directly, not by Gradio
        still_wanted = client_still_there(demo, request)
        yield from show(handlers.run(context, controls.read(values), still_wanted=still_wanted,
                                     quiet=lambda: quiet_queue(demo)))

    @_gpu
    def step_once(values: dict):
        yield from show(handlers.step(context, controls.read(values), values[session_state]))

    def stop(session):
        return handlers.stop(session).status

    decode = {"inputs": controls.inputs(session_state), "outputs": view.outputs(), "concurrency_id": "decode",
              "show_progress": "minimal"}
    live.run_button.click(run_all, api_name="run", **decode)
    controls.prompt.submit(run_all, api_visibility="private", **decode)
    live.step_button.click(step_once, api_name="step", **decode)
    live.stop_button.click(stop, inputs=session_state, outputs=view.status, concurrency_limit=None, api_name="stop")
    # The page drew a timing frame: off the queue, so it reaches the Run that is waiting for it.
    controls.drawn.change(context.frames.acknowledge, inputs=controls.drawn, outputs=None, queue=False,
                          show_progress="hidden", api_visibility="private")


def wire_drafter_choice(context: AppContext, live: LiveTab, pair_note: str | None) -> None:
    """Choosing a drafter builds it (once) and shows it: the pair line, its measured fixed length and threshold."""
    controls = live.controls

    @_gpu
    def choose_drafter(key):
        try:
            shown = drafter_choice_view(context, key, pair_note)
        except (ValueError, RuntimeError) as error:
            gr.Warning(html.escape(str(error)))
            return {live.pair_status: page.pair_status_html(context.target.describe(context.drafter),
                                                            context.preverifier_kind, str(error))}
        return ({live.pair_status: shown["pair"], controls.own_threshold: shown["own_threshold"]}
                | {controls.settings[name]: shown[name] for name in DRAFTER_STARTS})

    controls.drafter.change(choose_drafter, inputs=controls.drafter,
                            outputs=[live.pair_status, controls.own_threshold]
                            + [controls.settings[name] for name in DRAFTER_STARTS],
                            concurrency_id="decode", api_name="choose_drafter")


def wire_display_switches(live: LiveTab) -> None:
    """Pure display toggles, in the browser only: hide struck-through drafts to read the final text; the clean
    answer alone, or with the coloured step trace beneath it."""
    for switch, css_class in ((live.show_rejected, "pacer-hide-rejected"), (live.show_trace, "pacer-hide-trace")):
        switch.change(None, inputs=switch, api_visibility="private", js=(
            f"(show) => {{ document.body.classList.toggle('{css_class}', !show); return show; }}"))


def serve(demo: gr.Blocks, host: str = "127.0.0.1", port: int | None = None, concurrency: int | None = None,
          **launch_kwargs):
    """Queue with a concurrency limit and launch (what app.py calls)."""
    if concurrency is None:
        try:
            concurrency = max(1, int(os.environ.get("PACER_CONCURRENCY", "1")))
        except ValueError:
            concurrency = 1
    demo.queue(default_concurrency_limit=concurrency, max_size=int(os.environ.get("PACER_QUEUE_SIZE", "32")))
    options = launch_options(getattr(demo, "pacer_frames", None)) | {"server_name": host, "server_port": port} \
        | launch_kwargs
    return demo.launch(**options)
