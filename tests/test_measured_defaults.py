"""The fixed draft length a draft folder records as measured fastest on a kind of device (the app's start value)."""
import json
from dataclasses import replace

from pacer_core.drafters import LoadedDrafters, measured_gamma
from pacer_core.drafters.feature_head import random_head_drafter
from pacer_core.testing.tiny import tiny_pair


def pair_from_folder(folder):
    """(the tiny pair reading ``folder``'s measured_defaults.json, its drafter)."""
    target, drafter = tiny_pair()
    return replace(target, measured_file=str(folder / "measured_defaults.json")), drafter


def gamma_in(folder):
    target, drafter = pair_from_folder(folder)
    return measured_gamma(target, drafter)


def test_measured_gamma_reads_the_draft_folder_for_this_device(tmp_path):
    (tmp_path / "measured_defaults.json").write_text(json.dumps({"gamma": {"cpu": 3, "cuda": 5}}))
    assert gamma_in(tmp_path) == 3


def test_measured_gamma_is_none_without_a_measurement_for_this_device(tmp_path):
    assert gamma_in(tmp_path) is None
    (tmp_path / "measured_defaults.json").write_text(json.dumps({"gamma": {"cuda": 5}}))
    assert gamma_in(tmp_path) is None
    (tmp_path / "measured_defaults.json").write_text("not json")
    assert gamma_in(tmp_path) is None
    (tmp_path / "measured_defaults.json").write_text(json.dumps({"gamma": {"cpu": 0}}))
    assert gamma_in(tmp_path) is None


def test_measured_gamma_is_only_for_the_independent_draft_it_was_measured_with(tmp_path):
    (tmp_path / "measured_defaults.json").write_text(json.dumps({"gamma": {"cpu": 3}}))
    target, _ = pair_from_folder(tmp_path)
    assert measured_gamma(target, random_head_drafter(target.model, target.vocab_size)) is None


def test_each_drafter_has_its_own_measured_length_cost_and_agreement(tmp_path):
    from pacer_core.drafters import load_drafter, measured_drafter
    (tmp_path / "measured_defaults.json").write_text(json.dumps({"gamma": {"cpu": 2}, "drafters": {
        "self-int8": {"gamma": {"cpu": 5}, "cost": {"cpu": 0.6}, "agreement": 0.96}}}))
    target, drafter = pair_from_folder(tmp_path)
    drafters = LoadedDrafters.around(drafter)
    assert measured_gamma(target, drafter) == 2 and measured_drafter(target, drafter, "small") == {"gamma": {"cpu": 2}}
    assert measured_gamma(target, load_drafter(target, drafters, "self-int8")) == 5
    assert measured_gamma(target, load_drafter(target, drafters, "self-int4")) is None
    assert measured_drafter(target, drafter, "self-int8")["agreement"] == 0.96


def test_a_drafters_measured_pacer_settings_start_its_bench_rows_and_its_page(tmp_path):
    from pacer_core.bench import row_requests
    from pacer_core.drafters import load_drafter
    from pacer_core.methods import parse_method
    from pacer_core.request import EncodedPrompt
    from pacer_core.settings import Limits
    from pacer_core.ui.drafter_menu import DrafterMenu
    from pacer_core.ui.page_types import AppContext
    from pacer_core.ui.layout import drafter_choice_view

    (tmp_path / "measured_defaults.json").write_text(json.dumps({"drafters": {
        "self-int8": {"gamma": {"cpu": 4}, "settings": {"pacer": {"block_size": 1, "phrase_len": 0}}}}}))
    target, drafter = pair_from_folder(tmp_path)
    drafters = LoadedDrafters.around(drafter)
    prompt = [EncodedPrompt((1, 2, 3))]

    def ran(method):
        spec = parse_method(method)
        drafting = load_drafter(target, drafters, spec.drafter) if spec.drafter else drafter
        return row_requests(target, drafting, spec, {"max_new_tokens": 8}, prompt, Limits(), None)[0].settings
    assert (ran("pacer@self-int8").block_size, ran("pacer@self-int8").phrase_len) == (1, 0)
    assert ran("pacer+phrase_len=4@self-int8").phrase_len == 4
    assert ran("pacer").phrase_len == 8
    context = AppContext(target, drafter, drafter_menu=DrafterMenu(target, drafters))
    shown = drafter_choice_view(context, "self-int8", None)
    assert (shown["gamma"], shown["block_size"], shown["phrase_len"]) == (4, 1, 0)
    assert drafter_choice_view(context, "small", None)["phrase_len"] == 8


