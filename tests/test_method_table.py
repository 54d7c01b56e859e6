"""The method table (pacer_core/method_table.py): its functions, and a toy decoder (conftest's ``toy_method``:
a class plus one row) found by every non-UI reader of the table without a change anywhere else: the method
grammar, the settings' validation, the trace reader, ``api``/``request``'s run path and the atlas."""
from __future__ import annotations

import json

import pytest

from pacer_core import SettingsError, generate, method_table
from pacer_core.api import make_decoder, run_request
from pacer_core.atlas.runner import AtlasPrompt, atlas_lane, run_prompts
from pacer_core.events import StepEvent
from pacer_core.methods import grammar_text, parse_method, takes_drafter
from pacer_core.request import encode_prompt, row_requests
from pacer_core.settings import FIELDS, Limits, validate_method
from pacer_core.testing.tiny import tiny_pair
from pacer_core.trace import TraceError, parse_trace, trace_header

PROMPT = "t1 t2 t3"


@pytest.fixture(scope="module")
def tiny():
    return tiny_pair()


# ---------------------------------------------------------------- the table's functions

def test_numbers_for_reads_each_number_with_its_converter():
    parse = method_table.numbers_for("block_size", "threshold", converters=(int, float))
    assert parse([]) == {}
    assert parse(["2"]) == {"block_size": 2}
    assert parse(["2", "0.4"]) == {"block_size": 2, "threshold": 0.4}


@pytest.mark.parametrize("numbers", [["1", "2", "3"], ["x"], ["1.5"]])
def test_numbers_for_refuses_too_many_or_malformed_numbers(numbers):
    with pytest.raises(ValueError):
        method_table.numbers_for("gamma")(numbers)


def test_numbers_for_holds_to_the_counts_it_requires():
    parse = method_table.numbers_for("n_particles", "draft_len", required=(2,))
    assert parse(["4", "8"]) == {"n_particles": 4, "draft_len": 8}
    for numbers in ([], ["4"]):
        with pytest.raises(ValueError, match=f"{len(numbers)} numbers"):
            parse(numbers)


def test_the_derived_lists_follow_the_rows_flags():
    keys = method_table.method_keys()
    assert keys[0] == "ar" and len(set(keys)) == len(keys)
    assert set(method_table.column_keys()) == {row.key for row in method_table.rows() if row.column}
    stepping = [row.key for row in method_table.rows() if row.steps]
    assert [key for key in keys if method_table.steps_by_pass(key)] == stepping
    assert set(method_table.drafting_keys()) <= set(keys) and set(method_table.exact_keys()) <= set(keys)
    assert all(method_table.label_of(key) == method_table.entry(key).label for key in keys)


def test_unknown_keys_fall_back_or_are_refused_by_name():
    assert method_table.find("beam") is None
    assert method_table.label_of("beam") == "beam" and method_table.short_label_of("beam") == "beam"
    assert method_table.colour_of("beam", "#123456") == "#123456"
    with pytest.raises(KeyError, match="no method 'beam'; known: ar, fixed"):
        method_table.entry("beam")


def test_registered_adds_a_row_for_the_block_and_restores_the_table(toy_method):
    before = method_table.rows()
    assert before[-1] is toy_method and method_table.entry("toy") is toy_method
    with pytest.raises(ValueError, match="already in the table"):
        with method_table.registered(toy_method):
            pass
    spare = method_table.MethodEntry("spare", "Spare", "spare", "#999999", toy_method.build, "spare",
                                     method_table.numbers_for())
    with pytest.raises(RuntimeError):
        with method_table.registered(spare):
            assert "spare" in method_table.method_keys()
            raise RuntimeError("a failing test body")
    assert method_table.rows() == before


def test_without_the_fixture_no_reader_knows_the_toy():
    assert "toy" not in method_table.method_keys()
    with pytest.raises(SettingsError, match="Unknown benchmark method 'toy'"):
        parse_method("toy")
    with pytest.raises(SettingsError, match="Unknown method 'toy'"):
        validate_method("toy")
    with pytest.raises(SettingsError, match="Unknown method 'toy'"):
        make_decoder("toy")


# ---------------------------------------------------------------- the toy decoder, found everywhere

def test_the_grammar_parses_the_toy_with_its_numbers(toy_method):
    assert parse_method("toy").kind == "toy" and parse_method("toy").overrides == {}
    spec = parse_method("toy:5+seed=3@small")
    assert (spec.kind, spec.overrides, spec.drafter) == ("toy", {"max_new_tokens": 5, "seed": 3}, "small")
    assert "toy[:N]" in grammar_text() and takes_drafter("toy")
    with pytest.raises(SettingsError, match=r"Use ar, .*toy\[:N\]"):
        parse_method("toy:5:6")


def test_the_settings_accept_the_toy_and_give_it_every_shared_setting(toy_method):
    assert validate_method(" Toy ") == "toy"
    shared = [field.name for field in FIELDS if field.used_by("toy")]
    assert "max_new_tokens" in shared and "temperature" in shared and "gamma" not in shared
    gamma = next(field for field in FIELDS if field.name == "gamma")
    assert gamma.used_by("fixed") and not gamma.used_by("toy")


def test_the_toy_runs_through_api_as_the_table_builds_it(toy_method, target, drafter):
    assert type(make_decoder("toy")).__name__ == "ToyDecoder"
    toy = generate(target, drafter, "toy", PROMPT, max_new_tokens=6)
    ar = generate(target, drafter, "ar", PROMPT, max_new_tokens=6)
    assert toy.method == "toy" and toy.token_ids == ar.token_ids and len(toy.token_ids) == 6
    assert all(isinstance(event, StepEvent) and event.method == "toy" for event in toy.events)


def test_the_toy_runs_through_the_bench_s_request_path_with_its_numbers(toy_method, target, drafter):
    limits = Limits()
    encoded = [encode_prompt(target, PROMPT, None, limits)]
    [request] = row_requests(target, drafter, parse_method("toy:5"), {}, encoded, limits, None)
    assert request.method == "toy" and request.settings.max_new_tokens == 5
    *events, result = run_request(target, request)
    assert len(result.token_ids) == 5 and len(events) == 5


def test_a_trace_of_the_toy_reads_back_as_step_events(toy_method, target, drafter):
    result = generate(target, drafter, "toy", PROMPT, max_new_tokens=4, temperature=0.8, seed=2)
    settings = {name: value for name, value in result.settings.items() if value is not None}
    trace = trace_header() | {"prompt": PROMPT, "settings": settings, "pair": target.describe(drafter),
                              "results": {"toy": result.to_dict()}, "busy_seconds": {"toy": 0.5}}
    recorded = parse_trace(json.dumps(trace))
    assert recorded.results["toy"].to_dict() == trace["results"]["toy"]
    assert all(isinstance(event, StepEvent) for event in recorded.results["toy"].events)
    assert recorded.busy_seconds == {"toy": 0.5}
    trace["results"]["beam"] = trace["results"]["toy"]
    with pytest.raises(TraceError, match="beam"):
        parse_trace(json.dumps(trace))


def test_the_atlas_judges_the_toy(toy_method, target, drafter):
    assert "toy" in method_table.drafting_keys()
    prompts = [AtlasPrompt("t1 t2", "chat", "p1"), AtlasPrompt("t3 t4", "code", "p2")]
    lane = atlas_lane(target, drafter, None, "small", "toy:4", {}, prompts, Limits())
    runs = list(run_prompts(prompts, [lane]))
    assert [run.index for run in runs] == [0, 1]
    assert all(run.records["small"].tokens == 4 and run.records["small"].drafted == 0 for run in runs)
