"""A sampling run records the target's log-probability (temperature 1) of every token it emits, read from the
rows that judged them, and, when asked (``keep_rows``: the page's PACER and SMC-SD runs), keeps those rows
whole, and the drafter's rows along them, so the page scores its outputs (PACER's oracle, SMC-SD's log-likelihood
and proposal divergence) with no target or drafter pass over them."""
from __future__ import annotations

import json

import pytest
import torch

from pacer_core import Autoregressive, FixedSpeculative, Pacer, method_table
from pacer_core.analysis import draft_teacher_forced_logits, target_teacher_forced_logits
from pacer_core.drafters import new_caches
from pacer_core.kvcache import CachedModel, RowRecorder
from pacer_core.decoders.smc import SMC
from pacer_core.preverifier import ConfidencePreVerifier
from pacer_core.settings import validate_settings
from pacer_core.testing.runs import run_result
from pacer_core.testing.tiny import tiny_pair

DECODERS = [Autoregressive(), FixedSpeculative(3), Pacer(1, 6, 0.3, ConfidencePreVerifier(), "submit")]


@pytest.mark.parametrize("decoder", DECODERS, ids=lambda decoder: decoder.name)
def test_each_emitted_tokens_log_probability_is_the_teacher_forced_one(decoder):
    target, drafter = tiny_pair(scale=3.0, draft_noise=0.4, eos_token_id=63)
    for seed, prompt in enumerate(([1, 2, 3], list(range(12)))):
        result = run_result(decoder, target, drafter, prompt, max_new_tokens=20, temperature=0.8, seed=seed)
        logits = target_teacher_forced_logits(target, drafter, prompt, result.token_ids)
        expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(result.token_ids)[:, None])[:, 0]
        assert len(result.target_log_probs) == len(result.token_ids)
        assert result.target_log_probs == pytest.approx(expected.tolist(), abs=1e-4)


@pytest.mark.parametrize("decoder", DECODERS, ids=lambda decoder: decoder.name)
def test_greedy_runs_record_none(decoder):
    result = run_result(decoder, *tiny_pair(), [1, 2, 3], max_new_tokens=8)
    assert result.target_log_probs == []


@pytest.fixture
def recording_tiny_caches(monkeypatch):
    """The tiny pair's torch caches keep their rows as llama.cpp's do (``kvcache.records_rows``): theirs match a
    teacher-forced pass to 1e-4 rather than bit for bit, which is all these tests of the bookkeeping need."""
    monkeypatch.setattr(CachedModel, "row_invariant_logits", True, raising=False)


def test_the_page_scores_only_the_outputs_whose_figures_need_the_distribution(monkeypatch, recording_tiny_caches):
    from pacer_core.ui import session as session_module

    scored = []
    original = session_module.output_logits

    def recording(target, drafter, prompt_ids, outputs, drafted=None, known_target_logits=None,
                  known_draft_logits=None):
        scored.append((set(outputs) - set(known_target_logits or {}), set(drafted or {}) - set(known_draft_logits or {})))
        return original(target, drafter, prompt_ids, outputs, drafted, known_target_logits, known_draft_logits)

    monkeypatch.setattr(session_module, "output_logits", recording)
    target, drafter = tiny_pair()
    session = session_module.RunSession(target, drafter, "t1 t2", {"max_new_tokens": 6, "temperature": 0.8},
                                        measure_ar=True)
    while not session.finished:
        session.advance()
    for _ in session.ar_steps():
        pass
    session.analyse()
    assert scored == [(set(), set())]   # PACER and SMC-SD kept the rows that judged and drafted their tokens
    assert set(session.logliks) == set(method_table.method_keys())
    assert session.oracle and session.proposal_kl is not None
    assert all(result.target_rows is None and result.draft_rows is None and result.complete_rows is None
               for result in session.results().values())   # freed once scored


def kept_rows_run(decoder, target, drafter, prompt, **settings):
    *_, result = decoder.run(target, drafter, prompt, validate_settings(**settings), keep_rows=True)
    return result


KEEPING_DECODERS = DECODERS + [SMC(4, 3, 0.9), SMC(3, 2, 0.5, draft_temperature=1.3)]


@pytest.mark.parametrize("decoder", KEEPING_DECODERS, ids=["ar", "fixed", "pacer", "smc-resampling", "smc-tempered"])
def test_the_kept_rows_are_the_teacher_forced_logits(decoder):
    """Row i of ``Result.target_rows`` is the target's logits predicting token i given the true prefix: for SMC-SD
    the output particle's own rows, traced back through every resampling (ESS threshold 0.9 resamples most
    cycles) and ending at an EOS when the particle has one."""
    target, drafter = tiny_pair(scale=3.0, draft_noise=0.4, eos_token_id=63)
    for seed, prompt in enumerate(([1, 2, 3], list(range(12)), [5, 9])):
        result = kept_rows_run(decoder, target, drafter, prompt, max_new_tokens=17, temperature=0.8, seed=seed)
        expected = target_teacher_forced_logits(target, drafter, prompt, result.token_ids)
        assert result.target_rows.shape == expected.shape
        assert torch.allclose(result.target_rows.float(), expected, atol=1e-4)


