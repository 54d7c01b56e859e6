"""``build_ui(pair)``: the Gradio Blocks app. It lays out components and wires events; everything
it shows comes from the pure renderers (render, plots, tables) over a per-session ``RunSession``.

Handlers take one dict of input values (a set of components as ``inputs``) and return dicts keyed
by component, never positional tuples. Bad settings become a warning toast plus an error line in
the page (SettingsError's own message), never a stack trace; the app keeps serving."""
from __future__ import annotations

import html
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

import gradio as gr

from ..models import ModelLoadError
from ..settings import DecodeSettings, Limits, SettingsError
from . import COLUMN_METHODS, METHOD_LABELS, columns as column_views, measured, narration as narrative, page, plots, tables
from .session import RunSession, preverifier_kind, user_message

ASSETS = Path(__file__).resolve().parent.parent.parent / "assets"
CSS_PATH = ASSETS / "style.css"
EXAMPLES_PATH = ASSETS / "examples.json"
EXPLAIN_PATH = Path(__file__).resolve().parent / "explain.md"
PLOT_INTERVAL_S = 2.0          # redraw plots at most this often while streaming (~30 ms per figure)

try:  # On a Hugging Face ZeroGPU Space, decorate the model-running handlers; unchanged elsewhere.
    import spaces  # type: ignore

    _gpu = spaces.GPU(duration=int(os.environ.get("PACER_GPU_DURATION", "120")))
except ImportError:  # pragma: no cover - the usual case off Spaces
    def _gpu(function):
        return function


def load_examples(path: Path = EXAMPLES_PATH) -> list[dict]:
    try:
        return [item for item in json.loads(path.read_text(encoding="utf-8")) if item.get("prompt")]
    except (OSError, ValueError):
        return [{"label": "Counting", "prompt": "Count from 1 to 20, separated by commas."}]


def launch_options() -> dict:
    """Arguments for ``demo.launch`` that Gradio 6 takes there rather than in ``gr.Blocks``."""
    return {"css": CSS_PATH.read_text(encoding="utf-8") if CSS_PATH.exists() else "",
            # System fonts only: a workshop room may have no internet (no web-font downloads).
            "theme": gr.themes.Soft(primary_hue="blue", font=["ui-sans-serif", "system-ui", "Segoe UI", "Roboto",
                                                              "Helvetica", "Arial", "sans-serif"],
                                    font_mono=["ui-monospace", "SFMono-Regular", "Menlo", "Consolas",
                                               "DejaVu Sans Mono", "monospace"]),
            "footer_links": ["api"]}


def default_threshold(preverifier, temperature: float) -> float:
    if preverifier is None:
        return 0.3
    if hasattr(preverifier, "threshold_for"):
        try:
            return float(preverifier.threshold_for(temperature))
        except Exception:  # noqa: BLE001
            pass
    return float(getattr(preverifier, "default_threshold", 0.3))


