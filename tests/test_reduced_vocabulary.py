"""An independent draft scoring only its most frequent ids (pacer_core/drafters/vocabulary.py): q = 0 off the
kept ids for the exact methods (greedy identity and a chi-square test), a small shared mass there for SMC-SD,
and the frequency ranking that chooses the ids."""
from collections import Counter

import pytest
import torch

from pacer_core import Autoregressive, FixedSpeculative, Pacer, validate_settings
from pacer_core.decoders.smc import SMC
from pacer_core.drafters import IndependentDrafter, LoadedDrafters, load_drafter, new_caches, valid_drafter_name
from pacer_core.drafters.vocabulary import (OFF_VOCABULARY_MASS, full_vocabulary_logits, load_frequent_ids,
                                            save_frequent_ids)
from pacer_core.kvcache import CachedModel
from pacer_core.preverifier import ConfidencePreVerifier
from pacer_core.testing.enumeration import chi_square_p_value, target_sequence_distribution
from pacer_core.testing.runs import run_ids
from pacer_core.testing.tiny import tiny_pair
from pacer_core.training.vocabulary import coverage, rank_ids


def reduced(target, drafter, kept_ids) -> IndependentDrafter:
    return IndependentDrafter(drafter.model, target.vocab_size, "reduced", torch.tensor(kept_ids))


@pytest.mark.pure
def test_ids_off_the_kept_set_get_no_mass_or_the_fixed_share():
    scores = torch.tensor([[2.0, 0.5, -1.0]])
    kept = torch.tensor([4, 0, 2])
    exact = full_vocabulary_logits(scores, kept, vocab_size=6).softmax(-1)[0]
    assert exact[[1, 3, 5]].sum() == 0
    torch.testing.assert_close(exact[kept], scores.softmax(-1)[0])
    smc = full_vocabulary_logits(scores, kept, vocab_size=6, off_mass=OFF_VOCABULARY_MASS).softmax(-1)[0]
    assert float(smc[[1, 3, 5]].sum()) == pytest.approx(OFF_VOCABULARY_MASS, abs=1e-6)
    assert float(smc[[1, 3, 5]].min()) > 0


def test_the_reduced_cache_scores_the_kept_ids_as_the_full_draft_does():
    target, full_drafter = tiny_pair(scale=6.0, draft_noise=0.3)
    kept = torch.arange(0, 64, 2)
    drafter = reduced(target, full_drafter, kept.tolist())
    target_cache = CachedModel(target.model, target.vocab_size)
    reduced_cache, full_cache = drafter.new_cache(target_cache), CachedModel(full_drafter.model, target.vocab_size)
    for tokens in ([1, 2, 3, 4], [5], [6, 7]):
        reduced_logits, full_logits = reduced_cache.forward(tokens), full_cache.forward(tokens)
        torch.testing.assert_close(reduced_logits[..., kept], full_logits[..., kept], rtol=1e-5, atol=1e-5)
        assert torch.isinf(reduced_logits[..., 1::2]).all()
    reduced_cache.crop(3)
    full_cache.crop(3)
    torch.testing.assert_close(reduced_cache.forward([9])[..., kept], full_cache.forward([9])[..., kept],
                               rtol=1e-5, atol=1e-5)
    assert reduced_cache.length == 4


@pytest.mark.parametrize("kept", [list(range(0, 64, 2)), list(range(48))])
def test_greedy_sd_with_a_reduced_vocabulary_returns_ars_tokens(kept):
    target, full_drafter = tiny_pair(scale=6.0, draft_noise=0.1, eos_token_id=63)
    drafter = reduced(target, full_drafter, kept)
    for prompt in ([1, 2, 3], [7, 7, 7, 7, 9], list(range(20))):
        reference = run_ids(Autoregressive(), target, drafter, prompt, max_new_tokens=32)
        for decoder in (FixedSpeculative(4), Pacer(1, 8, 0.3, ConfidencePreVerifier(), "submit")):
            assert run_ids(decoder, target, drafter, prompt, max_new_tokens=32) == reference, (decoder.info(), prompt)


