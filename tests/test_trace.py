"""Exported traces read back (pacer_core/trace.py): a real trace of a tiny random pair round-trips to the
same events; older, newer, truncated, edited, hostile and absurdly large traces are refused with one clear
sentence each (a TraceError, never another exception); token text with markup replays escaped."""
from __future__ import annotations

import copy
import json
from html.parser import HTMLParser

import pytest

from pacer_core import __version__, method_table
from pacer_core.testing.tiny import tiny_pair
from pacer_core.trace import TRACE_FORMAT, TRACE_VERSION, TraceError, TraceLimits, parse_trace
from pacer_core.ui import handlers
from pacer_core.ui.page_types import AppContext, PageInputs
from pacer_core.ui.replay import open_trace, recorded_html, replay_view

HOSTILE = ("<script>alert(1)</script>", '<img src=x onerror="alert(1)">', "${alert(1)}", "`x`{{y}}",
           "\u202egnp.exe", "&lt;b&gt;", "</div><div onclick=alert(1)>")


@pytest.fixture(scope="module")
def trace() -> dict:
    """A finished sampling run of the tiny pair with the AR baseline, as the page exports it."""
    inputs = PageInputs("t1 t2", {"max_new_tokens": 8, "temperature": 0.8, "seed": 3}, measure_ar=True)
    target, drafter = tiny_pair()
    *_, final = handlers.run(AppContext(target, drafter), inputs)
    with open(final.downloads[0], encoding="utf-8") as file:
        return json.load(file)


def edited(trace: dict, edit) -> str:
    changed = copy.deepcopy(trace)
    edit(changed)
    return json.dumps(changed)


def refused(data, limits: TraceLimits = TraceLimits()) -> str:
    with pytest.raises(TraceError) as caught:
        parse_trace(data, limits)
    message = str(caught.value)
    assert message and "\n" not in message and "Traceback" not in message
    return message


def test_the_export_says_what_it_was_recorded_on(trace):
    assert trace["format"] == TRACE_FORMAT and trace["version"] == TRACE_VERSION
    assert trace["project_version"] == __version__ and trace["recorded_at"].endswith("Z")
    assert trace["drafter"] == "small" and trace["preverifier_kind"] == "heuristic"
    assert {"target", "draft", "device", "dtype"} <= set(trace["pair"])
    assert set(trace["logliks"]) == set(method_table.method_keys())


def test_a_trace_reads_back_as_the_same_results(trace):
    recorded = parse_trace(json.dumps(trace))
    assert {method: result.to_dict() for method, result in recorded.results.items()} == trace["results"]
    assert recorded.settings == trace["settings"] and recorded.busy_seconds == trace["busy_seconds"]
    assert recorded.logliks == trace["logliks"] and recorded.oracle == trace["oracle_lengths"]


def test_versions_are_refused_by_name(trace):
    assert "older PACER Lab" in refused(edited(trace, lambda t: (t.pop("format"), t.pop("version"))))
    assert "older PACER Lab" in refused(edited(trace, lambda t: t.update(version=0)))
    assert "newer PACER Lab" in refused(edited(trace, lambda t: t.update(version=TRACE_VERSION + 1)))
    assert "not a PACER Lab trace" in refused(edited(trace, lambda t: t.update(format="other")))
    assert "not a trace" in refused("[1, 2, 3]")


