"""The Atlas tab: run a prompt set (the built-in categorised one or an uploaded JSONL) with one method and one
or two drafters, watch the progress bar, stop when you like (what finished is kept), then read where the
drafter's guesses are accepted: by draft position, kind of token, prompt category and the drafter's own
confidence; the tokens most often rejected with their contexts, the most confidently wrong drafts, every
prompt's τ, α and speedup, and with a second drafter where one is accepted and the other not.

Every table row leads back: choosing it puts its prompt, the atlas's temperature, seed, max new tokens and
drafter into the Live demo and switches to it. ``atlas_tab`` lays the tab out and wires it; what the buttons
do is ``atlas_session``, what the page shows is ``atlas_view``."""
from __future__ import annotations

import html

import gradio as gr

from . import atlas_session, atlas_view
from .atlas_session import AtlasChoice, AtlasUpdate
from .page_types import AppContext

METHOD_CHOICES = [("PACER", "pacer"), ("Fixed-length SD, γ = 2", "fixed:2"), ("Fixed-length SD, γ = 3", "fixed:3"),
                  ("Fixed-length SD, γ = 5", "fixed:5")]
INTRO = ("**Acceptance atlas.** Decode a whole prompt set with one method and see *where* the drafter's guesses "
         "are accepted. Counts are the target's verdicts on drafted tokens (a token after the first rejection "
         "of its step is not judged), so *by position* is the acceptance at each depth given the ones before. "
         "Without an upload the built-in set runs: 40 short prompts in 8 categories (JSONL: one "
         '`{"prompt": …, "category": …}` a line; `category` is optional).')


def drafter_choices(context: AppContext) -> list[str]:
    return list(context.drafter_menu.keys) if context.drafter_menu is not None else []


class AtlasTab:
    """The tab's components (the inputs of a run and the view of its atlas)."""

    def __init__(self, context: AppContext):
        from .widgets import control

        keys = drafter_choices(context)
        default = context.drafter_menu.default_key if context.drafter_menu is not None else None
        gr.Markdown(INTRO)
        with gr.Row(equal_height=False):
            self.method = gr.Dropdown(METHOD_CHOICES, value="pacer", label="Method", allow_custom_value=True,
                                      info="or type fixed:G, pacer:B:L[:T]", elem_id="atlas-method")
            self.drafter = gr.Dropdown(keys, value=default, label="Drafter", elem_id="atlas-drafter",
                                       interactive=bool(keys))
            self.compare = gr.Dropdown([("none", "")] + [(key, key) for key in keys], value="",
                                       label="Compare with", elem_id="atlas-compare", interactive=bool(keys))
            self.upload = gr.File(label="Prompt set (JSONL; empty: the built-in set)", file_types=[".jsonl"],
                                  type="filepath", elem_id="atlas-upload", height=100)
        with gr.Row(equal_height=False):
            self.temperature = control("temperature", context.limits, 0.0, elem_id="atlas-temperature")  # greedy
            self.seed = control("seed", context.limits)
            self.max_new_tokens = control("max_new_tokens", context.limits, 32, elem_id="atlas-max-new-tokens")
            with gr.Column(min_width=200):
                self.measure_ar = gr.Checkbox(value=False, label="Measure AR too (speedup)", elem_id="atlas-ar")
                with gr.Row():
                    self.run_button = gr.Button("▶ Run atlas", variant="primary", elem_id="atlas-run")
                    self.stop_button = gr.Button("■ Stop", variant="stop", elem_id="atlas-stop")
        self.status = gr.HTML(atlas_view.progress_html(0, 1, "Ready.", "info"), elem_id="atlas-status")
        self.summary = gr.HTML(atlas_view.summary_html(None), elem_id="atlas-summary")
        self.plots = {}
        for row in (("position", "kind"), ("category", "calibration"), ("preverifier", "prompts")):
            with gr.Row():
                for name in row:
                    self.plots[name] = gr.Plot(FIGURES[name](None), elem_id=f"atlas-plot-{name}", show_label=False)
        gr.HTML(atlas_view.rejection_legend())
        self.tables = {name: gr.Dataframe(frame(None), label=label, interactive=False, wrap=True,
                                          elem_id=f"atlas-table-{name}") for name, (label, frame) in TABLES.items()}
        self.files = gr.File(label="atlas.json, atlas.csv, report.md", file_count="multiple", interactive=False,
                             elem_id="atlas-files")
        self.session = gr.State(None, time_to_live=3600)

    def inputs(self) -> list:
        return [self.method, self.drafter, self.compare, self.temperature, self.seed, self.max_new_tokens,
                self.measure_ar, self.upload]

    def outputs(self) -> list:
        return [self.status, self.summary, *self.plots.values(), *self.tables.values(), self.files, self.session]

    def apply(self, update: AtlasUpdate) -> dict:
        out = {self.status: update.status} if update.status is not None else {}
        if update.atlas is not None:
            out[self.summary] = atlas_view.summary_html(update.atlas)
            out |= {self.plots[name]: FIGURES[name](update.atlas) for name in self.plots}
            out |= {self.tables[name]: frame(update.atlas) for name, (_, frame) in TABLES.items()}
        if update.session is not None:
            out[self.session] = update.session
        if update.files is not None:
            out[self.files] = update.files
        return out