def build_ui(pair, preverifier=None, limits: Limits | None = None, pair_note: str | None = None,
             title: str = "PACER Lab") -> gr.Blocks:
    """The whole app for one ModelPair loaded once per process."""
    limits = limits or Limits.from_env()
    if preverifier is None:
        try:
            from ..preverifier import default_preverifier

            preverifier = default_preverifier(pair)
        except Exception:  # noqa: BLE001
            traceback.print_exc(file=sys.stderr)
            preverifier = None
    pv_kind = getattr(preverifier, "kind", None) or preverifier_kind(pair)
    defaults = DecodeSettings()
    examples = load_examples()
    explain_text = EXPLAIN_PATH.read_text(encoding="utf-8") if EXPLAIN_PATH.exists() else ""

    with gr.Blocks(title=title, fill_width=True) as demo:
        session_state = gr.State(None, time_to_live=3600)   # per browser session, dropped after an hour idle
        with gr.Tabs():
            with gr.Tab("Live demo", id="live"):
                gr.Markdown(
                    "# PACER Lab: speculative decoding, live\n"
                    "A small **draft** model guesses the next tokens; the big **target** model checks them all in "
                    "one forward pass. Three ways to use the guesses run side by side on the same prompt, seed and "
                    "temperature: **fixed-length SD**, **PACER** (adaptive length, pre-verification) and "
                    "**SMC-SD** (particles, approximate).", elem_id="pacer-title")
                gr.HTML(page.pair_status_html(pair.describe(), pv_kind, pair_note), elem_id="pair-status")
                with gr.Row(equal_height=False):
                    with gr.Column(scale=4):
                        prompt = gr.Textbox(label="Prompt", lines=2, max_lines=8, elem_id="prompt",
                                            value=examples[0]["prompt"] if examples else "",
                                            placeholder="Type a prompt, or pick an example below")
                    with gr.Column(scale=1, min_width=200):
                        run_button = gr.Button("▶ Run", variant="primary", elem_id="run-button")
                        step_button = gr.Button("Step ▸ draft, then verify", variant="secondary", elem_id="step-button")
                        stop_button = gr.Button("■ Stop", variant="stop", elem_id="stop-button")
                        measure_ar = gr.Checkbox(value=True, label="Measure the AR baseline too",
                                                 elem_id="measure-ar")
                        show_rejected = gr.Checkbox(value=True, label="Show rejected draft tokens",
                                                    elem_id="show-rejected")
                gr.Examples(examples=[[item["prompt"]] for item in examples], inputs=[prompt],
                            example_labels=[item.get("label", item["prompt"][:30]) for item in examples],
                            label="Workshop examples")
                with gr.Accordion("Settings", open=False, elem_id="settings"):
                    with gr.Row():
                        with gr.Column(min_width=220):
                            gr.Markdown("**Shared**")
                            temperature = gr.Slider(0.0, 2.0, value=0.7, step=0.05, label="Temperature (0 = greedy)",
                                                    info="SMC-SD needs a temperature above 0.", elem_id="temperature")
                            seed = gr.Number(value=defaults.seed, precision=0, label="Seed")
                            max_new_tokens = gr.Slider(1, limits.max_new_tokens, step=1, label="Max new tokens",
                                                       value=min(48, limits.max_new_tokens), elem_id="max-new-tokens")
                            top_k = gr.Number(value=defaults.top_k, precision=0, label="Top-k (0 = off)")
                            top_p = gr.Slider(0.01, 1.0, value=defaults.top_p, step=0.01, label="Top-p")
                            chat = gr.Checkbox(value=bool(pair.use_chat_template), label="Use the chat template")
                        with gr.Column(min_width=200):
                            gr.Markdown(f"**{METHOD_LABELS['fixed']}**")
                            gamma = gr.Slider(1, 16, value=defaults.gamma, step=1, label="Draft length γ")
                        with gr.Column(min_width=220):
                            gr.Markdown(f"**{METHOD_LABELS['pacer']}**")
                            block_size = gr.Slider(1, 8, value=getattr(preverifier, "config", {}).get("block_size", defaults.block_size),
                                           step=1, label="Block size")
                            max_draft_len = gr.Slider(1, 32, value=defaults.max_draft_len, step=1,
                                                      label="Max draft length")
                            own_threshold = gr.Checkbox(value=True, label="Use the pre-verifier's own threshold")
                            threshold = gr.Slider(0.0, 1.0, value=round(default_threshold(preverifier, 0.7), 2),
                                                  step=0.01, label="Threshold (when not using its own)")
                            on_fail = gr.Radio([("submit failing block (lossless)", "submit"),
                                                ("discard it (exact only when greedy)", "discard")],
                                               value=defaults.on_fail, label="On a failed block")
                        with gr.Column(min_width=200):
                            gr.Markdown(f"**{METHOD_LABELS['smc']}**")
                            n_particles = gr.Slider(1, limits.max_particles, value=min(4, limits.max_particles),
                                                    step=1, label="Particles N")
                            draft_len = gr.Slider(1, 16, value=defaults.draft_len, step=1, label="Draft length K")
                            ess_threshold = gr.Slider(0.0, 1.0, value=defaults.ess_threshold, step=0.05,
                                                      label="ESS threshold (fraction of N)")
                gr.HTML(page.legend_html(), elem_id="legend")
                status = gr.HTML(page.run_status_html("Ready."), elem_id="run-status", label="Run status")
                narration = gr.HTML(narrative.narration_html({}), elem_id="narration", label="Step-through narration")
                columns = {}
                with gr.Row(elem_id="pacer-columns", equal_height=False):
                    for method in COLUMN_METHODS:
                        with gr.Column(min_width=280):
                            columns[method] = gr.HTML(column_views.column_html(method, []), elem_id=f"col-{method}",
                                                      label=METHOD_LABELS[method],
                                                      elem_classes=["pacer-col-box"], max_height=520,
                                                      autoscroll=True, container=True, padding=True)
                with gr.Row():
                    plot_lengths = gr.Plot(plots.draft_length_figure([], []), elem_id="plot-lengths", show_label=False,
                                           label="Draft length per step")
                    plot_accept = gr.Plot(plots.acceptance_figure({}), elem_id="plot-accept", show_label=False,
                                          label="Acceptance by position")
                    plot_blocks = gr.Plot(plots.block_scores_figure([]), elem_id="plot-blocks", show_label=False,
                                          label="PACER block scores")
                with gr.Row():
                    plot_weights = gr.Plot(plots.smc_weights_figure([]), elem_id="plot-weights", show_label=False,
                                           label="SMC particle weights")
                    plot_ess = gr.Plot(plots.smc_ess_figure([]), elem_id="plot-ess", show_label=False, label="SMC ESS")
                    plot_genealogy = gr.Plot(plots.smc_genealogy_figure([]), elem_id="plot-genealogy",
                                             show_label=False, label="SMC genealogy")
                table = gr.Dataframe(tables.empty_frame(), label="Metrics (speedup = tokens/s ÷ AR tokens/s)",
                                     interactive=False, elem_id="metrics-table", wrap=True)
                with gr.Row():
                    download_json = gr.DownloadButton("⬇ JSON trace", value=None, elem_id="download-json")
                    download_csv = gr.DownloadButton("⬇ CSV metrics", value=None, elem_id="download-csv")
            with gr.Tab("Explain", id="explain"):
                gr.HTML(page.legend_html())
                gr.Markdown(explain_text or "See the README.", elem_id="explain-text")
            with gr.Tab("Pre-verifier calibration", id="calibration"):
                heldout = getattr(preverifier, "config", {}).get("heldout_metrics") if preverifier else None
                gr.Markdown("How well PACER's trained pre-verification layer predicts whether the target accepts "
                            "a drafted token, on held-out prompts never trained on (greedy labels).")
                with gr.Row():
                    gr.Plot(plots.reliability_figure(heldout), elem_id="plot-reliability", show_label=False)
                    gr.Plot(plots.roc_figure(heldout), elem_id="plot-roc", show_label=False)

        setting_inputs = {"temperature": temperature, "seed": seed, "max_new_tokens": max_new_tokens,
                          "top_k": top_k, "top_p": top_p, "gamma": gamma, "block_size": block_size,
                          "max_draft_len": max_draft_len, "threshold": threshold, "on_fail": on_fail,
                          "n_particles": n_particles, "draft_len": draft_len, "ess_threshold": ess_threshold}
        inputs = set(setting_inputs.values()) | {prompt, chat, own_threshold, measure_ar, session_state}
        plot_components = {"lengths": plot_lengths, "accept": plot_accept, "blocks": plot_blocks,
                           "weights": plot_weights, "ess": plot_ess, "genealogy": plot_genealogy}
        outputs = ([columns[m] for m in COLUMN_METHODS] + list(plot_components.values())
                   + [status, narration, table, download_json, download_csv, session_state])

        def read_settings(values: dict) -> dict:
            raw = {name: values[component] for name, component in setting_inputs.items()}
            if values[own_threshold]:
                raw["threshold"] = None
            return raw

        def new_session(values: dict) -> RunSession:
            return RunSession(pair, values[prompt], read_settings(values), chat=bool(values[chat]),
                              preverifier=preverifier, measure_ar=bool(values[measure_ar]))

        def render_columns(session: RunSession, running: bool, pending: set | frozenset = frozenset()) -> dict:
            """Every column; methods in ``pending`` show their newest step as drafted, not yet verified."""
            out = {}
            for method in COLUMN_METHODS:
                run = session.runs[method]
                notes = []
                if method == "pacer" and pv_kind != "trained":
                    notes.append("Pre-verifier: heuristic confidence rule (no trained layer for this pair).")
                if method == "pacer" and session.settings.get("on_fail") == "discard" and session.settings.get(
                        "temperature", 0) > 0:
                    notes.append("Discard mode under sampling is approximate (not lossless).")
                if method == "smc" and not run.error:
                    notes.append(measured.smc_column_note(session.pair.describe(), session.settings, session.logliks,
                                                           proposal_kl=session.proposal_kl))
                out[columns[method]] = column_views.column_html(method, run.events, run.result, run.error,
                                                          running=running and not run.done,
                                                          note=" ".join(notes) or None, pending=method in pending)
            return out

        def render_plots(session: RunSession) -> dict:
            runs = session.runs
            pacer_events = runs["pacer"].events if "pacer" in runs else []
            fixed_events = runs["fixed"].events if "fixed" in runs else []
            smc_events = runs["smc"].events if "smc" in runs else []
            return {
                plot_lengths: plots.draft_length_figure(
                    fixed_events, pacer_events, session.oracle, session.oracle_steps,
                    "oracle γ*" if session.oracle_greedy else "oracle E[γ*] (sampling)"),
                plot_accept: plots.acceptance_figure({"fixed": fixed_events, "pacer": pacer_events}),
                plot_blocks: plots.block_scores_figure(pacer_events),
                plot_weights: plots.smc_weights_figure(smc_events),
                plot_ess: plots.smc_ess_figure(smc_events),
                plot_genealogy: plots.smc_genealogy_figure(smc_events),
            }

        def render_table(session: RunSession):
            return tables.metrics_frame(session.results(), session.busy_seconds(), session.statuses(),
                                        session.logliks)

        def export_files(session: RunSession) -> dict:
            folder = Path(tempfile.mkdtemp(prefix="pacer-run-"))
            stamp = time.strftime("%Y%m%d-%H%M%S")
            trace_path = folder / f"pacer-trace-{stamp}.json"
            trace_path.write_text(json.dumps(session.trace(), indent=1, ensure_ascii=False), encoding="utf-8")
            csv_path = folder / f"pacer-metrics-{stamp}.csv"
            render_table(session).to_csv(csv_path, index=False)
            return {download_json: str(trace_path), download_csv: str(csv_path)}

        def latest_lines(session: RunSession) -> dict:
            """The narration of each method's most recent step (what the columns just did)."""
            lines = {}
            for method, run in session.runs.items():
                if run.error:
                    lines[method] = run.error
                elif run.events:
                    lines[method] = narrative.explain_step(run.events[-1])
            return lines

        def summary_lines(session: RunSession) -> dict:
            lines = {}
            for method, run in session.runs.items():
                if run.error:
                    lines[method] = run.error
                elif run.result is not None:
                    lines[method] = narrative.summarize_run(run.result, run.events)
            return lines

        def settings_failure(error: Exception, session) -> dict:
            message = user_message(error)
            gr.Warning(html.escape(message))      # the toast renders HTML: show any <...> as characters
            return {status: page.run_status_html(message, "error"), session_state: session}

        def finish_run(session: RunSession, want_ar: bool, started: float | None):
            """After the three columns: the AR baseline (if asked), the oracle, table and exports."""
            if want_ar and not session.cancel.is_set() and not (session.ar and session.ar.done):
                yield {status: page.run_status_html("Finishing the AR baseline (target alone)…", "busy"),
                       table: render_table(session)}
                for _ in session.ar_steps():
                    pass
            if not session.cancel.is_set():
                if session.settings["temperature"] > 0:
                    yield {status: page.run_status_html("Scoring each output under the target (log-likelihood "
                                                          "per token, for SMC-SD's error)…", "busy")}
                session.compute_oracle()
                session.compute_likelihoods()
            message = (f"Done in {time.perf_counter() - started:.1f} s." if started is not None
                       else "All methods finished (step-through).")
            if session.cancel.is_set():
                message = "Stopped."
            failed = {method: run.error for method, run in session.runs.items() if run.error}
            for method, error in failed.items():   # one column's failure must not read as a clean "Done"
                message += f" {METHOD_LABELS.get(method, method)} did not finish: {error}"
            if session.oracle_note:
                message += " " + session.oracle_note
            if session.prompt_note:
                message += " " + session.prompt_note
            update = {status: page.run_status_html(message, "error" if len(failed) == len(session.runs) else "done"), table: render_table(session),
                      session_state: session, narration: narrative.narration_html(summary_lines(session))}
            update.update(render_columns(session, running=False))
            update.update(render_plots(session))
            update.update(export_files(session))
            yield update

        def guarded(handler):
            """Any unexpected failure becomes one error line in the page (and a log entry), never a
            stack trace in the browser; the app keeps serving."""
            import functools

            @functools.wraps(handler)
            def wrapper(values: dict):
                try:
                    yield from handler(values)
                except Exception as error:  # noqa: BLE001
                    traceback.print_exc(file=sys.stderr)
                    message = f"Something went wrong: {user_message(error)}"
                    gr.Warning(html.escape(message))
                    yield {status: page.run_status_html(message, "error")}
            return wrapper

        @_gpu
        @guarded
        def run_all(values: dict):
            """Run all three methods interleaved, streaming each step to the page."""
            try:
                session = new_session(values)
            except (SettingsError, ModelLoadError) as error:
                yield settings_failure(error, values[session_state])
                return
            started = time.perf_counter()
            update = {session_state: session, narration: narrative.narration_html({}),
                      status: page.run_status_html("Running…", "busy"), table: render_table(session)}
            update.update(render_columns(session, running=True))
            yield update
            last_plot = 0.0
            while not session.finished:
                session.advance()
                update = render_columns(session, running=True)
                steps = max(len(run.events) for run in session.runs.values())
                update[status] = page.run_status_html(f"Running… step {steps}", "busy")
                if time.perf_counter() - last_plot > PLOT_INTERVAL_S:
                    update.update(render_plots(session))
                    update[narration] = narrative.narration_html(latest_lines(session))
                    last_plot = time.perf_counter()
                yield update
            yield from finish_run(session, bool(values[measure_ar]), started)

        @_gpu
        @guarded
        def step_once(values: dict):
            """Advance every method by one target forward pass and say what happened."""
            session = values[session_state]
            try:
                candidate_key = (values[prompt], tuple(sorted(read_settings(values).items())), bool(values[chat]))
                if session is None or session.finished or session.cancel.is_set() or session.key() != candidate_key:
                    session = new_session(values)
            except (SettingsError, ModelLoadError) as error:
                yield settings_failure(error, values[session_state])
                return
            # Two clicks per target pass: first what the draft proposed (grey), then the target's verdict.
            verify_phase = session.pending_verdict is not None
            if verify_phase:
                new_events, session.pending_verdict = session.pending_verdict, None
            else:
                new_events = session.advance_until_event()
                if any(event is not None for event in new_events.values()):
                    session.pending_verdict = new_events
            lines = {}
            for method, event in new_events.items():
                run = session.runs[method]
                if event is not None:
                    lines[method] = narrative.explain_step(event) if verify_phase else narrative.explain_draft(event)
                elif run.error:
                    lines[method] = run.error
                else:
                    lines[method] = "finished."
            pending = {m for m, event in (session.pending_verdict or {}).items() if event is not None}
            update = {session_state: session, narration: narrative.narration_html(lines)}
            update.update(render_columns(session, running=not session.finished, pending=pending))
            if not pending:                     # the plots would give the verdict away
                update.update(render_plots(session))
            if session.finished and not pending:
                yield from finish_run(session, bool(values[measure_ar]), None)
                return
            steps = max(len(run.events) for run in session.runs.values())
            phase = ("drafted; press Step for the target's verdict" if pending
                     else "verified; press Step for the next draft")
            update[status] = page.run_status_html(f"Step-through: step {steps} {phase}.", "info")
            update[table] = render_table(session)
            yield update

        def stop(session):
            if session is not None:
                session.stop()
            return page.run_status_html("Stopping after the current step…", "busy")

        run_button.click(run_all, inputs=inputs, outputs=outputs, concurrency_id="decode", api_name="run",
                         show_progress="minimal")
        prompt.submit(run_all, inputs=inputs, outputs=outputs, concurrency_id="decode", api_visibility="private",
                      show_progress="minimal")
        step_button.click(step_once, inputs=inputs, outputs=outputs, concurrency_id="decode", api_name="step",
                          show_progress="minimal")
        stop_button.click(stop, inputs=session_state, outputs=status, concurrency_limit=None, api_name="stop")
        # Pure display toggle, in the browser only: hide struck-through drafts to read the final text.
        show_rejected.change(None, inputs=show_rejected, js=(
            "(show) => { document.body.classList.toggle('pacer-hide-rejected', !show); return show; }"),
            api_visibility="private")
    return demo


def serve(demo: gr.Blocks, host: str = "127.0.0.1", port: int | None = None, concurrency: int | None = None,
          **launch_kwargs):
    """Queue with a concurrency limit and launch (what app.py calls)."""
    if concurrency is None:
        try:
            concurrency = max(1, int(os.environ.get("PACER_CONCURRENCY", "1")))
        except ValueError:
            concurrency = 1
    demo.queue(default_concurrency_limit=concurrency, max_size=int(os.environ.get("PACER_QUEUE_SIZE", "32")))
    options = launch_options() | {"server_name": host, "server_port": port} | launch_kwargs
    return demo.launch(**options)
