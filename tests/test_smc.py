"""SMC-SD decoder on tiny random Llamas: weights against brute force, caches, EOS, seeds, and a small
total-variation check (the full one is benchmarks/smc_tv.py)."""
import threading
from collections import Counter

import pytest
import torch

from pacer_core.api import generate
from pacer_core.decoders.smc import SMC, start_particles, token_log_probs
from pacer_core.events import Result, SMCCycleEvent
from pacer_core.models import target_from_models
from pacer_core.settings import DecodeSettings, SettingsError
from pacer_core.testing.enumeration import target_sequence_distribution, total_variation
from pacer_core.testing.tiny import TinyTokenizer, tiny_pair

PROMPT = [1, 2, 3]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models run ~100x faster on one thread than on two contended ones."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def tiny():
    """(the pair, its drafter): the models every test of the module shares."""
    return tiny_pair(vocab_size=32, scale=3.0, draft_noise=0.5)


def run_smc(target, drafter, prompt=PROMPT, n_particles=4, draft_len=3, ess_threshold=0.5, draft_temperature=None,
            power=1.0, final="sample", cancel=None, **settings):
    settings = DecodeSettings(**({"temperature": 1.0, "max_new_tokens": 8} | settings))
    decoder = SMC(n_particles, draft_len, ess_threshold, draft_temperature, power, final)
    items = list(decoder.run(target, drafter, list(prompt), settings, cancel))
    return items[:-1], items[-1]


@torch.inference_mode()
def full_log_probs(model, ids, temperature):
    """[len(ids), V] log-probs of every next token, from one cache-free forward pass."""
    return token_log_probs(model(input_ids=torch.tensor([ids])).logits[0], temperature)


def test_generate_through_the_api(target, drafter):
    result = generate(target, drafter, "smc", "t1 t2 t3", temperature=1.0, max_new_tokens=10, n_particles=3, draft_len=2)
    assert isinstance(result, Result) and result.method == "smc"
    assert result.info["approximate"] is True
    assert result.metrics.alpha is None
    assert len(result.token_ids) == 10 and result.metrics.new_tokens == 10
    assert result.metrics.target_calls == 1 + 4          # prefill + cycles of 3, 3, 3, 1 tokens
    assert result.metrics.tau == pytest.approx(10 / 5)
    assert all(isinstance(event, SMCCycleEvent) for event in result.events)


def test_temperature_zero_is_refused(target, drafter):
    with pytest.raises(SettingsError, match="temperature"):
        run_smc(target, drafter, temperature=0.0)


def test_every_particle_grows_by_k_plus_one_and_the_last_cycle_fits_the_budget(target, drafter):
    events, result = run_smc(target, drafter, n_particles=5, draft_len=3, max_new_tokens=10)
    assert [len(ids) for event in events for ids in event.particle_token_ids] == [4] * 5 + [4] * 5 + [2] * 5
    for event in events:
        assert len(event.log_weights) == len(event.weights) == len(event.ancestors) == len(event.finished) == 5
        assert sum(event.weights) == pytest.approx(1.0)
        assert 1.0 - 1e-9 <= event.ess <= 5 + 1e-9
        assert event.resampled == (event.ess < 0.5 * 5)
        if not event.resampled:
            assert event.ancestors == list(range(5))
    assert [event.total_new_tokens for event in events] == [4, 8, 10]
    assert events[-1].finished == [True] * 5
    assert len(result.token_ids) == 10 and result.finish_reason == "length"
    assert result.metrics.draft_calls == 1 + 3 + 3 + 1    # prefill + K per cycle (K' = 1 last)


def test_draft_equal_to_target_gives_zero_increments_and_no_resampling(target):
    same, same_drafter = target_from_models(target.model, target.model, TinyTokenizer(32), use_chat_template=False)
    events, _ = run_smc(same, same_drafter, n_particles=6, draft_len=4, max_new_tokens=15, temperature=0.8)
    for event in events:
        assert max(abs(value) for value in event.log_weights) < 1e-4
        assert not event.resampled
        assert event.ess == pytest.approx(6, abs=1e-6)


