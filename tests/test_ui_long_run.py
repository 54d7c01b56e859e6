"""A 512-token run of every method (AR, fixed SD, PACER, SMC-SD) through the page's Run handler on a tiny
pair: it completes, every streamed column equals the full render of its events, and the exported JSON trace
holds exactly the events and tokens the columns showed."""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from pacer_core.drafters import Drafter
from pacer_core.models import Target, target_from_models
from pacer_core.testing.tiny import TinyTokenizer, noisy_copy
from pacer_core.method_table import column_keys
from pacer_core.ui import columns, handlers
from pacer_core.ui.page_types import AppContext, PageInputs
from pacer_core.ui.live import column_markup

pytestmark = pytest.mark.slow      # a few hundred steps of four decoders, interleaved
NEW_TOKENS = 512


def long_tiny_pair(vocab_size: int = 64, positions: int = 1024) -> tuple[Target, Drafter]:
    """tiny_pair's target and noisy-copy drafter with room for a prompt and 512 new tokens."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=positions,
                         eos_token_id=None, bos_token_id=None, pad_token_id=None, tie_word_embeddings=False)
    target_model = LlamaForCausalLM(config).eval()
    return target_from_models(target_model, noisy_copy(target_model, 0.3, 1), TinyTokenizer(vocab_size), "tiny-target",
                            "tiny-draft", use_chat_template=False)


@pytest.fixture(scope="module")
def finished_run():
    target, drafter = long_tiny_pair()
    context = AppContext(target, drafter)
    inputs = PageInputs("t1 t2 t3 t4 t5", {"max_new_tokens": NEW_TOKENS, "temperature": 0.8, "seed": 1},
                        chat=False, measure_ar=True)
    updates = list(handlers.run(context, inputs, frame_s=0.01))   # many replay frames: every lane is caught mid-race
    return context, updates


def test_every_method_reaches_512_tokens(finished_run):
    _, updates = finished_run
    session = updates[-1].session
    assert "run-done" in updates[-1].status
    results = session.results()
    assert set(results) == {"ar", *column_keys()}
    for method, result in results.items():
        assert len(result.token_ids) == NEW_TOKENS and result.finish_reason == "length", method
    assert max(len(run.events) for run in session.runs.values()) > 100


def test_streamed_columns_match_the_events(finished_run):
    """Each streamed running column is the full render of a prefix of its method's final events (the note
    under it aside: SMC-SD's changes once the run is scored)."""
    _, updates = finished_run
    session = updates[-1].session
    caught = set()
    for update in updates[1:-1]:
        for method, value in (update.columns or {}).items():
            if isinstance(value, dict):
                count = int(value["head"].split("steps</span> <b>")[1].split("<")[0])   # the steps counter
                shown = re.sub(r'<div class="col-note">[^<]*</div>', "", column_markup(value))
                assert shown == columns.column_html(method, session.runs[method].events[:count], running=True)
                caught.add(method)
    assert caught == set(column_keys())       # frames every 10 ms catch each of the three lanes running


def test_the_trace_export_matches_the_events(finished_run):
    _, updates = finished_run
    session, (trace_path, csv_path) = updates[-1].session, updates[-1].downloads
    trace = json.loads(Path(trace_path).read_text(encoding="utf-8"))
    runs = {"ar": session.ar} | dict(session.runs)
    assert set(trace["results"]) == set(runs)
    for method, run in runs.items():
        exported = trace["results"][method]
        assert exported["token_ids"] == run.result.token_ids
        events = json.loads(json.dumps([dataclasses.asdict(event) for event in run.events], ensure_ascii=False))
        assert exported["events"] == events, method
        if method != "smc":
            emitted = [token for event in exported["events"] for token in event["emitted_ids"]]
            assert emitted == run.result.token_ids
        assert trace["busy_seconds"][method] == pytest.approx(run.busy_seconds)
    assert Path(csv_path).read_text().count("\n") == 5       # header + four methods
