"""The Gradio app served on 127.0.0.1 (free port) over a tiny in-process pair, driven through
gradio_client like any API user: a full run, step-through, bad settings, exports, app.py --help."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pacer_core.drafters import LoadedDrafters
from pacer_core.testing.tiny import tiny_pair
from pacer_core.ui import tables

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")     # offline CI: no telemetry calls


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def ui_server_url():
    """The explainer app on the tiny pair, served in this process on a free 127.0.0.1 port."""
    from pacer_core.ui.layout import build_ui, serve

    target, drafter = tiny_pair()
    demo = build_ui(target, LoadedDrafters.around(drafter))
    port = free_port()
    serve(demo, host="127.0.0.1", port=port, prevent_thread_lock=True, quiet=True)
    yield f"http://127.0.0.1:{port}/"
    demo.close()


@pytest.fixture(scope="module")
def client(ui_server_url):
    from gradio_client import Client

    return Client(ui_server_url, verbose=False)


class Api:
    """Call an endpoint with settings named by their UI labels; outputs come back keyed by label."""

    def __init__(self, client, endpoint):
        info = client.view_api(return_format="dict", print_info=False)["named_endpoints"][endpoint]
        self.client, self.endpoint = client, endpoint
        self.params = {p["label"]: p["parameter_name"] for p in info["parameters"]}
        self.returns = [r["label"] for r in info["returns"]]

    def __call__(self, **by_label):
        kwargs = {self.params[label]: value for label, value in by_label.items()}
        values = self.client.predict(api_name=self.endpoint, **kwargs)
        return dict(zip(self.returns, values))


@pytest.mark.server
def test_full_run_streams_three_columns_metrics_and_exports(client):
    run = Api(client, "/run")
    out = run(**{"Prompt": "t1 t2 t3", "Max new tokens": 8, "Temperature (0 = greedy)": 0.8, "Seed": 3})
    for label in ("Fixed-length SD", "PACER", "SMC-SD (approximate)"):
        assert 'data-state="' in out[label], label
        assert "badge-done" in out[label]
    assert "run-done" in out["Run status"]
    table = out[tables.LABEL]
    methods = [row[0] for row in table["data"]]
    assert methods == ["Autoregressive (AR)", "Fixed-length SD", "PACER", "SMC-SD (approximate)"]
    column = {header: index for index, header in enumerate(table["headers"])}
    assert all(row[column["new_tokens"]] == 8 for row in table["data"])
    assert all(row[column["target_loglik"]] < 0 for row in table["data"])
    assert [row[column["drafter"]] for row in table["data"]] == ["—", "small", "small", "small"]
    assert "This run: the target&#x27;s log-likelihood per token is" in out["SMC-SD (approximate)"]
    trace = json.loads(Path(out["⬇ JSON trace"]).read_text())
    assert set(trace["results"]) == {"ar", "fixed", "pacer", "smc"}
    assert trace["settings"]["max_new_tokens"] == 8 and trace["settings"]["seed"] == 3
    assert trace["results"]["pacer"]["events"][0]["tokens"]
    csv = Path(out["⬇ CSV metrics"]).read_text()
    assert csv.startswith("method,drafter,tau,alpha,target_calls,draft_calls")
    assert json.loads(out["Draft length per step"]["plot"])["data"]


@pytest.mark.server
def test_greedy_run_reports_smc_needs_sampling_and_keeps_serving(client):
    run = Api(client, "/run")
    out = run(**{"Prompt": "t4 t5", "Max new tokens": 4, "Temperature (0 = greedy)": 0.0,
                 "Measure the AR baseline too": False})
    assert "pacer-error" in out["SMC-SD (approximate)"] and "temperature" in out["SMC-SD (approximate)"]
    assert 'data-state="' in out["PACER"]
    assert "SMC-SD (approximate) did not finish" in out["Run status"]   # not a bare "Done"
    assert "Traceback" not in json.dumps(out, default=str)


@pytest.mark.server
@pytest.mark.parametrize("bad, message", [
    ({"Prompt": "   "}, "Please type a prompt"),
    ({"Prompt": "t1", "Top-k (0 = off)": -3}, "Top-k"),
    ({"Prompt": "t1", "Seed": -1}, "Seed"),
])
def test_bad_settings_show_a_message_not_a_stack_trace(client, bad, message):
    out = Api(client, "/run")(**bad)
    assert message in out["Run status"] and "run-error" in out["Run status"]
    assert "Traceback" not in out["Run status"]
    out = Api(client, "/run")(**{"Prompt": "t1 t2", "Max new tokens": 2, "Measure the AR baseline too": False})
    assert "run-done" in out["Run status"]


@pytest.mark.server
def test_step_through_shows_the_draft_then_the_verdict(ui_server_url):
    from gradio_client import Client

    own = Client(ui_server_url, verbose=False)       # its own session: step state is per session
    step = Api(own, "/step")
    settings = {"Prompt": "t7 t8", "Max new tokens": 6, "Temperature (0 = greedy)": 0.8,
                "Measure the AR baseline too": False}
    drafted = step(**settings)
    assert "Step 1: the draft proposed" in drafted["Step-through narration"]
    assert "Cycle 1" in drafted["Step-through narration"]
    assert drafted["PACER"].count('class="step"') == 1
    assert 'data-state="drafted"' in drafted["PACER"] and 'data-state="accepted"' not in drafted["PACER"]
    verdict = step(**settings)
    assert "Step 1" in verdict["Step-through narration"] and "The target" in verdict["Step-through narration"]
    assert 'data-state="drafted"' not in verdict["PACER"] and verdict["PACER"].count('class="step"') == 1
    following = step(**settings)
    assert "Step 2" in following["Step-through narration"] or "badge-done" in following["PACER"]


@pytest.mark.server
def test_app_help_lists_the_flags():
    completed = subprocess.run([sys.executable, str(ROOT / "app.py"), "--help"], capture_output=True, text=True,
                               timeout=60, cwd=ROOT)
    assert completed.returncode == 0
    for flag in ("--target", "--draft", "--device", "--dtype", "--host", "--port"):
        assert flag in completed.stdout


@pytest.mark.server
def test_app_reports_a_missing_model_in_one_line(tmp_path):
    missing = tmp_path / "no-such-model"
    completed = subprocess.run([sys.executable, str(ROOT / "app.py"), "--target", str(missing), "--draft",
                                str(missing), "--port", str(free_port())], capture_output=True, text=True,
                               timeout=120, cwd=ROOT)
    assert completed.returncode == 2
    assert "does not exist" in completed.stderr and "Traceback" not in completed.stderr


def test_sessions_advance_interleaved_and_independently():
    from pacer_core.ui.session import RunSession

    target, drafter = tiny_pair()
    first = RunSession(target, drafter, "t1 t2", {"max_new_tokens": 6, "temperature": 0.8, "seed": 1})
    second = RunSession(target, drafter, "t3 t4", {"max_new_tokens": 6, "temperature": 0.8, "seed": 2})
    assert first.advance() == ["fixed", "pacer", "smc"]
    assert [len(run.events) for run in first.runs.values()] == [1, 1, 1]
    assert all(not run.events for run in second.runs.values())
    while not first.finished:
        first.advance()
    assert all(run.result is not None and run.generator is None for run in first.runs.values())
    assert first.busy_seconds()["fixed"] > 0 and second.busy_seconds()["fixed"] == 0


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_oracle_gives_one_length_per_pacer_step(temperature):
    """γ* is the accepted length of a forced long draft: under greedy decoding PACER drafted a prefix of
    that same draft, so it can never have accepted more than γ* at any step."""
    from pacer_core.ui.session import RunSession

    target, drafter = tiny_pair()
    session = RunSession(target, drafter, "t1 t2", {"max_new_tokens": 8, "temperature": temperature})
    while not session.finished:
        session.advance()
    session.compute_oracle()
    steps = session.runs["pacer"].events
    assert session.oracle_note is None and len(session.oracle) == len(steps)
    assert session.oracle_steps == [event.step + 1 for event in steps]
    assert all(0 <= value <= 16 for value in session.oracle)
    if temperature == 0:
        assert all(oracle >= event.n_accepted for oracle, event in zip(session.oracle, steps))


@pytest.mark.server
def test_unexpected_failure_becomes_one_error_line(monkeypatch, client):
    from pacer_core.ui import narration

    def broken(*args, **kwargs):
        raise RuntimeError("renderer exploded <b>")

    monkeypatch.setattr(narration, "explain_step", broken)
    monkeypatch.setattr(narration, "explain_draft", broken)
    out = Api(client, "/step")(**{"Prompt": "t1 t2", "Max new tokens": 3, "Temperature (0 = greedy)": 0.8})
    assert "run-error" in out["Run status"] and "renderer exploded &lt;b&gt;" in out["Run status"]
    monkeypatch.undo()
    out = Api(client, "/run")(**{"Prompt": "t1 t2", "Max new tokens": 2, "Measure the AR baseline too": False})
    assert "run-done" in out["Run status"]


@pytest.mark.server
@pytest.mark.embedded
def test_app_py_serves_the_pair_from_the_environment(tmp_path):
    """python app.py (embedded pair, or PACER_TARGET / PACER_DRAFT) answers a gradio_client run."""
    from gradio_client import Client

    from app_process import embedded_pair_missing, running_app

    reason = embedded_pair_missing()
    if reason:
        pytest.skip(reason)
    with running_app(tmp_path / "app.log") as url:
        run = Api(Client(url, verbose=False), "/run")
        out = run(**{"Prompt": "Count from 1 to 5.", "Max new tokens": 4, "Temperature (0 = greedy)": 0.7,
                     "Measure the AR baseline too": False})
    assert "run-done" in out["Run status"]
    for label in ("Fixed-length SD", "PACER", "SMC-SD (approximate)"):
        assert 'data-state="' in out[label] and "pacer-error" not in out[label], out[label][-500:]


def test_ar_baseline_runs_interleaved_with_the_columns():
    from pacer_core.ui.session import RunSession

    target, drafter = tiny_pair()
    session = RunSession(target, drafter, "t1 t2", {"max_new_tokens": 6, "temperature": 0.0}, measure_ar=True)
    assert "greedy" in session.runs["smc"].error.lower()      # refused before it starts: nothing to advance
    assert session.advance() == ["fixed", "pacer", "ar"]
    assert len(session.ar.events) == 1
    while not session.finished:
        session.advance()
    for _ in session.ar_steps():
        pass
    assert session.ar.result.metrics.new_tokens == 6
    assert set(session.results()) == {"ar", "fixed", "pacer"}       # smc: greedy is refused


def test_sampling_runs_score_every_output_under_the_target_and_greedy_runs_do_not():
    from pacer_core.analysis import proposal_divergence, target_log_likelihood
    from pacer_core.ui.session import RunSession

    target, drafter = tiny_pair()
    for temperature, scored in ((0.8, {"fixed", "pacer", "smc"}), (0.0, set())):
        session = RunSession(target, drafter, "t1 t2", {"max_new_tokens": 5, "temperature": temperature})
        while not session.finished:
            session.advance()
        session.compute_likelihoods()
        assert set(session.logliks) == scored
        for method in scored:
            total, count = target_log_likelihood(target, drafter, session.prompt_ids, session.results()[method].token_ids)
            assert session.logliks[method] == pytest.approx(total / count, rel=1e-4)   # the prompt fed once
        if temperature > 0:
            total, count = proposal_divergence(target, drafter, session.prompt_ids, session.results()["smc"].token_ids, temperature)
            assert session.proposal_kl == pytest.approx(total / count, rel=1e-4) and total > 0
        else:
            assert session.proposal_kl is None