@pytest.mark.parametrize("temperature, draft_temperature, power", [(1.0, None, 1.0), (1.3, 0.7, 0.6)])
def test_log_weights_equal_brute_force(target, drafter, temperature, draft_temperature, power):
    """No resampling (threshold 0): logw_i = Σ over every drafted token of a·log p_T − log q_Td, with both
    log-probs recomputed from cache-free full-sequence forward passes of the two models."""
    draft_len, cycles = 3, 3
    events, result = run_smc(target, drafter, n_particles=4, draft_len=draft_len, ess_threshold=0.0,
                             draft_temperature=draft_temperature, power=power, temperature=temperature,
                             max_new_tokens=cycles * (draft_len + 1), seed=5)
    assert len(events) == cycles
    draft_temperature = draft_temperature or temperature
    for particle, continuation in enumerate(result.info["particle_texts"]):
        ids = PROMPT + [int(part[1:]) for part in continuation.split()]
        target_log_probs = full_log_probs(target.model, ids, temperature)
        draft_log_probs = full_log_probs(drafter.model, ids, draft_temperature)
        expected = 0.0
        for step, event in enumerate(events):
            for k in range(draft_len):                          # the bonus (position K) is not weighted
                position = len(PROMPT) + step * (draft_len + 1) + k
                token = ids[position]
                expected += power * float(target_log_probs[position - 1, token]) - float(draft_log_probs[position - 1, token])
            assert event.log_weights[particle] == pytest.approx(expected, abs=2e-4)


def test_one_cycle_weight_with_forced_resampling_then_continues_correctly(target, drafter):
    """threshold 1: resample every cycle; each cycle's log-weight is then that cycle's increment alone,
    computed on the ancestor's (reordered) history."""
    draft_len = 2
    events, result = run_smc(target, drafter, n_particles=4, draft_len=draft_len, ess_threshold=1.0, max_new_tokens=9,
                             seed=3)
    histories = [list(PROMPT) for _ in range(4)]
    for step, event in enumerate(events):
        for particle, new_ids in enumerate(event.particle_token_ids):
            ids = histories[particle] + new_ids
            target_log_probs = full_log_probs(target.model, ids, 1.0)
            draft_log_probs = full_log_probs(drafter.model, ids, 1.0)
            start = len(histories[particle])
            expected = sum(float(target_log_probs[start + k - 1, ids[start + k]] - draft_log_probs[start + k - 1, ids[start + k]])
                           for k in range(min(draft_len, len(new_ids) - 1)))
            assert event.log_weights[particle] == pytest.approx(expected, abs=2e-4)
            histories[particle] = ids
        histories = [list(histories[ancestor]) for ancestor in event.ancestors]
    assert any(event.resampled for event in events)
    chosen = result.info["chosen_particle"]
    assert PROMPT + result.token_ids == histories[chosen]


def test_kv_reorder_matches_recomputation(target, drafter):
    """After a cycle and a resampling, the cached continuation gives the logits a cache-free forward over
    the reordered histories gives, for both models."""
    decoder = SMC(4, 3, 0.5)
    settings = DecodeSettings(temperature=1.0, max_new_tokens=20, seed=11)
    state = start_particles(target, drafter, PROMPT, 4)
    generator = torch.Generator().manual_seed(0)
    decoder.cycle(state, 3, settings, torch.zeros(0, dtype=torch.long), 0, generator)
    assert len(set(map(tuple, state.histories.tolist()))) == 4, "particles should differ before resampling"
    ancestors = torch.tensor([2, 0, 2, 3])
    expected_histories = state.histories[ancestors]
    state.reorder(ancestors)
    assert torch.equal(state.histories, expected_histories)
    next_tokens = torch.tensor([[5], [6], [7], [8]])
    for model in (state.target, state.draft):
        cached_length = model.length
        cached = model.forward(torch.cat([state.histories[:, model.length:], next_tokens], dim=1))[:, -1]
        with torch.inference_mode():
            recomputed = model.model(input_ids=torch.cat([state.histories, next_tokens], dim=1)).logits[:, -1]
        assert torch.allclose(cached, recomputed, atol=1e-4), (cached - recomputed).abs().max()
        model.crop(cached_length)
    # the second cycle runs on the reordered caches and still matches brute force
    log_weights_before = state.log_weights.clone()
    decoder.cycle(state, 2, settings, torch.zeros(0, dtype=torch.long), 0, generator)
    for row in range(4):
        ids = state.histories[row].tolist()
        target_log_probs = full_log_probs(target.model, ids, 1.0)
        draft_log_probs = full_log_probs(drafter.model, ids, 1.0)
        start = len(ids) - 3
        expected = float(log_weights_before[row]) + sum(
            float(target_log_probs[start + k - 1, ids[start + k]] - draft_log_probs[start + k - 1, ids[start + k]])
            for k in range(2))
        assert float(state.log_weights[row]) == pytest.approx(expected, abs=2e-4)


