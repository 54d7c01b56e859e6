"""One run request from every front door: the same inputs resolve to the same settings through
the bench CLI, generate() and the UI; bad values give one clear message at each door; the limits given to
build_ui are the ones validation applies; the app's controls take their ranges from settings.FIELDS."""
from __future__ import annotations

import dataclasses
import math

import pytest

from pacer_core import method_table
from pacer_core import SettingsError, build_request, generate
from pacer_core.bench import build_parser, cli_settings, main, row_requests
from pacer_core.methods import parse_method
from pacer_core.preverifier import ConfidencePreVerifier
from pacer_core.request import encode_prompt
from pacer_core.settings import FIELDS, DecodeSettings, Limits
from pacer_core.testing.tiny import tiny_pair
from pacer_core.ui import handlers
from pacer_core.ui.page_types import AppContext, PageInputs

PROMPT = "t1 t2 t3"


class ShippedPreVerifier(ConfidencePreVerifier):
    """Stands in for a trained layer: it ships the block size and threshold it was tuned with."""
    kind = "trained"
    config = {"block_size": 1}

    def threshold_for(self, temperature: float) -> float:
        return 0.7 if temperature == 0 else 0.6


@pytest.fixture(scope="module")
def tiny():
    """(the tiny pair, its drafter), shared by the module's tests."""
    return tiny_pair(scale=4.0)


def ui_defaults(preverifier) -> dict:
    """What the app's controls send when nobody touches them (layout.settings_panel)."""
    shown = ("temperature", "seed", "max_new_tokens", "top_k", "top_p", "gamma", "block_size", "max_draft_len",
             "threshold", "on_fail", "n_particles", "draft_len", "ess_threshold")
    values = {field.name: field.default if field.app_value is None else field.app_value
              for field in FIELDS if field.name in shown}
    block_size = getattr(preverifier, "config", {}).get("block_size")
    return values | ({"block_size": block_size} if block_size else {}) | {"threshold": None}


def bench_settings(target, drafter, preverifier, argv: list[str], method="pacer") -> DecodeSettings:
    args = build_parser().parse_args(argv)
    limits = Limits.from_env()
    prompts = [encode_prompt(target, PROMPT, None, limits)]
    requests = row_requests(target, drafter, parse_method(method), cli_settings(args), prompts, limits, preverifier)
    return requests[0].settings


def ui_settings(target, drafter, preverifier, method="pacer", **chosen) -> DecodeSettings:
    context = AppContext(target, drafter, preverifier, getattr(preverifier, "kind", "heuristic"))
    inputs = PageInputs(PROMPT, ui_defaults(preverifier) | chosen, chat=False, measure_ar=False)
    return handlers.new_session(context, inputs).runs[method].request.settings


@pytest.mark.parametrize("preverifier, block_size, threshold", [(ShippedPreVerifier(), 1, 0.7),
                                                                (ConfidencePreVerifier(), 3, 0.3)])
def test_bench_generate_and_ui_resolve_pacer_identically(target, drafter, preverifier, block_size, threshold):
    chosen = {"max_new_tokens": 12, "temperature": 0.0, "seed": 5}
    bench = bench_settings(target, drafter, preverifier,
                           ["--max-new-tokens", "12", "--temperature", "0", "--seed", "5"])
    library = DecodeSettings(**generate(target, drafter, "pacer", PROMPT, preverifier=preverifier, **chosen).settings)
    ui = ui_settings(target, drafter, preverifier, **chosen)
    assert bench == library == ui
    assert (bench.block_size, bench.threshold) == (block_size, threshold)


def test_chosen_values_win_over_the_pre_verifiers_defaults_everywhere(target, drafter):
    preverifier = ShippedPreVerifier()
    chosen = {"max_new_tokens": 10, "temperature": 0.8, "seed": 1, "block_size": 2, "threshold": 0.4}
    bench = bench_settings(target, drafter, preverifier, ["--max-new-tokens", "10", "--temperature", "0.8", "--seed", "1",
                                               "--setting", "block_size=2", "--setting", "threshold=0.4"])
    library = DecodeSettings(**generate(target, drafter, "pacer", PROMPT, preverifier=preverifier, **chosen).settings)
    assert bench == library == ui_settings(target, drafter, preverifier, **chosen)
    assert (bench.block_size, bench.threshold) == (2, 0.4)
    assert bench_settings(target, drafter, preverifier, ["--temperature", "0.8"], method="pacer:2:8:0.4").threshold == 0.4


