"""The self-int4 / self-int8 drafters: the quantization math, the lean decode step against the module tree,
and exactness of every decoder that drafts with them (greedy identity with AR, chi-square on sampling)."""

import pytest
import torch

from pacer_core import FixedSpeculative, Pacer, validate_settings
from pacer_core.decoders.smc import SMC
from pacer_core.drafters import LoadedDrafters, load_drafter, valid_drafter_name
from pacer_core.drafters.lean_decoder import LeanCache, lean_supported
from pacer_core.drafters.self_quantized import SelfQuantizedDrafter, quantized_copy
from pacer_core.kvcache import CachedModel
from pacer_core.preverifier import ConfidencePreVerifier
from pacer_core.quantized_linear import (QuantizationUnavailable, QuantizedLinear, check_kernel, dequantize_int4,
                                         dequantize_int8, int4_groupwise, int8_per_channel)
from pacer_core.testing.runs import greedy_rejections, p_value_against_target
from pacer_core.testing.tiny import tiny_pair

SIGNIFICANCE = 1e-3


@pytest.mark.pure
def test_int8_codes_round_trip_within_half_a_step():
    weight = torch.randn(24, 64)
    codes, scales = int8_per_channel(weight)
    assert codes.dtype == torch.int8
    assert (dequantize_int8(codes, scales) - weight).abs().max() <= scales.max() / 2 + 1e-6


@pytest.mark.pure
def test_int4_codes_cover_each_group_and_round_trip_within_half_a_step():
    weight = torch.randn(8, 64) * torch.linspace(0.1, 3, 64)
    codes, scales, zeros = int4_groupwise(weight, 32)
    assert codes.min() >= 0 and codes.max() <= 15 and scales.shape == (8, 2)
    error = (dequantize_int4(codes, scales, zeros) - weight).abs().reshape(8, 2, 32).amax(-1)
    assert (error <= scales / 2 + 1e-5).all()


@pytest.mark.parametrize("bits", [4, 8])
def test_a_quantized_layer_computes_with_its_dequantized_weight(bits):
    weight, bias, rows = torch.randn(48, 64), torch.randn(48), torch.randn(3, 5, 64)
    layer = QuantizedLinear(weight, bias, bits)
    if bits == 8:
        dequantized = dequantize_int8(*int8_per_channel(weight))
    else:
        dequantized = dequantize_int4(*int4_groupwise(weight, 32))
    expected = rows.bfloat16().float() @ dequantized.t() + bias
    assert torch.allclose(layer(rows), expected, atol=0.15, rtol=0.02)
    assert layer(rows).dtype == torch.float32


def test_a_missing_kernel_is_named(monkeypatch):
    def missing(*args):
        raise RuntimeError("Could not run 'aten::_weight_int8pack_mm' with arguments from the 'Meta' backend")
    monkeypatch.setattr(torch.ops.aten, "_weight_int8pack_mm", missing)
    with pytest.raises(QuantizationUnavailable, match="_weight_int8pack_mm on cpu"):
        check_kernel(8, "cpu")


@pytest.mark.parametrize("bits", [4, 8])
def test_the_lean_step_matches_the_quantized_module_tree_through_crops_and_reorders(bits):
    target, _ = tiny_pair(draft_noise=None)
    target_model = target.model
    assert lean_supported(target_model)
    lean = SelfQuantizedDrafter.from_target(target_model, 64, f"self-int{bits}")
    tree = quantized_copy(target_model, bits)
    lean_cache, tree_cache = LeanCache(lean.model, 64), CachedModel(tree, 64)
    prompt = torch.tensor([[3, 9, 27, 17, 51, 25]]).repeat(3, 1)
    assert torch.allclose(lean_cache.forward(prompt), tree_cache.forward(prompt), atol=1e-4)
    assert lean.describe()["lean_step"]
    for cache in (lean_cache, tree_cache):
        cache.crop(4)
        cache.reorder(torch.tensor([2, 0, 0]))
    more = torch.tensor([[5, 6], [7, 8], [9, 10]])
    assert torch.allclose(lean_cache.forward(more), tree_cache.forward(more), atol=1e-4)
    assert lean_cache.length == tree_cache.length == 6
    last = lean_cache.forward(torch.tensor([[1, 2, 3]] * 3), keep=1)
    assert last.shape == (3, 1, 64) and torch.allclose(last[:, -1], tree_cache.forward(
        torch.tensor([[1, 2, 3]] * 3))[:, -1], atol=1e-4)


