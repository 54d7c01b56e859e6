"""The feature-head drafter (EAGLE-style, reads the target's hidden state): its cache, its training
objective, and exactness of every decoder that drafts with it — full and reduced output vocabulary."""
import itertools
from collections import Counter

import pytest
import torch

from pacer_core import Autoregressive, FixedSpeculative, Pacer, validate_settings
from pacer_core.decoders.oracle import OracleLength
from pacer_core.decoders.smc import SMC
from pacer_core.drafters import new_caches
from pacer_core.drafters.feature_head import random_head_drafter
from pacer_core.preverifier import ConfidencePreVerifier
from pacer_core.training.head_loss import head_losses, second_pass_mask
from pacer_core.testing.enumeration import chi_square_p_value, target_sequence_distribution
from pacer_core.testing.runs import run_result
from pacer_core.testing.tiny import tiny_pair

pytestmark = pytest.mark.slow      # trains a head per module (~10 s); the fast tier keeps tests/test_cuda_tier.py's head check

SIGNIFICANCE = 1e-3
PROMPTS = [[1, 2, 3], [5, 9], [7, 7, 7, 7, 9], [11, 40, 2, 63, 8, 0], list(range(20))]


@torch.no_grad()
def sampled_sequences(target, count: int, length: int, seed: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    sequences = []
    for _ in range(count):
        ids = [int(torch.randint(0, target.vocab_size, (1,), generator=generator))]
        for _ in range(length - 1):
            probs = torch.softmax(target.model(input_ids=torch.tensor([ids])).logits[0, -1] / 1.5, -1)
            ids.append(int(torch.multinomial(probs, 1, generator=generator)))
        sequences.append(ids)
    return sequences


@torch.no_grad()
def teacher_batch(target, sequences) -> dict:
    ids = torch.tensor(sequences)
    captured = {}
    hook = target.model.get_output_embeddings().register_forward_pre_hook(
        lambda module, args: captured.__setitem__("features", args[0]))
    target.model(input_ids=ids)
    hook.remove()
    return {"ids": ids, "features": captured["features"].float(), "valid": torch.ones_like(ids, dtype=torch.bool)}


def fit_head(target, kept_ids=None, steps: int = 150, seed: int = 0):
    """A head trained for a few seconds on the tiny target's own samples, with the project's objective."""
    drafter = random_head_drafter(target.model, target.vocab_size, kept_ids, seed=seed, scale=0.5)
    head = drafter.head.train()
    batch = teacher_batch(target, sampled_sequences(target, 24, 24, seed))
    output_rows = drafter.output_rows.float()
    optimizer = torch.optim.Adam(head.parameters(), lr=3e-3)
    history = []
    for _ in range(steps):
        loss, stats = head_losses(head, batch, target.model.get_input_embeddings(), output_rows, 0.1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append(stats)
    head.eval()
    return drafter, history


@pytest.fixture(scope="module")
def head_pair():
    target, _ = tiny_pair(scale=6.0, eos_token_id=63)
    drafter, history = fit_head(target)
    return target, drafter, history


def test_training_objective_teaches_the_head(head_pair):
    *_, history = head_pair
    assert history[-1]["agree1"] > history[0]["agree1"] + 0.2
    assert history[-1]["agree1"] > 0.4 and history[-1]["agree2"] > 0.25


def test_second_pass_mask_sees_real_prefix_and_itself():
    mask = second_pass_mask(4)      # 3 own-prediction queries at positions 1..3, 4 real keys, 3 own keys
    assert mask.tolist() == [[True, False, False, False, True, False, False],
                             [True, True, False, False, False, True, False],
                             [True, True, True, False, False, False, True]]


def test_greedy_speculative_decoders_equal_ar_with_a_head(head_pair):
    target, drafter, _ = head_pair
    # at threshold 0 no block fails, so on_fail never acts: (0.0, "discard") would repeat (0.0, "submit")
    decoders = [FixedSpeculative(g) for g in (1, 3, 6)] + [
        Pacer(block, max_len, threshold, ConfidencePreVerifier(), on_fail)
        for block, max_len, threshold, on_fail in itertools.product((1, 3), (8,), (0.0, 0.5), ("submit", "discard"))
        if threshold > 0 or on_fail == "submit"]
    accepted = 0
    for prompt in PROMPTS:
        reference = run_result(Autoregressive(), target, drafter, prompt, max_new_tokens=30).token_ids
        for decoder in decoders + [OracleLength(reference, 8)]:
            result = run_result(decoder, target, drafter, prompt, max_new_tokens=30)
            assert result.token_ids == reference, (decoder.info(), prompt)
            accepted += result.metrics.accepted_tokens
    assert accepted > 100   # the head drafts tokens the target accepts, so both paths are exercised


@pytest.mark.slow   # trains a second head; the fast tier checks a reduced-vocabulary head in test_cuda_tier
def test_greedy_identity_with_a_reduced_vocabulary_head():
    target, _ = tiny_pair(scale=6.0, eos_token_id=63)
    drafter, _ = fit_head(target, kept_ids=list(range(0, 64, 2)) + [63])
    for prompt in PROMPTS:
        reference = run_result(Autoregressive(), target, drafter, prompt, max_new_tokens=30).token_ids
        for decoder in (FixedSpeculative(4), Pacer(1, 6, 0.3)):
            assert run_result(decoder, target, drafter, prompt, max_new_tokens=30).token_ids == reference


def test_head_cache_depends_only_on_the_committed_sequence(head_pair):
    """Drafting, verifying and rolling back leaves the head exactly where a fresh run over the committed
    sequence would be: stale entries built from predicted states are rebuilt from the real ones."""
    target, drafter, _ = head_pair
    sequence = [4, 8, 15, 16, 23]
    target_cache, head = new_caches(target, drafter)
    target_cache.forward(sequence[:-1])
    head.feed_sequence(sequence)
    drafted = []
    for _ in range(3):
        drafted.append(int(head.feed_sequence(sequence + drafted)[-1].argmax()))
    target_cache.feed_sequence(sequence, drafted)
    committed = sequence + drafted[:1] + [42]          # one accepted, then a corrected token
    target_cache.crop(len(committed) - 1)
    head.crop(min(head.length, len(committed) - 1))
    logits_after = head.feed_sequence(committed)[-1]
    fresh_target, fresh_head = new_caches(target, drafter)
    fresh_target.forward(committed[:-1])
    fresh_logits = fresh_head.feed_sequence(committed)[-1]
    assert torch.allclose(logits_after, fresh_logits, atol=1e-5)


def test_reduced_head_gives_zero_probability_off_its_ids():
    target, _ = tiny_pair()
    drafter = random_head_drafter(target.model, target.vocab_size, kept_ids=[1, 5, 9], seed=2)
    target_cache, head = new_caches(target, drafter)
    target_cache.forward([3, 4])
    probs = torch.softmax(head.feed_sequence([3, 4, 6])[-1], -1)
    assert set(torch.nonzero(probs).flatten().tolist()) == {1, 5, 9}


@pytest.fixture(scope="module")
def five_token_pair():
    return tiny_pair(vocab_size=5, scale=6.0, draft_noise=None, target_layers=1, hidden=16)


@pytest.mark.statistical
def test_sampling_with_a_reduced_vocabulary_head_matches_the_target(five_token_pair):
    """Fixed SD drafting with a head that proposes only ids 0, 2, 3 (q = 0 elsewhere): the output is still the
    target's distribution. One test for the head: the full-vocabulary head and PACER with a head run the same
    judge, whose math (q with zeros included) tests/test_sampling.py checks exactly; PACER's own wiring has
    its chi-square test in tests/test_exactness.py. 1000 runs: the power reasoning there applies (same pair
    shape, 125 outcomes)."""
    target, _ = five_token_pair
    drafter = random_head_drafter(target.model, target.vocab_size, [0, 2, 3], seed=5, scale=2.0)
    truth = target_sequence_distribution(target.model, [1, 2], 3, temperature=1.0)
    counts = Counter(tuple(run_result(FixedSpeculative(2), target, drafter, [1, 2], max_new_tokens=3, seed=seed,
                                      temperature=1.0).token_ids) for seed in range(1000))
    assert chi_square_p_value(counts, truth) > SIGNIFICANCE


def test_smc_runs_on_a_head_and_resampling_copies_its_rows(head_pair):
    target, drafter, _ = head_pair
    result = run_result(SMC(4, 3, ess_threshold=1.0), target, drafter, [1, 2, 3], max_new_tokens=20, temperature=1.0,
                        seed=3)
    assert 0 < len(result.token_ids) <= 20
    assert result.info["resamples"] > 0
    target_cache, head = new_caches(target, drafter)
    rows = torch.tensor([[4, 8, 15], [16, 23, 42]])
    target_cache.forward(rows[:, :-1])
    head.forward(rows)
    target_cache.reorder(torch.tensor([1, 1]))
    head.reorder(torch.tensor([1, 1]))
    copied = head.forward(torch.tensor([[7], [7]]))[:, -1]
    fresh_target, fresh_head = new_caches(target, drafter)
    fresh_target.forward(rows[1:, :-1])
    fresh_head.forward(rows[1:])
    expected = fresh_head.forward(torch.tensor([[7]]))[0, -1]
    assert torch.allclose(copied[0], expected, atol=1e-5) and torch.allclose(copied[1], expected, atol=1e-5)


def test_oracle_lengths_of_a_head_match_a_long_fixed_draft(head_pair):
    from pacer_core.analysis import attach_oracle
    target, drafter, _ = head_pair
    *_, result = FixedSpeculative(8).run(target, drafter, [1, 2, 3], validate_settings(max_new_tokens=40))
    lengths = attach_oracle(target, drafter, [1, 2, 3], result, max_len=8)
    full_drafts = [event for event in result.events if event.n_drafted == 8]
    assert full_drafts and any(event.n_accepted > 0 for event in full_drafts)
    assert len(lengths) == len(result.events)
    for event, length in zip(result.events, lengths):     # a draft cut short is a prefix of the full one
        assert event.n_accepted == min(event.n_drafted, int(length)), (event.step, event.n_drafted, length)


def test_smc_proposal_of_a_reduced_head_keeps_mass_on_every_id():
    from pacer_core.drafters.feature_head import OFF_VOCABULARY_MASS
    target, _ = tiny_pair()
    drafter = random_head_drafter(target.model, target.vocab_size, kept_ids=[1, 5, 9], seed=2)
    target_cache, head = new_caches(target, drafter, full_support=True)
    target_cache.forward([3, 4])
    probs = torch.softmax(head.feed_sequence([3, 4, 6])[-1], -1)
    assert bool((probs > 0).all())
    off = probs[[i for i in range(target.vocab_size) if i not in (1, 5, 9)]].sum()
    assert abs(float(off) - OFF_VOCABULARY_MASS) < 1e-5


def test_feature_folders_weight_a_folder_by_repetition():
    from pacer_core.training.head import feature_folders

    assert feature_folders("features-chat*3, features") == [("features-chat", 3), ("features", 1)]
    for bad in ("chat*0", "chat*x", "*2", "chat,"):
        with pytest.raises(SystemExit, match="FOLDER"):
            feature_folders(bad)