@pytest.mark.parametrize("method, bench_method", [("fixed", "fixed:4"), ("smc", "smc:4:4")])
def test_other_methods_resolve_identically(target, drafter, method, bench_method):
    chosen = {"max_new_tokens": 8, "temperature": 0.9, "seed": 2}
    bench = bench_settings(target, drafter, None, ["--max-new-tokens", "8", "--temperature", "0.9", "--seed", "2"],
                           bench_method)
    library = DecodeSettings(**generate(target, drafter, method, PROMPT, **chosen).settings)
    assert bench == library == ui_settings(target, drafter, None, method, **chosen)


def test_request_is_frozen_and_knows_what_was_chosen(target, drafter):
    request = build_request(target, drafter, "pacer", PROMPT, {"gamma": 3, "threshold": None},
                            preverifier=ShippedPreVerifier())
    assert request.explicit == {"gamma"} and "block_size" in request.defaulted
    assert request.prompt_ids == tuple(target.encode_prompt(PROMPT)) and request.prompt_note is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.method = "ar"


def test_table_defines_the_settings_dataclass():
    assert [field.name for field in FIELDS] == [field.name for field in dataclasses.fields(DecodeSettings)]
    assert {field.name: field.default for field in FIELDS} == DecodeSettings().to_dict()
    for field in FIELDS:
        assert field.label and field.help and set(field.methods) <= set(method_table.method_keys())
        if field.kind != "choice" and field.cap is None:
            assert field.low <= field.high and field.step > 0


@pytest.mark.parametrize("bad", [{"gamma": 0}, {"block_size": 17}, {"max_draft_len": 65}, {"draft_len": 33},
                                 {"temperature": 1e-40}])
def test_bad_values_are_one_clear_message_at_every_front_door(target, drafter, bad, capsys):
    with pytest.raises(SettingsError) as library_error:
        generate(target, drafter, "fixed", PROMPT, **bad)
    message = str(library_error.value)
    assert message and "Traceback" not in message
    (name, value), = bad.items()
    assert main(["--methods", "ar", "--setting", f"{name}={value}", "--prompts", "missing.jsonl"]) == 2
    error = capsys.readouterr().err
    assert error.strip() == f"error: {message}"
    updates = list(handlers.run(AppContext(target, drafter), PageInputs(PROMPT, {"max_new_tokens": 4} | bad)))
    assert len(updates) == 1 and updates[0].warning == message


def test_limits_given_to_the_context_reach_validation(target, drafter):
    context = AppContext(target, drafter, limits=Limits(max_new_tokens=8, max_particles=2))
    update, = handlers.run(context, PageInputs(PROMPT, {"max_new_tokens": 9}))
    assert "between 1 and 8" in update.warning
    update, = handlers.run(context, PageInputs(PROMPT, {"n_particles": 3, "temperature": 0.7}))
    assert "Particles" in update.warning


def test_build_ui_limits_reach_validation_and_its_sliders_follow_the_table(target, drafter):
    gr = pytest.importorskip("gradio")
    from pacer_core.drafters import LoadedDrafters
    from pacer_core.ui.layout import build_ui

    limits = Limits(max_new_tokens=8, max_particles=3)
    demo = build_ui(target, LoadedDrafters.around(drafter), limits=limits)
    sliders = {block.label: block for block in demo.blocks.values() if isinstance(block, gr.Slider)
               and not str(block.elem_id or "").startswith("atlas-")}     # the Live demo's, not the Atlas tab's
    for field in FIELDS:
        if field.label in sliders:
            slider = sliders[field.label]
            assert (slider.minimum, slider.maximum) == (field.low, field.high_for(limits)), field.name
            assert math.isclose(slider.step, field.step), field.name
    assert {"Draft length γ", "Block size", "Max draft length", "Draft length K", "Particles N"} <= set(sliders)
    run = next(fn for fn in demo.fns.values() if fn.api_name == "run")
    values = {component: component.value for component in run.inputs}
    values[sliders["Max new tokens"]] = 9
    outputs = [output for output in run.fn(values)]
    statuses = [value for output in outputs for component, value in output.items()
                if getattr(component, "elem_id", None) == "run-status"]
    assert statuses and "between 1 and 8" in statuses[-1]