def test_the_copy_shares_everything_but_the_linear_weights():
    target, _ = tiny_pair(draft_noise=None)
    target_model = target.model
    copy = quantized_copy(target_model, 8)
    assert copy.model.embed_tokens.weight is target_model.model.embed_tokens.weight
    assert copy.model.norm.weight is target_model.model.norm.weight
    assert not any(isinstance(module, torch.nn.Linear) for module in copy.modules())


@pytest.mark.parametrize("name", ["self-int4", "self-int8"])
def test_greedy_fixed_and_pacer_with_the_targets_own_weights_return_ars_tokens(name):
    target, _ = tiny_pair(scale=6.0, eos_token_id=63)
    drafter = SelfQuantizedDrafter.from_target(target.model, target.vocab_size, name)
    greedy_rejections(target, drafter)


PROMPT, N_TOKENS, RUNS = [1, 2], 3, 1000
FILTERED = {"temperature": 0.8, "top_k": 4}


@pytest.fixture(scope="module")
def five_token_pair_drafting_itself():
    target, _ = tiny_pair(vocab_size=5, scale=6.0, draft_noise=None, target_layers=1, hidden=32)
    return target, SelfQuantizedDrafter.from_target(target.model, target.vocab_size, "self-int4")


@pytest.mark.statistical
@pytest.mark.parametrize("decoder", [FixedSpeculative(2), Pacer(1, 2, 0.5, ConfidencePreVerifier(), "submit")],
                         ids=["fixed", "pacer"])
def test_sampling_with_the_targets_own_weights_matches_the_target(five_token_pair_drafting_itself, decoder):
    target, drafter = five_token_pair_drafting_itself
    assert p_value_against_target(decoder, target, drafter, PROMPT, N_TOKENS, RUNS, **FILTERED) > SIGNIFICANCE


def test_smc_sd_runs_with_the_targets_own_weights():
    target, _ = tiny_pair(scale=2.0)
    drafter = SelfQuantizedDrafter.from_target(target.model, target.vocab_size, "self-int4")
    *events, result = SMC().run(target, drafter, [1, 2, 3], validate_settings(
        max_new_tokens=12, temperature=1.0, n_particles=4, draft_len=3))
    assert len(result.token_ids) == 12 and events


@pytest.mark.pure
def test_self_drafter_names():
    assert valid_drafter_name("self-int4") and valid_drafter_name("self-int8")
    assert not any(valid_drafter_name(name) for name in ("self-int3", "self-int4-", "self-int4-16384", "self"))


def test_self_drafters_load_by_name_and_a_missing_kernel_is_a_clear_error(monkeypatch):
    target, drafter = tiny_pair()
    drafters = LoadedDrafters.around(drafter)
    assert load_drafter(target, drafters, "self-int8").name == "self-int8"

    def missing(*args):
        raise RuntimeError("no kernel")
    monkeypatch.setattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu", missing)
    with pytest.raises(ValueError, match="int4 weight-only drafting needs the kernel"):
        load_drafter(target, drafters, "self-int4")


def test_a_pair_switches_to_its_own_weights_by_name():
    from pacer_core.drafters.construction import ModelLoadError, drafter_by_name
    target, drafter = tiny_pair()
    drafters = LoadedDrafters.around(drafter)
    own_weights = drafter_by_name(target, drafters, "self-int4")
    assert own_weights.kind == "self-quantized" and own_weights.name == "self-int4"
    assert drafters.default.kind == "independent"                   # what was loaded is unchanged
    other_pair, other_drafter = tiny_pair()
    other_loaded = LoadedDrafters.around(other_drafter)
    other = load_drafter(other_pair, other_loaded, "self-int8")
    assert other.model.embed is other_pair.model.get_input_embeddings()   # built on the pair's own target
    assert other_loaded.default.kind == "independent"
    with pytest.raises(ModelLoadError, match="Unknown drafter"):
        drafter_by_name(target, drafters, "self-int2")
