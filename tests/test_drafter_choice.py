"""The page's drafter choice through the handlers: every drafter the target offers is listed, built once on
first use and kept; the three columns, the table, the speedup plot, the narration and the trace follow the
choice; the loaded pair itself never changes."""
import pytest

from pacer_core.drafters import LoadedDrafters
from pacer_core.testing.tiny import tiny_pair
from pacer_core.ui import handlers
from pacer_core.ui.drafter_menu import DrafterMenu, describe_option, drafter_key
from pacer_core.ui.page_types import AppContext, PageInputs

SETTINGS = {"max_new_tokens": 10, "temperature": 0.7, "seed": 3, "n_particles": 2, "draft_len": 2}


@pytest.fixture()
def context():
    target, drafter = tiny_pair()
    return AppContext(target, drafter, drafter_menu=DrafterMenu(target, LoadedDrafters.around(drafter)))


def finished(context, drafter, prompt="t1 t2 t3"):
    updates = list(handlers.run(context, PageInputs(prompt, dict(SETTINGS), drafter=drafter)))
    return updates[-1]


def test_the_menu_lists_every_drafter_and_builds_each_once(context):
    menu = context.drafter_menu
    assert menu.keys == ["small", "self-int8", "self-int4"] and menu.default_key == "small"
    assert not menu.built("self-int4")
    drafter = menu.drafter("self-int4")
    assert menu.drafter("self-int4") is drafter and menu.built("self-int4")
    assert drafter.kind == "self-quantized" and menu.target is context.target
    assert context.drafter.kind == "independent"
    assert all(option.description.startswith(option.key) for option in menu.options())


@pytest.mark.parametrize("key", ["self-int8", "self-int4"])
def test_every_view_of_the_run_names_the_chosen_drafter(context, key):
    last = finished(context, key)
    session = last.session
    assert session.drafter.kind == "self-quantized" and session.drafter.name == key
    assert session.target is context.target
    assert set(last.table.loc[last.table["method"] != "Autoregressive (AR)", "drafter"]) == {key}
    assert key in last.plots["speedup"].layout.title.text
    assert key in last.narration
    assert session.trace()["pair"]["drafter"]["name"] == key
    assert all(run.result is not None for run in session.runs.values())


def test_the_pairs_own_drafter_is_the_default(context):
    last = finished(context, None)
    assert last.session.target is context.target and last.session.drafter is context.drafter
    assert set(last.table.loc[last.table["method"] != "Autoregressive (AR)", "drafter"]) == {"small"}


def test_an_unknown_drafter_is_a_message_not_an_exception(context):
    last = finished(context, "giant")
    assert last.session is None and "Unknown drafter 'giant'" in last.warning


def test_step_through_restarts_when_the_drafter_changes(context):
    inputs = PageInputs("t1 t2", dict(SETTINGS), drafter="self-int8")
    first = list(handlers.step(context, inputs, None))[-1].session
    again = list(handlers.step(context, inputs, first))[-1].session
    assert again is first
    switched = list(handlers.step(context, PageInputs("t1 t2", dict(SETTINGS), drafter="small"), first))[-1].session
    assert switched is not first and switched.target is context.target


@pytest.mark.pure
def test_a_description_says_cost_and_agreement_when_measured():
    line = describe_option("self-int8", "129 MB of int8 weights", {"cost": {"cpu": 0.55}, "agreement": 0.97}, "cpu")
    assert line == ("self-int8 · the target's own weights in 8 bits · 129 MB of int8 weights · "
                    "c = 0.55 of a target step on cpu · agreement 0.97")
    assert "cost not measured here" in describe_option("small", "16M parameters", {}, "cuda")
    in_runs = {"cost": {"cpu": 0.33}, "pacer_costs": {"cpu": {"draft_per_token": 0.57, "by_prompt_length": [
        {"prompt_tokens": 40, "draft_per_token": 0.57}, {"prompt_tokens": 343, "draft_per_token": 0.61},
        {"prompt_tokens": 563, "draft_per_token": 0.58}]}}}
    assert "c = 0.57–0.61 of an AR step in a run on cpu (prompts of 40–563 tokens)" in \
        describe_option("gguf", "94 MB file", in_runs, "cpu")


def test_drafter_keys_of_each_kind():
    target, drafter = tiny_pair()
    assert drafter_key(drafter) == "small"
    assert drafter_key(DrafterMenu(target, LoadedDrafters.around(drafter)).drafter("self-int4")) == "self-int4"