def test_finished_particles_stop_changing():
    eos_target, eos_drafter = tiny_pair(vocab_size=6, scale=3.0, draft_noise=0.5, eos_token_id=0)
    saw_finished = False
    for seed in range(6):
        events, result = run_smc(eos_target, eos_drafter, n_particles=4, draft_len=3, ess_threshold=0.0, max_new_tokens=24,
                                 seed=seed)
        finished_at = {}
        for step, event in enumerate(events):
            for particle, done in enumerate(event.finished):
                if particle in finished_at:
                    assert done
                    assert event.particle_token_ids[particle] == []
                    assert event.log_weights[particle] == events[finished_at[particle]].log_weights[particle]
                elif done:
                    finished_at[particle] = step
                    ids = event.particle_token_ids[particle]
                    assert 0 not in ids[:-1], "nothing after an EOS"
        for particle, text in enumerate(result.info["particle_texts"]):
            ids = [int(part[1:]) for part in text.split()]
            assert 0 not in ids[:-1]
            assert ids[-1] == 0 or len(ids) == 24
        if result.token_ids[-1] == 0:
            assert result.finish_reason == "eos"
            saw_finished = True
    assert saw_finished


def test_seeded_runs_are_reproducible(target, drafter):
    first_events, first = run_smc(target, drafter, n_particles=4, seed=9, max_new_tokens=12)
    second_events, second = run_smc(target, drafter, n_particles=4, seed=9, max_new_tokens=12)
    assert first.token_ids == second.token_ids
    assert [e.log_weights for e in first_events] == [e.log_weights for e in second_events]
    assert [e.ancestors for e in first_events] == [e.ancestors for e in second_events]
    _, other = run_smc(target, drafter, n_particles=4, seed=10, max_new_tokens=12)
    assert other.info["particle_texts"] != first.info["particle_texts"]


def test_cancel_and_argmax_final(target, drafter):
    cancel = threading.Event()
    cancel.set()
    events, result = run_smc(target, drafter, cancel=cancel)
    assert events == [] and result.finish_reason == "cancelled" and result.token_ids == []
    events, result = run_smc(target, drafter, final="argmax", ess_threshold=0.0, seed=2)
    assert result.info["chosen_particle"] == max(range(4), key=lambda i: events[-1].log_weights[i])


@pytest.mark.statistical
def test_total_variation_shrinks_with_particles():
    """Small version of benchmarks/smc_tv.py: vocab 6, first 2 tokens, one cycle (K=1: a drafted token
    weighted by p/q, then the bonus). N=1 is the draft's first token: TV ≈ 0.47 by construction here."""
    tv_target, tv_drafter = tiny_pair(vocab_size=6, scale=10.0, draft_noise=0.5)
    exact = target_sequence_distribution(tv_target.model, [1, 2], 2, 1.0)
    runs = 300
    tv = {}
    for n_particles in (1, 16):
        decoder = SMC(n_particles, 1, 0.5, None, 1.0, "sample")
        counts = Counter()
        for seed in range(runs):
            *_, result = decoder.run(tv_target, tv_drafter, [1, 2], DecodeSettings(temperature=1.0, max_new_tokens=2, seed=seed))
            counts[tuple(result.token_ids)] += 1
        tv[n_particles] = total_variation(counts, exact)
    # sampling noise of 300 exact draws over 36 outcomes is ~0.06-0.1; N=1 sits near 0.47
    assert tv[1] > 0.35
    assert tv[16] < 0.2 and tv[16] < tv[1] - 0.2, tv