@pytest.mark.parametrize("decoder", KEEPING_DECODERS[1:], ids=["fixed", "pacer", "smc-resampling", "smc-tempered"])
def test_the_kept_draft_rows_are_the_teacher_forced_ones(decoder, recording_tiny_caches):
    """Row i of ``Result.draft_rows`` is the drafter's logits predicting token i given the true prefix, recorded by
    the run's own draft calls (SMC-SD: along the output particle's lineage, with full support); a run whose output
    ends with a token no draft call fed gets it from ``complete_rows``, which the page calls off the run's clock."""
    target, drafter = tiny_pair(scale=3.0, draft_noise=0.4, eos_token_id=63)
    completed = 0
    for seed, prompt in enumerate(([1, 2, 3], list(range(12)), [5, 9], [7, 7, 7, 7])):
        result = kept_rows_run(decoder, target, drafter, prompt, max_new_tokens=17, temperature=0.8, seed=seed)
        if result.complete_rows is not None:
            assert result.draft_rows is None
            result.complete_rows()
            completed += 1
        expected = draft_teacher_forced_logits(target, drafter, prompt, result.token_ids,
                                               full_support=decoder.name == "smc")
        assert result.draft_rows.shape == expected.shape
        assert torch.allclose(result.draft_rows.float(), expected, atol=1e-4)
    if decoder.name == "smc":
        assert completed        # 17 tokens in cycles of K + 1 end on a bonus no draft call fed


def test_a_recorded_row_goes_with_the_context_it_was_computed_from():
    """``RowRecorder``: a crop forgets the rows whose context it cut; the rows along a span need every position."""
    target, drafter = tiny_pair()
    _, draft = new_caches(target, drafter)
    recorder = RowRecorder(draft)
    recorder.forward([1, 2, 3, 4])                 # rows predicting positions 1..4
    assert recorder.rows_along(1, 5).shape[0] == 4
    recorder.crop(2)                               # holds 1, 2: the rows predicting 1 and 2 stay
    assert sorted(recorder.rows) == [1, 2] and recorder.rows_along(1, 4) is None
    recorder.complete([1, 2, 9, 8])                # feeds 9: the row predicting 3, from the new context
    fresh = draft_teacher_forced_logits(target, drafter, [1], [2, 9, 8])
    assert torch.allclose(recorder.rows_along(1, 4), fresh, atol=1e-4)


def test_smc_keeps_no_draft_rows_past_its_budget(monkeypatch, recording_tiny_caches):
    from pacer_core.decoders import smc

    target, drafter = tiny_pair(scale=3.0)
    kept = kept_rows_run(SMC(3, 2, 0.5), target, drafter, [1, 2, 3], max_new_tokens=10, temperature=0.8)
    assert kept.draft_rows is not None or kept.complete_rows is not None
    monkeypatch.setattr(smc, "DRAFT_ROWS_BUDGET", 3 * 10 * 4 * target.vocab_size - 1)   # one byte short
    kept = kept_rows_run(SMC(3, 2, 0.5), target, drafter, [1, 2, 3], max_new_tokens=10, temperature=0.8)
    assert kept.target_rows is not None and kept.draft_rows is None and kept.complete_rows is None


def test_torch_caches_keep_no_draft_rows_a_recording_would_round_otherwise():
    target, drafter = tiny_pair(scale=3.0)
    for decoder in (Pacer(1, 6, 0.3, ConfidencePreVerifier(), "submit"), SMC(3, 2, 0.5)):
        kept = kept_rows_run(decoder, target, drafter, [1, 2, 3], max_new_tokens=10, temperature=0.8)
        assert kept.target_rows is not None and kept.draft_rows is None and kept.complete_rows is None


def test_no_rows_unless_asked_and_never_serialised(recording_tiny_caches):
    target, drafter = tiny_pair(scale=3.0)
    plain = run_result(SMC(4, 3, 0.5), target, drafter, [1, 2, 3], max_new_tokens=10, temperature=0.8)
    assert plain.target_rows is None
    kept = kept_rows_run(Pacer(1, 6, 0.3, ConfidencePreVerifier(), "submit"), target, drafter, [1, 2, 3],
                         max_new_tokens=10, temperature=0.8)
    assert plain.draft_rows is None and plain.complete_rows is None
    assert kept.target_rows is not None and (kept.draft_rows is not None or kept.complete_rows is not None)
    serialised = kept.to_dict()
    assert not {"target_rows", "draft_rows", "complete_rows"} & set(serialised)
    assert json.loads(kept.to_json())["token_ids"] == kept.token_ids