def test_a_truncated_or_garbled_file_is_refused(trace):
    text = json.dumps(trace)
    assert "ends early" in refused(text[: len(text) // 2])
    assert "not valid JSON" in refused(text.replace('"results"', "'results'", 1))
    assert "not UTF-8" in refused(b"\xff\xfe\x00garbage")
    assert "NaN" in refused(text.replace('"proposal_kl": ', '"proposal_kl": NaN, "x": ', 1))
    assert "not a usable trace" in refused("[" * 100_000 + "]" * 100_000)


def first_token(trace: dict) -> dict:
    return trace["results"]["fixed"]["events"][0]["tokens"][0]


def first_cycle(trace: dict) -> dict:
    return trace["results"]["smc"]["events"][0]


@pytest.mark.parametrize("edit, message", [
    (lambda t: first_token(t).update(text=12), "expected text"),
    (lambda t: first_token(t).update(state="exploded"), "not a token state"),
    (lambda t: first_token(t).update(onload="alert(1)"), "unknown field"),
    (lambda t: first_token(t).pop("token_id"), "missing field 'token_id'"),
    (lambda t: first_token(t).update(draft_prob=True), "finite number"),
    (lambda t: first_cycle(t).update(ancestors=[7] * len(first_cycle(t)["weights"])), "ancestor"),
    (lambda t: first_cycle(t)["weights"].append(0.5), "different lengths"),
    (lambda t: t["results"].update(evil=t["results"]["fixed"]), "not one of the page's methods"),
    (lambda t: t["results"]["pacer"]["events"][0].update(method="fixed"), "another method's steps"),
    (lambda t: t["settings"].update(temperature=-1), "settings are not valid"),
    (lambda t: t["settings"].update(rm_rf=1), "settings are not valid"),
    (lambda t: t.update(drafter="<img src=x onerror=alert(1)>"), "drafter"),
    (lambda t: t["pair"]["drafter"].update(kept_ids="lots"), "whole number"),
    (lambda t: t["results"]["ar"].update(info={"a": [[[[[[[[1]]]]]]]]}), "nested too deeply"),
    (lambda t: t.update(oracle_steps=None), "oracle_lengths and oracle_steps"),
    (lambda t: t.update(results={}, errors={}), "no results"),
])
def test_an_edited_trace_is_refused_with_what_is_wrong(trace, edit, message):
    assert message in refused(edited(trace, edit))


@pytest.mark.parametrize("limits, edit, message", [
    (TraceLimits(max_bytes=1000), None, "too large"),
    (TraceLimits(max_events=2), None, "more than a trace may hold"),
    (TraceLimits(), lambda t: first_token(t).update(text="x" * 5000), "more than one token may hold"),
    (TraceLimits(), lambda t: t["results"]["fixed"]["events"][0].update(tokens=[first_token(t)] * 600),
     "tokens in one step"),
    (TraceLimits(max_particles=2), None, "articles"),
])
def test_absurd_sizes_are_refused(trace, limits, edit, message):
    assert message in refused(edited(trace, edit or (lambda t: None)), limits)


def hostile(trace: dict) -> str:
    """The trace with markup and invisible characters in every text a page shows."""
    def edit(changed):
        changed.update(prompt=HOSTILE[0], title=HOSTILE[1], prompt_note=HOSTILE[2])
        changed["pair"].update(target=HOSTILE[1], draft=HOSTILE[0], device=HOSTILE[6])
        for method, result in changed["results"].items():
            result["text"] = "".join(HOSTILE)
            for index, event in enumerate(result["events"]):
                for number, token in enumerate(event.get("tokens", [])):
                    token["text"] = HOSTILE[(index + number) % len(HOSTILE)]
                for row, tokens in enumerate(event.get("particle_tokens", [])):
                    for token in tokens:
                        token["text"] = HOSTILE[row % len(HOSTILE)]
                if "leader_text" in event:
                    event["leader_text"] = event["particle_texts"][0] = "".join(HOSTILE)
                else:
                    event["emitted_text"] = "".join(HOSTILE)
    return edited(trace, edit)


class Tags(HTMLParser):
    """Every tag and attribute name a browser would build from some markup."""

    def __init__(self, markup: str):
        super().__init__()
        self.tags, self.attributes = set(), set()
        self.feed(markup)

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.attributes |= {name for name, _ in attrs}


def assert_inert(markup: str) -> None:
    """Only the renderers' own tags and attributes (none from the trace, no event handler), nothing a template
    engine reads, no raw bidi override."""
    parsed = Tags(markup)
    assert parsed.tags <= {"div", "span", "p", "br", "b"}, parsed.tags
    assert not {name for name in parsed.attributes if name.startswith("on")}, parsed.attributes
    assert "${" not in markup and "\u202e" not in markup


def test_token_text_with_markup_replays_escaped_never_executed(trace):
    replay = open_trace(hostile(trace))
    assert_inert(recorded_html(replay.recorded))
    assert "&lt;script&gt;" in recorded_html(replay.recorded)
    views = [replay_view(replay)]
    while not replay.finished:
        replay = replay.step()
        views.append(replay_view(replay))
    for view in views:
        for markup in list(view.columns.values()) + [view.narration, view.status]:
            assert_inert(markup)
        for figure in (view.plots or {}).values():
            assert figure is None or "<script" not in figure.to_json().lower()
    assert any("&lt;script&gt;" in markup for markup in views[-1].columns.values())
