"""The same prompt, settings and seed give the same tokens on CPU, for every decoder; cancel stops a run."""
import threading

import pytest

from pacer_core import method_table
from pacer_core import generate, stream
from pacer_core.testing.tiny import tiny_pair


@pytest.mark.parametrize("method", method_table.method_keys())
@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_same_seed_same_tokens(method, temperature):
    if method == "smc" and temperature == 0:
        pytest.skip("SMC-SD needs a temperature above 0")
    target, drafter = tiny_pair(scale=4.0)
    runs = [generate(target, drafter, method, "t3 t4 t5", max_new_tokens=24, temperature=temperature, seed=11).token_ids
            for _ in range(2)]
    assert runs[0] == runs[1] and len(runs[0]) == 24


@pytest.mark.parametrize("method", method_table.method_keys())
def test_the_first_pass_reports_what_the_run_spent_before_it(method):
    """Fresh caches and the prompt's prefill are reported once, on the first event (the timeline's first bar), and
    every event's seconds together stay within the run's."""
    target, drafter = tiny_pair(scale=4.0)
    result = generate(target, drafter, method, "t3 t4 t5", max_new_tokens=12, temperature=0.9, seed=3)
    prefills = [event.prefill_seconds for event in result.events]
    assert len(prefills) > 1 and prefills[0] > 0 and not any(prefills[1:])
    accounted = sum(event.prefill_seconds + event.draft_seconds + event.verify_seconds for event in result.events)
    assert accounted <= result.metrics.seconds


def test_different_seeds_differ_when_sampling():
    target, drafter = tiny_pair(scale=1.0)
    outputs = {tuple(generate(target, drafter, "fixed", "t3", max_new_tokens=16, temperature=1.0, seed=s).token_ids)
               for s in range(5)}
    assert len(outputs) > 1


@pytest.mark.parametrize("method", method_table.method_keys())
def test_cancel_stops_within_one_step(method):
    target, drafter = tiny_pair(scale=4.0)
    cancel = threading.Event()
    steps = 0
    for item in stream(target, drafter, method, "t1 t2", cancel=cancel, max_new_tokens=200, temperature=0.8):
        if item.kind == "result":
            result = item
            break
        steps += 1
        if steps == 2:
            cancel.set()
    assert steps == 2 and result.finish_reason == "cancelled"
    assert generate(target, drafter, method, "t1 t2", max_new_tokens=5, temperature=0.8).finish_reason in ("length", "eos")
