"""Pure renderer tests: untrusted token and error text must come out as characters, never markup,
and invisible characters must become visible. Plus the narration and the metrics table."""
from __future__ import annotations

import json
import html
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pacer_core.events import BlockDecision, Metrics, Result, SMCCycleEvent, StepEvent, TokenRecord
from pacer_core.ui import columns, escape, genealogy, narration, page, tables

pytestmark = pytest.mark.pure

ALLOWED_TAGS = {"span", "br", "div", "b", "p"}
ALLOWED_ATTRS = {"class", "title", "style", "role"}
HIDDEN = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u200e", "\u200f", "\u202a", "\u202b", "\u202c",
          "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069", "\u2028", "\u2029", "\x00", "\x07", "\x1b",
          "\x7f", "\x85", "\ud800"]
NASTY = ["<script>alert(1)</script>", "<b>bold</b>", '" onmouseover="alert(1)', "' onerror='alert(1)",
         "<img src=x onerror=alert(1)>", "&amp;", "&lt;b&gt;", "&#60;script&#62;", "${value}", "{{x}}", "`cmd`",
         "</span></div><script>", "\u202eevil", "a\u200bb", "\x00\x1b[31m", "\ufffd", "<!--", "]]>"]


class Collector(HTMLParser):
    """Records every tag and attribute, and the text as a browser would show it."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.attrs, self.text, self.titles = [], [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for name, value in attrs:
            self.attrs.append(name)
            if name == "title":
                self.titles.append(value)

    handle_startendtag = handle_starttag

    def handle_data(self, data):
        self.text.append(data)

    def handle_comment(self, data):  # a comment would mean "<!--" got through unescaped
        self.tags.append("!--")


def parse(markup: str) -> Collector:
    collector = Collector()
    collector.feed(markup)
    collector.close()
    return collector


def assert_safe(markup: str) -> Collector:
    parsed = parse(markup)
    assert set(parsed.tags) <= ALLOWED_TAGS, parsed.tags
    for name in parsed.attrs:
        assert name in ALLOWED_ATTRS or name.startswith("data-"), name
        assert not name.startswith("on"), name
    for char in HIDDEN:
        assert char not in markup, repr(char)
    for char in "$`{}":
        # Template engines (Gradio's HTML component renders through one) must find nothing to act on.
        assert char not in markup, char
    return parsed


def token(text, state="accepted", **extra):
    return TokenRecord(token_id=7, text=text, state=state, draft_prob=0.5, target_prob=0.25, accept_prob=0.5, **extra)


def step_event(texts, method="fixed", step=0, states=None, blocks=None, stop_reason=None):
    states = states or ["accepted"] * (len(texts) - 1) + ["bonus"]
    tokens = [token(text, state) for text, state in zip(texts, states)]
    n_accepted = sum(state == "accepted" for state in states)
    n_drafted = sum(state in ("accepted", "rejected") for state in states)
    return StepEvent(method=method, step=step, tokens=tokens, emitted_ids=[1] * (n_accepted + 1),
                     emitted_text="".join(texts), n_drafted=n_drafted, n_accepted=n_accepted, draft_seconds=0.01,
                     verify_seconds=0.02, total_new_tokens=(step + 1) * (n_accepted + 1), blocks=blocks or [],
                     stop_reason=stop_reason)


def smc_event(texts, step=0, resampled=False, ancestors=None, weights=None):
    n = len(texts)
    weights = weights or [1.0 / n] * n
    return SMCCycleEvent(method="smc", step=step, particle_texts=texts, particle_token_ids=[[1, 2] for _ in texts],
                         log_weights=[0.0] * n, weights=weights, ess=1.5, ess_threshold=0.5, resampled=resampled,
                         ancestors=ancestors or list(range(n)), finished=[False] * n, draft_seconds=0.0,
                         verify_seconds=0.0, total_new_tokens=2 * (step + 1), leader_text="".join(texts))


# ------------------------------------------------------------------ escaping

@pytest.mark.parametrize("text", NASTY)
def test_escape_text_shows_markup_as_characters(text):
    out = escape.escape_text(text)
    assert_safe(out)
    assert "<script" not in out and "<b>" not in out and "<img" not in out


def test_script_and_bold_tags_become_visible_characters():
    parsed = assert_safe(escape.escape_text("<b>hi</b><script>x</script>"))
    assert "".join(parsed.text) == "<b>hi</b><script>x</script>"


def test_entities_are_shown_literally_not_decoded():
    parsed = assert_safe(escape.escape_text("&amp; &lt;b&gt; &#60;"))
    assert "".join(parsed.text) == "&amp; &lt;b&gt; &#60;"


@pytest.mark.parametrize("char", HIDDEN)
def test_invisible_and_bidi_characters_become_visible_markers(char):
    out = escape.escape_text(f"a{char}b")
    assert char not in out
    visible = "".join(parse(out).text)
    assert visible.startswith("a") and visible.endswith("b") and len(visible) > 2


def test_specific_markers():
    assert "\u27e8U+200B\u27e9" in escape.escape_text("\u200b")
    assert "\u27e8U+202E\u27e9" in escape.escape_text("\u202e")
    assert "\u2400" in escape.escape_text("\x00")       # ␀
    assert "\u241b" in escape.escape_text("\x1b")       # ␛
    out = escape.escape_text("line1\nline2\ttab")
    assert "\u21b5" in out and "<br>" in out and "\u2192" in out


def test_byte_fallback_replacement_char_is_marked():
    out = escape.escape_text("\ufffd")
    assert 'class="bytefrag"' in out and "\ufffd" in out
    assert_safe(out)


def test_template_characters_are_entities():
    out = escape.escape_text("${value} `x` {{y}}")
    assert "$" not in out and "{" not in out and "}" not in out and "`" not in out
    assert "".join(parse(out).text) == "${value} `x` {{y}}"


@pytest.mark.parametrize("text", NASTY + HIDDEN)
def test_escape_attr_is_safe_inside_double_quotes(text):
    markup = f'<span title="{escape.escape_attr(text)}">x</span>'
    parsed = assert_safe(markup)
    assert parsed.tags == ["span"] and parsed.attrs == ["title"]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=40))
def test_any_text_renders_safely(text):
    out = escape.escape_text(text)
    assert_safe(out)
    attr = escape.escape_attr(text)
    assert '"' not in attr and "<" not in attr and ">" not in attr


# ------------------------------------------------------------------ columns and boxes

@pytest.mark.parametrize("text", NASTY + HIDDEN)
def test_column_with_hostile_tokens_is_safe(text):
    event = step_event(["ok", text, "<b>fix</b>"], states=["accepted", "rejected", "corrected"])
    markup = columns.column_html("fixed", [event])
    parsed = assert_safe(markup)
    states = {value for value in parse(markup).attrs}
    assert "data-state" in states
    assert "<b>fix</b>" in "".join(parsed.text)


def test_token_states_and_tooltips():
    blocks = [BlockDecision(0, 2, 0.9, 0.5, True), BlockDecision(1, 2, 0.31, 0.5, False)]
    tokens = [TokenRecord(1, "a", "accepted", 0.9, 0.8, 1.0, block=0, preverifier_prob=0.95),
              TokenRecord(2, "b", "accepted", 0.9, 0.8, 1.0, block=0, preverifier_prob=0.95),
              TokenRecord(3, "c", "accepted", 0.4, 0.8, 1.0, block=1, preverifier_prob=0.5, stopped=True),
              TokenRecord(4, "d", "rejected", 0.4, 0.1, 0.25, block=1, preverifier_prob=0.6, stopped=True),
              TokenRecord(5, "e", "corrected", target_prob=0.7)]
    event = StepEvent("pacer", 1, tokens, [1, 2, 3, 5], "abce", 4, 3, 0.0, 0.0, 8, blocks, "preverifier")
    markup = columns.column_html("pacer", [event])
    assert markup.count('data-state="accepted"') == 3
    assert 'data-state="rejected"' in markup and 'data-state="corrected"' in markup
    assert markup.count('data-stopped="1"') == 2 and "tok-stopped" in markup
    titles = "\n".join(parse(markup).titles)
    assert "q (draft) = 0.400" in titles and "p (target) = 0.100" in titles
    assert "min(1, p/q) = 0.250" in titles and "score 0.310 vs threshold 0.500" in titles


def test_smc_column_marks_duplicated_and_resampled_away_and_escapes():
    first = smc_event(["<b>x", "y\u202e", "z", "&amp;"], step=0)
    second = smc_event(["<script>", "q", "r", "s"], step=1, resampled=True, ancestors=[0, 0, 2, 3],
                       weights=[0.7, 0.1, 0.1, 0.1])
    markup = columns.column_html("smc", [first, second])
    assert_safe(markup)
    assert 'data-particle-state="duplicated"' in markup
    assert 'data-particle-state="resampled-away"' in markup
    assert "&lt;script&gt;" in markup and "&lt;b&gt;x" in markup


def test_smc_histories_follow_the_genealogy():
    first = smc_event(["a", "b", "c"], step=0, resampled=True, ancestors=[1, 1, 2])
    second = smc_event(["d", "e", "f"], step=1)
    histories = genealogy.particle_histories([first, second])
    assert ["".join(piece.token.text for piece in h) for h in histories] == ["bd", "be", "cf"]
    lines = genealogy.lineage([first, second])
    assert lines[1].parents == [1, 1, 2] and lines[0].copies == [0, 2, 1]
    assert lines[0].fates == [genealogy.Fate.RESAMPLED_AWAY, genealogy.Fate.DUPLICATED, genealogy.Fate.KEPT]


def test_smc_column_takes_each_tokens_kind_from_the_event():
    """The decoder says which token was the bonus; the column does not guess from lengths. Particle 2
    ended after one drafted token (an EOS), so it has no bonus although it grew by as much as particle 1."""
    tokens = [[TokenRecord(1, "a", "drafted"), TokenRecord(2, "<b>", "bonus")],
              [TokenRecord(3, "c", "drafted"), TokenRecord(4, "d", "drafted")]]
    event = smc_event(["a<b>", "cd"], weights=[0.9, 0.1])
    event.particle_tokens = tokens
    markup = columns.column_html("smc", [event])
    assert_safe(markup)
    leader = markup.split('<div class="tokens">')[1].split("</div>")[0]
    assert leader.count('data-state="bonus"') == 1 and "&lt;b&gt;" in leader
    event.weights = [0.1, 0.9]
    leader = columns.column_html("smc", [event]).split('<div class="tokens">')[1].split("</div>")[0]
    assert 'data-state="bonus"' not in leader and leader.count('data-state="accepted"') == 2


def test_error_box_and_status_and_narration_escape():
    for markup in (columns.error_html("<script>alert(1)</script> & more"),
                   columns.column_html("smc", [], error="bad <img src=x onerror=alert(1)>"),
                   page.run_status_html("<b>no</b>", "error"),
                   narration.narration_html({"fixed": "chose <b>x</b>\u202e"}),
                   page.pair_status_html({"target": "<script>t</script>", "draft": "d\u200b", "device": "cpu",
                                            "dtype": "bfloat16"}, "heuristic")):
        assert_safe(markup)
        assert "<script" not in markup and "<img" not in markup


def test_pair_status_names_preverifier_kind():
    info = {"target": "T", "draft": "D", "device": "cpu", "dtype": "float32"}
    assert "heuristic" in page.pair_status_html(info, "heuristic")
    assert "trained pre-verifier" in page.pair_status_html(info, "trained")


def test_explain_step_sentences():
    blocks = [BlockDecision(0, 3, 0.8, 0.5, True), BlockDecision(1, 3, 0.31, 0.5, False)]
    event = step_event(["a", "b", "c", "d", "e", "f", "g"], method="pacer", blocks=blocks, stop_reason="preverifier",
                       states=["accepted"] * 4 + ["rejected", "rejected", "corrected"])
    text = narration.explain_step(event)
    assert "scored block 2 at 0.31 < 0.50, so drafting stopped" in text
    assert "accepted 4 of 6" in text
    assert "accepted all 2" in narration.explain_step(step_event(["a", "b", "c"]))
    smc = narration.explain_step(smc_event(["a", "b"], resampled=True, ancestors=[0, 0], weights=[0.9, 0.1]))
    assert "resampled" in smc and "dropped: 2" in smc


def test_legend_and_css_use_the_okabe_ito_colours():
    css = (Path(__file__).resolve().parent.parent / "assets" / "style.css").read_text()
    for colour in ("#009E73", "#D55E00", "#E69F00", "#0072B2", "#CC79A7"):
        assert colour in css
    assert "line-through" in css and "dashed" in css
    legend = page.legend_html()
    for cls in ("tok-accepted", "tok-rejected", "tok-stopped", "tok-corrected", "particle-duplicated"):
        assert cls in legend


# ------------------------------------------------------------------ metrics table

def make_result(method, tokens, seconds, target_calls, alpha=0.5, reason="length"):
    metrics = Metrics(tau=tokens / target_calls, alpha=alpha, target_calls=target_calls, draft_calls=10,
                      new_tokens=tokens, seconds=seconds, tokens_per_s=tokens / seconds)
    return Result(method=method, text="x", token_ids=[1] * tokens, events=[], metrics=metrics, finish_reason=reason)


def test_metrics_frame_speedup_against_ar():
    results = {"ar": make_result("ar", 20, 2.0, 20, None), "fixed": make_result("fixed", 20, 1.0, 8),
               "pacer": make_result("pacer", 20, 0.5, 5, reason="cancelled")}
    frame = tables.metrics_frame(results, seconds={"fixed": 1.0, "pacer": 0.5, "ar": 2.0}, statuses={"smc": "error"},
                                 drafter="self-int8")
    assert list(frame.columns) == tables.COLUMNS
    assert list(frame["drafter"]) == ["—", "self-int8", "self-int8", "self-int8"]
    assert list(frame["method"])[:2] == ["Autoregressive (AR)", "Fixed-length SD"]
    speed = dict(zip(frame["method"], frame["speedup"]))
    assert speed["Autoregressive (AR)"] == 1.0 and speed["Fixed-length SD"] == 2.0
    assert speed["PACER (stopped)"] == 4.0
    assert "SMC-SD (approximate) (error)" in list(frame["method"])
    assert frame.to_csv(index=False).startswith("method,drafter,tau,alpha,target_calls")


def test_metrics_frame_without_ar_has_no_speedup():
    frame = tables.metrics_frame({"fixed": make_result("fixed", 10, 1.0, 4)})
    assert frame["speedup"].isna().all()
    assert html.escape("x") == "x"


def test_summarize_run_sentence():
    blocks = [BlockDecision(0, 3, 0.2, 0.5, False)]
    events = [step_event(["a", "b", "c", "d"], method="pacer", blocks=blocks, stop_reason="preverifier")]
    result = make_result("pacer", 8, 1.0, 2, alpha=0.75, reason="eos")
    text = narration.summarize_run(result, events)
    assert "8 tokens in 2 target forward passes" in text and "α = 0.75" in text
    assert "cut the draft short in 1 of 1 steps" in text
    smc = narration.summarize_run(make_result("smc", 6, 1.0, 3, alpha=None),
                               [smc_event(["a", "b"], resampled=True, ancestors=[0, 0])])
    assert "resampled in 1 of 1 cycles" in smc


def test_a_long_prefill_is_named_in_the_summary():
    """A prefill of a fifth of the run or more gets a sentence (the same for every method: it dilutes speedups);
    a short one, or none reported (an old trace), says nothing."""
    events = [step_event(["a", "b"], method="fixed"), step_event(["c", "d"], method="fixed")]
    result = make_result("fixed", 8, 1.0, 2, alpha=1.0)
    assert "prefill" not in narration.summarize_run(result, events)
    events[0].prefill_seconds = 0.1
    assert "prefill" not in narration.summarize_run(result, events)
    events[0].prefill_seconds = 0.4
    text = narration.summarize_run(result, events)
    assert "The prompt's prefill took 0.40 of its 1.00 s (40%), the same for every method" in text


def test_summary_names_the_dead_particle_cost():
    """The SMC column's note says how many cycles ran with a particle under 1% of the weight and what share of
    the rows that was; a run without one says so; a result without the report (an old trace) says nothing."""
    result = make_result("smc", 6, 1.0, 3, alpha=None)
    events = [smc_event(["a", "b"], weights=[0.995, 0.005]), smc_event(["a", "b"], step=1, weights=[1.0, 0.0])]
    result.info["dead_particles"] = {"weight_floor": 0.01, "cycles": 1, "rows": 1, "all_rows": 4}
    text = narration.summarize_run(result, events)
    assert "1 cycle ran with a particle below 1% of the weight" in text and "1 of 4 particle rows (25%" in text
    result.info["dead_particles"] = {"weight_floor": 0.01, "cycles": 0, "rows": 0, "all_rows": 4}
    assert "No cycle ran with a particle below 1%" in narration.summarize_run(result, events)
    del result.info["dead_particles"]
    assert "below 1%" not in narration.summarize_run(result, events)


def test_pacer_block_boundaries_are_marked():
    blocks = [BlockDecision(0, 2, 0.9, 0.5, True), BlockDecision(1, 2, 0.31, 0.5, False)]
    tokens = [TokenRecord(1, "a", "accepted", block=0), TokenRecord(2, "b", "accepted", block=0),
              TokenRecord(3, "c", "accepted", block=1, stopped=True), TokenRecord(4, "d", "rejected", block=1,
                                                                                  stopped=True),
              TokenRecord(5, "e", "corrected")]
    event = StepEvent("pacer", 0, tokens, [1, 2, 3, 5], "abce", 4, 3, 0.0, 0.0, 4, blocks, "preverifier")
    markup = columns.step_html(event)
    assert markup.count('class="block-sep"') == 1
    assert "PACER block 2: score 0.310 vs threshold 0.500" in markup
    assert_safe(markup)


def test_same_as_ar_for_greedy_runs_only():
    def greedy(method, ids, temperature=0.0):
        result = make_result(method, len(ids), 1.0, 2)
        result.token_ids, result.settings = ids, {"temperature": temperature}
        return result

    results = {"ar": greedy("ar", [1, 2, 3, 4]), "fixed": greedy("fixed", [1, 2, 3, 4]),
               "pacer": greedy("pacer", [1, 2, 9, 4])}
    frame = tables.metrics_frame(results)
    same = dict(zip(frame["method"], frame["same_as_ar"]))
    assert same["Fixed-length SD"] == "yes" and same["PACER"] == "no" and pd.isna(same["Autoregressive (AR)"])
    sampled = {"ar": greedy("ar", [1, 2], 0.7), "fixed": greedy("fixed", [1, 2], 0.7)}
    assert tables.metrics_frame(sampled)["same_as_ar"].isna().all()


def test_narration_shows_a_space_token_visibly():
    text = narration.explain_step(step_event(["a", " "], states=["rejected", "corrected"]))
    assert "\u201c\u2423\u201d" in text


def test_pending_step_shows_only_grey_drafts_and_the_draft_narration():
    blocks = [BlockDecision(0, 2, 0.9, 0.5, True), BlockDecision(1, 2, 0.31, 0.5, False)]
    tokens = [TokenRecord(1, "a", "accepted", 0.9, 0.8, 1.0, block=0), TokenRecord(2, "<b>", "accepted", block=0),
              TokenRecord(3, "c", "rejected", 0.4, 0.1, 0.2, block=1, stopped=True),
              TokenRecord(4, "d", "rejected", block=1, stopped=True), TokenRecord(5, "e", "corrected")]
    event = StepEvent("pacer", 0, tokens, [1, 2, 5], "a<b>e", 4, 2, 0.0, 0.0, 3, blocks, "preverifier")
    markup = columns.column_html("pacer", [event], pending=True)
    assert_safe(markup)
    assert markup.count('data-state="drafted"') == 4 and 'data-state="corrected"' not in markup
    assert markup.count('data-stopped="1"') == 2 and "p (target)" not in markup
    assert "<b>steps</b>" not in markup and ">0</b>" in markup          # counters exclude the pending step
    text = narration.explain_draft(event)
    assert "proposed 4 tokens" in text and "0.90, 0.31" in text and "block 2 failed" in text
    smc = [smc_event(["a", "b"], step=0), smc_event(["c", "d"], step=1)]
    assert columns.column_html("smc", smc, pending=True) == columns.column_html("smc", smc[:1])
    assert "Cycle 2: each of 2 particles drafted" in narration.explain_draft(smc[1])


def test_finished_smc_column_shows_the_chosen_particle():
    events = [smc_event(["a", "b", "c"], step=0, weights=[0.2, 0.5, 0.3])]
    result = make_result("smc", 2, 1.0, 1, alpha=None)
    result.info = {"chosen_particle": 2, "final": "sample"}
    markup = columns.column_html("smc", events, result)
    shown = markup.split('<div class="tokens">')[1].split("</div>")[0]
    assert "".join(parse(shown).text) == "c"
    assert "Output: the particle drawn at random from the final weights (#3)." in markup


def test_target_loglik_column_is_filled_for_the_methods_scored():
    results = {"ar": make_result("ar", 20, 2.0, 20, None), "smc": make_result("smc", 20, 1.0, 5, alpha=None)}
    frame = tables.metrics_frame(results, logliks={"ar": -1.1234, "smc": -2.5})
    scores = dict(zip(frame["method"], frame["target_loglik"]))
    assert scores["Autoregressive (AR)"] == -1.123 and scores["SMC-SD (approximate)"] == -2.5
    assert tables.metrics_frame(results)["target_loglik"].isna().all()


def measured_run(tmp_path, target="T", draft="D"):
    run = {"machine": {"target": target, "draft": draft}, "settings": {"temperature": 0.7, "prompt_count": 40,
                                                                       "repeats": 2},
           "methods": [{"method": "ar", "loglik_gap_vs_ar_pct": 0.0, "loglik_gap_ci95": "[0.0, 0.0]"},
                       {"method": "smc:4:4", "loglik_gap_vs_ar_pct": 95.2, "loglik_gap_ci95": "[80.1, 110.3]"},
                       {"method": "smc:16:1", "loglik_gap_vs_ar_pct": -1.4, "loglik_gap_ci95": "[-6.0, 3.2]"}]}
    path = tmp_path / "results.json"
    path.write_text(json.dumps(run))
    return [path, tmp_path / "missing.json"]


def test_smc_note_quotes_the_measured_error_for_the_same_pair_and_setting(tmp_path):
    from pacer_core.ui import measured

    path = measured_run(tmp_path)
    settings = {"n_particles": 4, "draft_len": 4, "temperature": 0.7}
    note = measured.smc_column_note({"target": "T", "draft": "D"}, settings, {"smc": -2.5, "fixed": -1.2, "pacer": -1.0},
                                    path)
    assert note.startswith("SMC-SD is approximate")
    assert "95% lower than AR's (95% interval of the gap [80.1, 110.3] %) for N=4, K=4" in note
    assert "-2.50 for SMC-SD's output and -1.10 for the exact columns'" in note
    level = measured.smc_error_note({"target": "T", "draft": "D"}, 16, 1, 0.7, path)
    assert "1% higher than AR's (95% interval of the gap [-6.0, 3.2] %)" in level
    other_setting = measured.smc_error_note({"target": "T", "draft": "D"}, 8, 8, 1.0, path)
    assert "N=8, K=8 was not measured" in other_setting and "Not measured at temperature 1" in other_setting
    assert "N=4, K=4: 95; N=16, K=1: -1" in other_setting
    assert "settings differ" not in note
    tuned = measured.smc_column_note({"target": "T", "draft": "D"}, settings | {"draft_temperature": 1.0}, {}, path)
    assert "this run's settings differ" in tuned
    assert "settings differ" not in measured.smc_column_note({"target": "T", "draft": "D"},
                                                             settings | {"draft_temperature": 0.7}, {}, path)
    other_pair = measured.smc_column_note({"target": "X", "draft": "D"}, settings, {}, path)
    assert "measured for the embedded pair only" in other_pair and "This run" not in other_pair
    assert "not been measured" in measured.smc_error_note({}, 4, 4, 0.7, [tmp_path / "missing.json"])


def test_smc_note_turns_the_proposal_divergence_into_a_particle_count(tmp_path):
    from pacer_core.ui import measured

    settings = {"n_particles": 8, "draft_len": 4, "temperature": 0.7}
    far = measured.smc_column_note({"target": "T", "draft": "D"}, settings, {}, measured_run(tmp_path), proposal_kl=3.6)
    assert "3.60 nats per token (KL)" in far and "over a million particles" in far and "N=8 is far fewer than" in far
    near = measured.divergence_text(0.12, 8, 4)                      # e^(4 x 0.12) = 1.6
    assert "= 2 particles" in near and "N=8 is more than that" in near
    assert "about as many as" in measured.divergence_text(0.5, 8, 4)  # e^2 = 7.4
    assert measured.divergence_text(None, 8, 4) == "" == measured.divergence_text(float("inf"), 8, 4)
    assert "Why:" not in measured.smc_column_note({"target": "T", "draft": "D"}, settings, {}, measured_run(tmp_path))


def test_the_shipped_smc_measurements_are_quoted_for_the_embedded_pair():
    from pacer_core.ui import measured

    run = measured.load_run(str(measured.MEASURED_RUNS[0]))
    assert run is not None, "benchmarks/results/smc-embedded-heldout40/results.json is missing"
    described = {"target": run["machine"]["target"], "draft": run["machine"]["draft"]}
    note = measured.smc_error_note(described, 4, 4, run["settings"]["temperature"])
    assert "lower than AR's (-2." in note and "for N=4, K=4" in note


def test_pair_status_says_which_engine_runs_the_target():
    info = {"target": "T", "draft": "D", "device": "cpu", "dtype": "float32", "linear_kernels": "oneDNN packed"}
    on_llama = page.pair_status_html(info | {"target_engine": "llama.cpp (t-f32.gguf, 2 threads)"}, "heuristic")
    assert "Target engine" in on_llama and "llama.cpp (t-f32.gguf, 2 threads)" in on_llama
    assert "oneDNN packed" not in on_llama      # torch's kernels do not run the target then
    on_torch = page.pair_status_html(info | {"target_engine": "torch"}, "heuristic")
    assert "oneDNN packed" in on_torch and "Target engine" in on_torch


def test_the_smc_note_quotes_the_gguf_run_for_the_gguf_drafter():
    from pacer_core.ui import measured

    run = measured.load_run(str(measured.MEASURED_RUNS[-1]))
    assert run is not None, "benchmarks/results/gguf-heldout-t0.7-smc/results.json is missing"
    row = next(row for row in run["methods"] if row["method"] == "smc:2:4@gguf")
    gguf_pair = {"target": run["machine"]["target"], "draft": "the target's GGUF", "drafter": {"kind": "gguf"}}
    note = measured.smc_error_note(gguf_pair, 2, 4, 0.7)
    assert f"95% interval of the gap {row['loglik_gap_ci95']} %) for N=2, K=4" in note
    assert "12 held-out prompts x 4 runs" in note
    small_pair = {"target": run["machine"]["target"], "draft": run["machine"]["draft"], "drafter": {"kind": "independent"}}
    assert f"{row['loglik_gap_ci95']}" not in measured.smc_error_note(small_pair, 2, 4, 0.7)
