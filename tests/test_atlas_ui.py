"""The Atlas tab on a tiny pair: its handler (progress, stop keeps finished prompts, files), the way back
to the Live demo, the renderers (both drafters shown, untrusted text kept plain), and the tab in the page."""
import json
import os

import pytest

from pacer_core.drafters import LoadedDrafters
from pacer_core.testing.tiny import tiny_pair
from pacer_core.ui import atlas_session, atlas_view
from pacer_core.ui.atlas_session import AtlasChoice
from pacer_core.ui.drafter_menu import DrafterMenu
from pacer_core.ui.page_types import AppContext
from pacer_core.settings import Limits

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


@pytest.fixture(scope="module")
def context():
    target, drafter = tiny_pair(scale=40)
    return AppContext(target, drafter, None, "heuristic", Limits(), DrafterMenu(target, LoadedDrafters.around(drafter)))


@pytest.fixture(scope="module")
def prompt_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("atlas") / "prompts.jsonl"
    lines = [{"prompt": f"t{i} t{i + 2} t{i * 5 % 64}", "category": ("chat", "code")[i % 2]} for i in range(1, 5)]
    lines.append({"prompt": "t9 t8 <script>alert(1)</script>"})            # no category
    path.write_text("\n".join(json.dumps(line) for line in lines))
    return str(path)


@pytest.fixture(scope="module")
def finished(context, prompt_file):
    """The updates of one whole run comparing the pair's drafter with its own int8 weights."""
    choice = AtlasChoice("fixed:3", "small", "self-int8", 0.0, 0, 12, True, prompt_file)
    return list(atlas_session.run(context, choice, render_interval_s=0.0))


def test_run_shows_progress_and_ends_with_the_atlas_and_its_files(finished):
    assert "0 of 5" not in finished[0].status and 'max="5"' in finished[0].status
    assert sum(1 for update in finished if update.status and "prompts decoded" in update.status) == 5
    last = finished[-1]
    assert "Done: 5 prompts" in last.status and last.session.atlas is last.atlas
    assert [os.path.basename(path) for path in last.files] == ["atlas.json", "atlas.csv", "report.md"]
    saved = json.loads(open(last.files[0], encoding="utf-8").read())
    assert saved["prompts"] == 5 and saved["compare"]["drafter"] == "self-int8" and saved["speedup"] > 0
    assert {row["category"] for row in saved["by_category"]} <= {"chat", "code", "uncategorised"}


def test_stop_keeps_the_finished_prompts(context, prompt_file):
    updates = atlas_session.run(context, AtlasChoice("pacer", None, None, 0.0, 0, 12, False, prompt_file))
    first = next(updates)
    next(updates)                                   # one prompt decoded
    atlas_session.stop(first.session)
    last = list(updates)[-1]
    assert "Stopped: 1 of 5 prompts kept" in last.status and last.atlas["prompts"] == 1


def test_bad_choices_are_one_line_errors(context, prompt_file, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    for choice in (AtlasChoice("smc:4:4", prompts_path=prompt_file), AtlasChoice(prompts_path=str(bad)),
                   AtlasChoice(drafter="nonesuch", prompts_path=prompt_file)):
        updates = list(atlas_session.run(context, choice))
        assert len(updates) == 1 and updates[0].warning and "run-error" in updates[0].status


def test_a_row_leads_back_to_the_live_demo(finished):
    session = finished[-1].session
    values = atlas_session.live_values(session, 5, offered_drafters=("small",))
    assert values == {"prompt": "t9 t8 <script>alert(1)</script>", "temperature": 0.0, "seed": 0,
                      "max_new_tokens": 12, "drafter": "small"}
    assert "drafter" not in atlas_session.live_values(session, 1, offered_drafters=())
    assert atlas_session.live_values(session, 6) is None and atlas_session.live_values(None, 1) is None
    assert atlas_session.live_values(session, "x") is None


def test_renderers_show_both_drafters(finished):
    atlas = finished[-1].atlas
    for figure in (atlas_view.position_figure, atlas_view.kind_figure, atlas_view.category_figure,
                   atlas_view.calibration_figure, atlas_view.prompts_figure):
        names = {trace.name for trace in figure(atlas).data}
        assert {"small", "self-int8"} <= names, figure.__name__
    frames = [atlas_view.prompts_frame(atlas), atlas_view.rejected_tokens_frame(atlas),
              atlas_view.confidently_wrong_frame(atlas), atlas_view.disagreements_frame(atlas)]
    assert all(frame.columns[0] == atlas_view.PROMPT_COLUMN for frame in frames)
    assert list(frames[0][atlas_view.PROMPT_COLUMN]) == [1, 2, 3, 4, 5]
    assert "alpha (self-int8)" in frames[0].columns
    assert "small" in atlas_view.summary_html(atlas) and "self-int8" in atlas_view.summary_html(atlas)


def test_renderers_before_any_run():
    assert atlas_view.position_figure(None).layout.annotations
    assert atlas_view.prompts_frame(None).empty and atlas_view.disagreements_frame(None).empty
    assert "No atlas yet" in atlas_view.summary_html(None)


def test_untrusted_text_stays_plain():
    hostile = "<img src=x onerror=alert(1)>"
    row = {"index": 0, "category": hostile, "prompt": hostile, "tau": 1.0, "alpha": 0.5, "tokens": 1, "seconds": 1.0,
           "speedup": None}
    atlas = {"method": "pacer", "drafter": hostile, "prompts": 1, "prompt_total": 1, "alpha": 0.5, "accepted": 1,
             "drafted": 2, "tau": 1.0, "speedup": None, "per_prompt": [row],
             "by_category": [{"category": hostile, "drafted": 2, "accepted": 1, "alpha": 0.5}]}
    assert "<img" not in atlas_view.summary_html(atlas)
    assert "<img" not in atlas_view.category_figure(atlas).data[0].hovertext[0]
    assert "<img" not in atlas_view.prompts_figure(atlas).data[0].hovertext[0]
    assert atlas_view.token_text(" a\nb") == "␣a↵b"
    assert "<img" not in atlas_view.progress_html(0, 1, hostile)


def test_the_page_has_the_atlas_tab():
    from pacer_core.ui.layout import build_ui

    target, drafter = tiny_pair()
    demo = build_ui(target, LoadedDrafters.around(drafter))
    config = demo.get_config_file()
    tabs = [c["props"].get("id") for c in config["components"] if c.get("type") == "tabitem"]
    assert "atlas" in tabs and "live" in tabs
    api_names = {dependency.get("api_name") for dependency in config["dependencies"]}
    assert {"atlas", "atlas_stop"} <= api_names


def test_an_unexpected_failure_is_an_error_line():
    def failing():
        yield atlas_session.AtlasUpdate(status="ok")
        raise RuntimeError("boom")

    updates = list(atlas_session.guarded(failing()))
    assert updates[-1].warning == "The atlas failed: RuntimeError: boom" and "run-error" in updates[-1].status
