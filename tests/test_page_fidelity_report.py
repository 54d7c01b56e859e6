"""benchmarks/page_fidelity.py's arithmetic without a browser: the noise floor it reports beside the page's speedups
(the alone side's first pass against its other passes), carried into the summary and the report."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import page_fidelity  # noqa: E402


def alone(ar_passes, fixed_passes, tokens=48):
    return {"fixed": {"seconds": sorted(fixed_passes)[1], "passes": fixed_passes, "tokens": tokens},
            "ar": {"seconds": sorted(ar_passes)[1], "passes": ar_passes, "tokens": tokens}}


def test_the_alone_side_against_itself_is_its_first_pass_against_the_median_of_the_rest():
    # first pass: AR 1.2 s, fixed 0.8 s -> 1.5x; the rest: AR median 1.0, fixed median 0.8 -> 1.25x; ratio 1.2
    floor = page_fidelity.alone_against_itself(alone([1.2, 1.0, 1.0], [0.8, 0.8, 0.8]))
    assert floor["ar"] == pytest.approx(1.0) and floor["fixed"] == pytest.approx(1.2)
    assert page_fidelity.alone_against_itself(alone([1.2, 1.0], [0.8, 0.8])) == {}    # two passes: no floor


def test_the_summary_and_report_carry_the_noise_floor():
    rounds = []
    for first_ar in (1.0, 1.1, 1.3):
        side = alone([first_ar, 1.0, 1.0], [0.8, 0.8, 0.8])
        page = {method: {"seconds": row["seconds"], "tokens": row["tokens"], "token_ids": [1]}
                for method, row in side.items()}
        for row in side.values():
            row["token_ids"] = [1]
        rounds.append({"click_to_table_s": 3.0, "alone": side, "compare": page_fidelity.compare(page, side),
                       "alone_against_itself": page_fidelity.alone_against_itself(side),
                       "phase_seconds": {"drawing": 0.3 + first_ar, "settling": first_ar / 10}})
    rounds[0]["phase_seconds"].pop("settling")                      # a trace from before the quiet wait
    summary = page_fidelity.summarize(rounds)
    assert summary["methods"]["fixed"]["alone_against_itself"] == pytest.approx(1.1)    # median of 1.0, 1.1, 1.3
    assert summary["drawing_s"] == pytest.approx(1.4) and summary["settling_s"] == pytest.approx(0.12)
    results = {"date": "d", "rounds": 3, "alone_repeats": 3, "machine": {"cpus": 2, "processor": "x"},
               "pair": {"target": "t", "target_engine": "e", "drafter": "g"},
               "examples": [{"label": "ex", "summary": summary, "verdicts": page_fidelity.verdicts(summary)}]}
    fixed_row = next(line for line in page_fidelity.report(results).splitlines() if line.startswith("| ex | fixed"))
    assert fixed_row.split(" | ")[-2] == "1.10"
    run_row = next(line for line in page_fidelity.report(results).splitlines() if line.startswith("| ex | 3.00"))
    assert "| 1.40 / 0.12 |" in run_row


def test_an_alone_sample_is_the_fastest_of_as_many_passes_as_the_page_timed(monkeypatch):
    """A page Run that timed each method twice (pass_seconds) is one sample of the fastest of two passes: the alone
    side's samples are the same statistic, one per repeat, and its seconds their median."""
    import types

    import pacer_core

    durations = iter([0.5, 1.0, 0.4, 0.9, 0.6, 1.2, 0.5, 0.8, 0.3, 1.1, 0.7, 1.0])   # fixed, ar, fixed, ar, ...
    now = [0.0]

    def generate(target, drafter, method, prompt, **settings):
        now[0] += next(durations)
        steps = [types.SimpleNamespace(draft_seconds=0.0, verify_seconds=0.1),      # the prefill's step
                 types.SimpleNamespace(draft_seconds=0.05, verify_seconds=0.15)]
        return types.SimpleNamespace(metrics=types.SimpleNamespace(new_tokens=4), token_ids=[1, 2], events=steps)

    monkeypatch.setattr(pacer_core, "generate", generate)
    monkeypatch.setattr(page_fidelity, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    trace = {"settings": {"max_new_tokens": 4}, "prompt": "p", "results": {"fixed": {}, "ar": {}},
             "pass_seconds": {"fixed": [0.5, 0.4], "ar": [1.0, 0.9]}}
    assert page_fidelity.page_passes(trace) == 2 and page_fidelity.page_passes({"results": {}}) == 1
    side = page_fidelity.alone_round(None, None, trace, repeats=3)
    assert side["fixed"]["samples"] == pytest.approx([0.4, 0.5, 0.3]) and side["fixed"]["seconds"] == pytest.approx(0.4)
    assert side["ar"]["samples"] == pytest.approx([0.9, 0.8, 1.0]) and side["ar"]["seconds"] == pytest.approx(0.9)
    assert len(side["ar"]["passes"]) == 6
    # each pass spent 0.3 s inside its steps' model calls; the rest of its seconds were outside them
    assert side["fixed"]["outside_steps_passes"] == pytest.approx([0.2, 0.1, 0.3, 0.2, 0.0, 0.4])
    assert side["fixed"]["outside_steps_s"] == pytest.approx(0.2) and side["fixed"]["step_ms"] == pytest.approx(200)


def test_a_runs_split_reads_a_traces_steps_and_a_runs_events_alike():
    """Seconds inside the steps' model calls, and the median step after the first (which carries the prefill)."""
    import types

    as_dicts = [{"kind": "step", "draft_seconds": 0.0, "verify_seconds": 0.5, "prefill_seconds": 0.08},
                {"kind": "step", "draft_seconds": 0.02, "verify_seconds": 0.01},
                {"kind": "smc_cycle", "draft_seconds": 0.04, "verify_seconds": None}]
    as_events = [types.SimpleNamespace(**{k: v for k, v in event.items() if k != "kind"}) for event in as_dicts]
    for events in (as_dicts, as_events):
        split = page_fidelity.step_split(events)
        assert split["in_steps_s"] == pytest.approx(0.57) and split["step_ms"] == pytest.approx(35.0)
        assert split["prefill_s"] == pytest.approx(0.08)
    assert page_fidelity.step_split([]) == {"in_steps_s": 0, "step_ms": None, "prefill_s": 0}
    page = page_fidelity.page_methods({"busy_seconds": {"ar": 0.7},
                                       "results": {"ar": {"metrics": {"new_tokens": 3}, "token_ids": [1, 2, 3],
                                                          "events": as_dicts}}})
    assert page["ar"]["in_steps_s"] == pytest.approx(0.57) and page["ar"]["seconds"] == 0.7