def test_generate_and_a_plain_bench_row_start_where_the_page_starts_for_the_drafter(tmp_path):
    """A run that chooses nothing runs what the page runs by default: generate() and a bench row naming no drafter
    start from the measured settings of the drafter they draft with (here the pair's default, ``small``), and fixed
    SD from its measured length; a chosen value wins over them."""
    from pacer_core import generate
    from pacer_core.bench import row_requests
    from pacer_core.methods import parse_method
    from pacer_core.request import EncodedPrompt
    from pacer_core.settings import Limits

    (tmp_path / "measured_defaults.json").write_text(json.dumps({"gamma": {"cpu": 3}, "drafters": {"small": {
        "settings": {"pacer": {"block_size": 1, "max_draft_len": 24, "phrase_len": 0}}}}}))
    target, drafter = pair_from_folder(tmp_path)
    pacer = generate(target, drafter, "pacer", "t1 t2", max_new_tokens=4).settings
    assert (pacer["block_size"], pacer["max_draft_len"], pacer["phrase_len"]) == (1, 24, 0)
    assert generate(target, drafter, "pacer", "t1 t2", max_new_tokens=4, phrase_len=5).settings["phrase_len"] == 5
    assert generate(target, drafter, "fixed", "t1 t2", max_new_tokens=4).settings["gamma"] == 3
    assert generate(target, drafter, "fixed", "t1 t2", max_new_tokens=4, gamma=6).settings["gamma"] == 6
    [request] = row_requests(target, drafter, parse_method("pacer"), {"max_new_tokens": 4}, [EncodedPrompt((1, 2))],
                             Limits(), None)
    assert (request.settings.max_draft_len, request.settings.phrase_len) == (24, 0)
    plain_target, _ = tiny_pair()          # nothing measured: the fields' defaults, as before
    assert generate(plain_target, drafter, "pacer", "t1 t2", max_new_tokens=4).settings["phrase_len"] == 8


def test_the_pages_drafter_starts_follow_the_measured_pacer_and_smc_settings(tmp_path):
    import pytest
    pytest.importorskip("gradio")
    from pacer_core.drafters import load_drafter
    from pacer_core.preverifier import ConfidencePreVerifier
    from pacer_core.ui.starts import drafter_starts
    (tmp_path / "measured_defaults.json").write_text(json.dumps({"gamma": {"cpu": 2}, "drafters": {
        "self-int8": {"gamma": {"cpu": 10}, "settings": {
            "pacer": {"block_size": 4, "max_draft_len": 32, "threshold": 0.05, "phrase_len": 0},
            "smc": {"n_particles": 2, "draft_len": 4}}}}}))
    target, drafter = pair_from_folder(tmp_path)
    small = drafter_starts(target, drafter, ConfidencePreVerifier(), "small")
    assert small["gamma"] == 2 and small["own_threshold"] and small["threshold"] == 0.3
    self_int8 = load_drafter(target, LoadedDrafters.around(drafter), "self-int8")
    starts = drafter_starts(target, self_int8, ConfidencePreVerifier(), "self-int8")
    assert (starts["gamma"], starts["block_size"], starts["max_draft_len"], starts["phrase_len"]) == (10, 4, 32, 0)
    assert starts["threshold"] == 0.05 and not starts["own_threshold"]
    assert (starts["n_particles"], starts["draft_len"]) == (2, 4)


def test_figures_measured_beside_the_torch_target_apply_only_where_the_target_verifies_on_torch(tmp_path):
    from pacer_core.drafters import load_drafter, measured_drafter, measured_settings
    (tmp_path / "measured_defaults.json").write_text(json.dumps({"drafters": {
        "self-int8": {"gamma": {"cpu": 1}, "cost": {"cpu": 1.1}, "agreement": 0.96,
                      "settings": {"pacer": {"stop_rule": "cost"}, "smc": {"n_particles": 2}},
                      "cpu_torch_target": {"gamma": {"cpu": 3}, "cost": {"cpu": 0.6},
                                           "settings": {"pacer": {"block_size": 1}}}},
        "head": {"gamma": {"cpu": 2}, "cpu_torch_target": {"gamma": {"cpu": 5}}}}}))
    on_torch, drafter = pair_from_folder(tmp_path)
    self_int8 = load_drafter(on_torch, LoadedDrafters.around(drafter), "self-int8")
    assert measured_gamma(on_torch, self_int8) == 3 and measured_drafter(on_torch, self_int8, "self-int8")["cost"] == {"cpu": 0.6}
    assert measured_settings(on_torch, self_int8, "self-int8", "pacer") == {"block_size": 1}
    assert measured_settings(on_torch, self_int8, "self-int8", "smc") == {"n_particles": 2}
    assert "cpu_torch_target" not in measured_drafter(on_torch, self_int8, "self-int8")
    on_llama = replace(on_torch, engine=object())   # the target verifies on llama.cpp: the entry's own figures
    assert measured_gamma(on_llama, self_int8) == 1 and measured_drafter(on_llama, self_int8, "self-int8")["agreement"] == 0.96
    assert measured_settings(on_llama, self_int8, "self-int8", "pacer") == {"stop_rule": "cost"}
    head = random_head_drafter(on_torch.model, on_torch.vocab_size)   # reads hidden states: keeps the torch target
    assert measured_drafter(on_llama, head, "head")["gamma"] == {"cpu": 5}
    assert measured_drafter(on_llama, head, "self-int8")["gamma"] == {"cpu": 1}