def test_target_log_likelihood_of_an_output_matches_step_by_step_decoding(target, drafter):
    """The score the benchmark and the UI put next to SMC-SD's output: Σ log p_1(token | prefix) of the
    generated tokens, checked against the target run one token at a time with its KV cache."""
    from pacer_core.analysis import target_log_likelihood
    from pacer_core.kvcache import CachedModel

    _, result = run_smc(target, drafter, max_new_tokens=10, seed=2)
    cached = CachedModel(target.model, target.vocab_size)
    logits = cached.forward(PROMPT)[0, -1]
    expected = 0.0
    for token in result.token_ids:
        expected += float(torch.log_softmax(logits.double(), -1)[token])
        logits = cached.forward([token])[0, -1]
    total, count = target_log_likelihood(target, drafter, PROMPT, result.token_ids)
    assert count == len(result.token_ids) == 10
    assert total == pytest.approx(expected, abs=1e-3)
    assert target_log_likelihood(target, drafter, PROMPT, []) == (0.0, 0)


def test_proposal_divergence_matches_step_by_step_kl(target, drafter):
    """The divergence the benchmark reports next to SMC-SD's error: Σ_t KL(p_T(.|prefix_t) || q_Td(.|prefix_t))
    along an output, checked against both models run one token at a time with their KV caches."""
    from pacer_core.analysis import proposal_divergence
    from pacer_core.kvcache import CachedModel

    output = run_smc(target, drafter, max_new_tokens=6, seed=3)[1].token_ids
    target_cache, draft = CachedModel(target.model, target.vocab_size), CachedModel(drafter.model, target.vocab_size)
    target_logits, draft_logits = target_cache.forward(PROMPT)[0, -1], draft.forward(PROMPT)[0, -1]
    expected = 0.0
    for token in output:
        target_probs = torch.softmax(target_logits.double() / 0.8, -1)
        draft_probs = torch.softmax(draft_logits.double() / 1.3, -1)
        expected += float((target_probs * (target_probs / draft_probs).log()).sum())
        target_logits, draft_logits = target_cache.forward([token])[0, -1], draft.forward([token])[0, -1]
    total, count = proposal_divergence(target, drafter, PROMPT, output, temperature=0.8, draft_temperature=1.3)
    assert count == len(output) == 6 and expected > 0.01
    assert total == pytest.approx(expected, rel=1e-3)
    same, same_drafter = target_from_models(target.model, target.model, target.tokenizer, check_tokenizer=False)
    assert proposal_divergence(same, same_drafter, PROMPT, output, temperature=0.8)[0] == pytest.approx(0.0, abs=1e-6)
    assert proposal_divergence(target, drafter, PROMPT, [], temperature=0.8) == (0.0, 0)


@pytest.mark.parametrize("n_particles", [2, 3, 5])
def test_resampling_follows_the_line_inside_the_ess_range(target, drafter, n_particles):
    """Every cycle resamples exactly when its ESS is below 1 + t·(N − 1) (at N = 2 the old t·N line was the ESS
    floor and could never be crossed), and the run's dead-particle report is the pure count over its cycles."""
    from pacer_core.particles import dead_particle_cycles, resample_line
    events, result = run_smc(target, drafter, n_particles=n_particles, draft_len=3, ess_threshold=0.5,
                             max_new_tokens=24, seed=4)
    for event in events:
        assert event.resampled == (event.ess < resample_line(n_particles, 0.5))
    dead = result.info["dead_particles"]
    assert (dead["cycles"], dead["rows"]) == dead_particle_cycles([e.weights for e in events],
                                                                  [e.resampled for e in events], 0.01)
    assert dead["all_rows"] == n_particles * len(events) and dead["weight_floor"] == 0.01