@pytest.mark.statistical
def test_fixed_sd_with_a_reduced_vocabulary_samples_the_targets_distribution():
    """Two of five ids are never drafted: the residual must bring them back at the target's rate."""
    target, full_drafter = tiny_pair(vocab_size=5, scale=6.0, draft_noise=None, target_layers=1, hidden=16)
    truth = target_sequence_distribution(target.model, [1, 2], 3, temperature=1.0)
    drafter = reduced(target, full_drafter, [0, 3, 4])
    counts = Counter(tuple(run_ids(FixedSpeculative(2), target, drafter, [1, 2], max_new_tokens=3, seed=seed,
                                   temperature=1.0)) for seed in range(1000))
    assert chi_square_p_value(counts, truth) > 1e-3


def test_smc_sd_proposes_from_every_id_with_a_reduced_vocabulary():
    target, full_drafter = tiny_pair(scale=6.0, draft_noise=0.3)
    drafter = reduced(target, full_drafter, list(range(0, 64, 2)))
    _, draft_cache = new_caches(target, drafter, full_support=True)
    probs = draft_cache.forward([1, 2, 3])[0, -1].softmax(-1)
    assert float(probs.min()) > 0
    *_, result = SMC(4, 3).run(target, drafter, [1, 2, 3], validate_settings(
        max_new_tokens=12, temperature=1.0, seed=0, n_particles=4, draft_len=3))
    assert len(result.token_ids) == 12


@pytest.mark.pure
def test_ids_are_ranked_by_how_often_the_target_wrote_them():
    replies = [[5, 5, 7, 9], [7, 5], [9, 9, 9]]
    ranked = rank_ids(replies, vocab_size=12, always=(2,))
    assert ranked.tolist() == [2, 9, 5, 7]
    assert coverage(ranked, [[9, 5, 11]], sizes=(2, 3)) == {2: pytest.approx(1 / 3, abs=1e-4),
                                                            3: pytest.approx(2 / 3, abs=1e-4)}


@pytest.mark.pure
def test_drafter_names_and_a_clear_message_without_a_frequency_file(tmp_path):
    assert valid_drafter_name("small-8192") and valid_drafter_name("small")
    assert not valid_drafter_name("small-0") and not valid_drafter_name("small-x")
    target, full_drafter = tiny_pair()
    drafters = LoadedDrafters.around(full_drafter)
    with pytest.raises(ValueError, match="frequent_ids.json"):
        load_drafter(target, drafters, "small-16")
    save_frequent_ids(tmp_path, torch.tensor([3, 1, 4]), "test")
    assert load_frequent_ids(tmp_path).tolist() == [3, 1, 4]
    full_drafter.model.config._name_or_path = str(tmp_path)
    drafter = load_drafter(target, drafters, "small-2")
    assert drafter.kept_ids.tolist() == [3, 1] and drafter.describe()["kept_ids"] == 2


@pytest.mark.pure
def test_the_draft_vocabulary_setting_follows_the_folders_recommendation(tmp_path):
    from pacer_core.drafters.construction import ModelLoadError, small_drafter_of

    target, full_drafter = tiny_pair()
    full_drafter.model.config._name_or_path = str(tmp_path)
    drafters = LoadedDrafters.around(full_drafter)
    assert small_drafter_of(target, drafters, None).kept_ids is None          # no frequency file: every id
    with pytest.raises(ModelLoadError, match="frequent_ids.json"):
        small_drafter_of(target, drafters, "16")
    save_frequent_ids(tmp_path, torch.arange(63, -1, -1), "test", default_kept=32)
    assert small_drafter_of(target, drafters, None).kept_ids.tolist() == list(range(63, 31, -1))
    assert small_drafter_of(target, drafters, "8").kept_ids.numel() == 8
    assert small_drafter_of(target, drafters, "all").kept_ids is None
    with pytest.raises(ModelLoadError, match="Unknown draft vocabulary"):
        small_drafter_of(target, drafters, "lots")
