"""Pre-packed float32 linear layers (pacer_core/packed_linear.py): same numbers as nn.Linear, a row's result
independent of how many rows share the pass, and speculative decoding on a packed target still exact."""
import copy
from collections import Counter

import pytest
import torch
from torch import nn

from pacer_core import Autoregressive, FixedSpeculative, Pacer
from pacer_core.drafters import IndependentDrafter
from pacer_core.models import Target, linear_kernels, target_from_models
from pacer_core.packed_linear import PackedLinear, pack_linear_layers, packing_available, packing_wanted
from pacer_core.preverifier import ConfidencePreVerifier
from pacer_core.testing.enumeration import chi_square_p_value, target_sequence_distribution
from pacer_core.testing.runs import run_ids
from pacer_core.testing.tiny import TinyTokenizer, tiny_llama, tiny_pair

pytestmark = pytest.mark.skipif(not packing_available(), reason="this torch build has no oneDNN linear packing")


def packed_copy_of(target: Target, drafter) -> tuple[Target, IndependentDrafter]:
    """(a copy of the pair, a copy of its independent drafter), both models' linear layers packed."""
    target_model, draft = copy.deepcopy(target.model), copy.deepcopy(drafter.model)
    pack_linear_layers(target_model)
    pack_linear_layers(draft)
    return target_from_models(target_model, draft, TinyTokenizer(target.vocab_size), "packed-target", "packed-draft",
                              use_chat_template=False)


@pytest.mark.pure
@pytest.mark.parametrize("out_features,in_features", [(576, 576), (1536, 576), (576, 1536), (64, 32), (7, 5)])
def test_packed_linear_matches_nn_linear(out_features, in_features):
    torch.manual_seed(0)
    linear = nn.Linear(in_features, out_features, bias=out_features % 2 == 1)
    packed = PackedLinear(linear)
    hidden = torch.randn(2, 5, in_features)
    with torch.inference_mode():
        torch.testing.assert_close(packed(hidden), linear(hidden), rtol=1e-5, atol=1e-5)


@pytest.mark.pure
def test_a_rows_result_does_not_depend_on_the_rows_beside_it():
    """What makes AR's 1-token passes and a multi-token verify pass agree bit for bit in the linear layers."""
    torch.manual_seed(1)
    packed = PackedLinear(nn.Linear(576, 1536, bias=False))
    hidden = torch.randn(1, 17, 576)
    with torch.inference_mode():
        together = packed(hidden)
        for rows in (1, 2, 4, 5, 8):
            assert torch.equal(packed(hidden[:, :rows]), together[:, :rows]), rows
        one_by_one = torch.cat([packed(hidden[:, i:i + 1]) for i in range(17)], 1)
    assert torch.equal(one_by_one, together)


@pytest.mark.pure
def test_training_falls_back_to_the_ordinary_kernel():
    linear = nn.Linear(8, 4)
    packed = PackedLinear(linear)
    hidden = torch.randn(3, 8, requires_grad=True)
    packed(hidden).sum().backward()
    assert hidden.grad is not None and linear.weight.grad is not None


@pytest.mark.pure
def test_packing_replaces_every_linear_and_keeps_the_weights_shared():
    model = tiny_llama(vocab_size=32, hidden=16, layers=2)
    weight_before = model.lm_head.weight
    assert linear_kernels(model) == "default"
    assert pack_linear_layers(model) == 2 * 7 + 1
    assert linear_kernels(model) == "oneDNN packed"
    assert model.get_output_embeddings().weight is weight_before
    assert not any(type(m) is nn.Linear for m in model.modules())


@pytest.mark.pure
def test_packing_is_for_float32_on_the_cpu_and_can_be_switched_off(monkeypatch):
    monkeypatch.delenv("PACER_PACKED_LINEAR", raising=False)
    assert packing_wanted(torch.device("cpu"), torch.float32)
    assert not packing_wanted(torch.device("cpu"), torch.bfloat16)
    assert not packing_wanted(torch.device("cuda"), torch.float32)
    monkeypatch.setenv("PACER_PACKED_LINEAR", "0")
    assert not packing_wanted(torch.device("cpu"), torch.float32)


def test_packed_target_scores_like_the_unpacked_one():
    target, drafter = tiny_pair(scale=6.0, draft_noise=0.3)
    packed, _ = packed_copy_of(target, drafter)
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    with torch.inference_mode():
        torch.testing.assert_close(packed.model(ids).logits, target.model(ids).logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("noise", [0.1, None])
def test_greedy_sd_on_a_packed_pair_returns_ars_tokens(noise):
    target, drafter = packed_copy_of(*tiny_pair(scale=6.0, draft_noise=noise, eos_token_id=63))
    for prompt in ([1, 2, 3], [7, 7, 7, 7, 9], list(range(20))):
        reference = run_ids(Autoregressive(), target, drafter, prompt, max_new_tokens=32)
        for decoder in (FixedSpeculative(4), Pacer(1, 8, 0.3, ConfidencePreVerifier(), "submit"),
                        Pacer(3, 16, 0.0, ConfidencePreVerifier(), "submit")):
            assert run_ids(decoder, target, drafter, prompt, max_new_tokens=32) == reference, (decoder.info(), prompt)


@pytest.mark.statistical
def test_fixed_sd_on_a_packed_pair_samples_the_targets_distribution():
    target, drafter = packed_copy_of(*tiny_pair(vocab_size=5, scale=6.0, draft_noise=None, target_layers=1, hidden=16))
    truth = target_sequence_distribution(target.model, [1, 2], 3, temperature=1.0)
    counts = Counter(tuple(run_ids(FixedSpeculative(2), target, drafter, [1, 2], max_new_tokens=3, seed=seed,
                                   temperature=1.0))
                     for seed in range(1000))
    assert chi_square_p_value(counts, truth) > 1e-3
