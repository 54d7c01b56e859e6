"""A sampling run records the target's log-probability (temperature 1) of every token it emits, read from the
rows that judged them, so the page scores only the outputs whose figures need the target's whole distribution
(PACER's oracle, SMC-SD's proposal divergence) with another target pass."""
from __future__ import annotations

import pytest
import torch

from pacer_core import Autoregressive, FixedSpeculative, Pacer
from pacer_core.analysis import target_teacher_forced_logits
from pacer_core.preverifier import ConfidencePreVerifier
from pacer_core.testing.runs import run_result
from pacer_core.testing.tiny import tiny_pair

DECODERS = [Autoregressive(), FixedSpeculative(3), Pacer(1, 6, 0.3, ConfidencePreVerifier(), "submit")]


@pytest.mark.parametrize("decoder", DECODERS, ids=lambda decoder: decoder.name)
def test_each_emitted_tokens_log_probability_is_the_teacher_forced_one(decoder):
    pair = tiny_pair(scale=3.0, draft_noise=0.4, eos_token_id=63)
    for seed, prompt in enumerate(([1, 2, 3], list(range(12)))):
        result = run_result(decoder, pair, prompt, max_new_tokens=20, temperature=0.8, seed=seed)
        logits = target_teacher_forced_logits(pair, pair.drafter, prompt, result.token_ids)
        expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(result.token_ids)[:, None])[:, 0]
        assert len(result.target_log_probs) == len(result.token_ids)
        assert result.target_log_probs == pytest.approx(expected.tolist(), abs=1e-4)


@pytest.mark.parametrize("decoder", DECODERS, ids=lambda decoder: decoder.name)
def test_greedy_runs_record_none(decoder):
    result = run_result(decoder, tiny_pair(), [1, 2, 3], max_new_tokens=8)
    assert result.target_log_probs == []


def test_the_page_scores_only_the_outputs_whose_figures_need_the_distribution(monkeypatch):
    from pacer_core.ui import session as session_module

    scored = []
    original = session_module.output_logits

    def recording(pair, drafter, prompt_ids, outputs, drafted=None):
        scored.append(set(outputs))
        return original(pair, drafter, prompt_ids, outputs, drafted)

    monkeypatch.setattr(session_module, "output_logits", recording)
    pair = tiny_pair()
    session = session_module.RunSession(pair, pair.drafter, "t1 t2", {"max_new_tokens": 6, "temperature": 0.8},
                                        measure_ar=True)
    while not session.finished:
        session.advance()
    for _ in session.ar_steps():
        pass
    session.analyse()
    assert scored == [{"pacer", "smc"}]
    assert set(session.logliks) == {"ar", "fixed", "pacer", "smc"}
    assert session.oracle and session.proposal_kl is not None