FIGURES = {"position": atlas_view.position_figure, "kind": atlas_view.kind_figure,
           "category": atlas_view.category_figure, "calibration": atlas_view.calibration_figure,
           "preverifier": atlas_view.preverifier_figure, "prompts": atlas_view.prompts_figure}
TABLES = {"rejected": ("Most often rejected tokens, with their contexts", atlas_view.rejected_tokens_frame),
          "confident": ("Most confidently wrong drafts", atlas_view.confidently_wrong_frame),
          "prompts": ("Per prompt (speedup needs 'Measure AR too')", atlas_view.prompts_frame),
          "disagree": ("Two drafters: one accepted, the other not", atlas_view.disagreements_frame)}


def read_choice(method, drafter, compare, temperature, seed, max_new_tokens, measure_ar, upload) -> AtlasChoice:
    return AtlasChoice(str(method or "pacer"), drafter or None, compare or None, float(temperature), int(seed),
                       int(max_new_tokens), bool(measure_ar), upload or None)


def atlas_tab(context: AppContext, live_prompt: gr.Textbox, live_settings: dict, live_drafter: gr.Dropdown) -> gr.Tab:
    """Add the Atlas tab inside the page's ``gr.Tabs`` (after the Live demo's controls exist) and wire it;
    a chosen row fills ``live_prompt``, the temperature, seed and max-new-tokens controls in ``live_settings``
    and ``live_drafter``, then selects the tab with id "live"."""
    with gr.Tab("Atlas", id="atlas", elem_id="atlas-tab") as tab:
        view = AtlasTab(context)
    tabs = tab.parent
    live = {"prompt": live_prompt, "drafter": live_drafter} | {name: live_settings[name]
                                                                  for name in atlas_session.LIVE_SETTINGS}

    from .widgets import gpu as _gpu   # the page's ZeroGPU decorator (unchanged off Spaces)

    @_gpu
    def run_atlas(*values):
        for update in atlas_session.guarded(atlas_session.run(context, read_choice(*values))):
            if update.warning:
                gr.Warning(html.escape(update.warning))
            yield view.apply(update)

    def open_in_live(session, event: gr.SelectData):
        values = atlas_session.live_values(session, (event.row_value or [None])[0], drafter_choices(context))
        if values is None:
            return {}
        return {live[name]: value for name, value in values.items()} | {tabs: gr.Tabs(selected="live")}

    view.run_button.click(run_atlas, inputs=view.inputs(), outputs=view.outputs(), concurrency_id="decode",
                          show_progress="hidden", api_name="atlas")
    view.stop_button.click(atlas_session.stop, inputs=view.session, outputs=None, concurrency_limit=None,
                           api_name="atlas_stop")
    for table in view.tables.values():
        table.select(open_in_live, inputs=view.session, outputs=list(live.values()) + [tabs],
                     api_visibility="private")
    return tab
