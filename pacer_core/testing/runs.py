"""Decoder runs for the tests: one run to the end (``run_result``, ``run_ids``), the greedy-identity check every
drafter and engine must pass (``greedy_rejections``: greedy fixed SD and PACER return exactly AR's tokens), and the
outputs of many seeded runs counted for a chi-square test (``sample_counts``, ``p_value_against_target``)."""
from __future__ import annotations

from collections import Counter

from ..decoders import Autoregressive, FixedSpeculative, Pacer
from .enumeration import chi_square_p_value, target_sequence_distribution
from ..events import Result
from ..preverifier import ConfidencePreVerifier
from ..settings import validate_settings

GREEDY_PROMPTS = ([1, 2, 3], [7, 7, 7, 7, 9], list(range(20)))


def run_result(decoder, target, drafter, prompt_ids: list[int], **settings) -> Result:
    """The Result of one run of ``decoder`` on ``pair`` drafting with ``drafter``, with these settings (the events
    consumed)."""
    *_, result = decoder.run(target, drafter, prompt_ids, validate_settings(**settings))
    return result


def run_ids(decoder, target, drafter, prompt_ids: list[int], **settings) -> list[int]:
    return run_result(decoder, target, drafter, prompt_ids, **settings).token_ids


def greedy_decoders() -> list:
    """Fixed SD at three draft lengths and PACER in both modes, greedy."""
    return [FixedSpeculative(gamma) for gamma in (1, 3, 6)] + [
        Pacer(1, 8, 0.3, ConfidencePreVerifier(), "submit"), Pacer(2, 16, 0.9, ConfidencePreVerifier(), "discard")]


def greedy_rejections(target, drafter, prompts=GREEDY_PROMPTS, max_new_tokens: int = 40, also=()) -> int:
    """Assert that every greedy decoder (and the decoders ``also`` gives) returns AR's tokens on each prompt with
    ``drafter``; the drafted tokens the target rejected on the way (so a test can require that
    verification did some work)."""
    rejected, decoders = 0, greedy_decoders() + list(also)
    for prompt in prompts:
        reference = run_ids(Autoregressive(), target, drafter, prompt, max_new_tokens=max_new_tokens)
        for decoder in decoders:
            result = run_result(decoder, target, drafter, prompt, max_new_tokens=max_new_tokens)
            assert result.token_ids == reference, (decoder.info(), prompt)
            rejected += result.metrics.drafted_tokens - result.metrics.accepted_tokens
    return rejected


def sample_counts(decoder, target, drafter, prompt_ids: list[int], max_new_tokens: int, runs: int, **settings) -> Counter:
    """How often each output came out of ``runs`` runs seeded 0..runs-1."""
    counts = Counter()
    for seed in range(runs):
        output = run_ids(decoder, target, drafter, prompt_ids, max_new_tokens=max_new_tokens, seed=seed, **settings)
        counts[tuple(output)] += 1
    return counts


def p_value_against_target(decoder, target, drafter, prompt_ids: list[int], max_new_tokens: int, runs: int,
                           **settings) -> float:
    """The chi-square p-value of ``runs`` seeded outputs against the torch target's exact distribution."""
    truth = target_sequence_distribution(target.model, prompt_ids, max_new_tokens, **settings)
    counts = sample_counts(decoder, target, drafter, prompt_ids, max_new_tokens, runs, **settings)
    return chi_square_p_value(counts, truth)
