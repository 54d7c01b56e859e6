"""The gguf drafter: a GGUF file run by llama.cpp. Its cache against the model it was written from (through
feeds, crops and reorders), exactness of every decoder that drafts with it (greedy identity with AR,
chi-square on sampling), SMC-SD's full-support proposal, clear errors for bad files, and the real embedded
file on the embedded target."""

import dataclasses

import pytest
import torch

from pacer_core import Autoregressive, FixedSpeculative, Pacer, validate_settings
from pacer_core.analysis import (draft_teacher_forced_logits, output_logits,
                                 target_teacher_forced_logits)
from pacer_core.decoders.smc import SMC
from pacer_core.drafters import LoadedDrafters, drafter_key, load_drafter, valid_drafter_name
from pacer_core.drafters.gguf_drafter import GGUFDrafter
from pacer_core.drafters.kinds import entry_for_key, gguf_unavailable
from pacer_core.kvcache import CachedModel
from pacer_core.llama.model import vocabulary_mismatch
from pacer_core.preverifier import ConfidencePreVerifier
from pacer_core.preverifier.model import ASSETS_DIR, load
from pacer_core.testing.runs import greedy_rejections, p_value_against_target, run_result
from pacer_core.testing.gguf_file import write_llama_gguf
from pacer_core.testing.tiny import tiny_pair

llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (bash setup.sh builds it)")

SIGNIFICANCE = 1e-3
SHIPPED_LAYER = ASSETS_DIR / "preverifiers" / "SmolLM2-135M-Instruct_embedded_GGUF___SmolLM2-135M-Instruct.Q4_1.gguf_llama.cpp_"


def shipped_layer(threshold: float | None = None):
    """The layer shipped for the embedded target's gguf drafter: it reads only the draft's scalar features, so it
    runs beside any gguf drafter (``threshold``: both of its thresholds moved there)."""
    trained = load(SHIPPED_LAYER)
    if threshold is not None:
        trained.config |= {"threshold_greedy": threshold, "threshold_sampling": threshold}
    return trained


def gguf_of(model, tokenizer, folder, name="draft.gguf", **options) -> str:
    return str(write_llama_gguf(model, tokenizer, folder / name, **options))


@pytest.fixture(scope="module")
def pair_with_gguf(tmp_path_factory):
    """A tiny pair (target, a noisy copy as its draft) and what it loaded: that draft, also written as a GGUF file."""
    target, drafter = tiny_pair(scale=6.0, eos_token_id=63)
    folder = tmp_path_factory.mktemp("gguf")
    return target, LoadedDrafters.around(drafter, gguf_file=gguf_of(drafter.model, target.tokenizer, folder))


def test_the_cache_computes_what_the_written_model_computes_through_crops_and_reorders(tmp_path):
    target, _ = tiny_pair(draft_noise=None)
    drafter = GGUFDrafter.load(gguf_of(target.model, target.tokenizer, tmp_path), target.tokenizer, 64, "tiny")
    gguf_cache, model_cache = drafter.new_cache(), CachedModel(target.model, 64)
    prompt = [3, 9, 27, 17, 51, 25]
    assert torch.allclose(gguf_cache.forward(prompt), model_cache.forward(prompt), atol=1e-3)
    for cache in (gguf_cache, model_cache):
        cache.crop(4)
        cache.reorder(torch.tensor([0, 0, 0]))
    more = torch.tensor([[5, 6], [7, 8], [9, 10]])
    assert torch.allclose(gguf_cache.forward(more), model_cache.forward(more), atol=1e-3)
    for cache in (gguf_cache, model_cache):
        cache.reorder(torch.tensor([2, 0, 2]))
    last = torch.tensor([[1, 2, 3]] * 3)
    gguf_last, model_last = gguf_cache.forward(last, keep=1), model_cache.forward(last)[:, -1:]
    assert gguf_last.shape == (3, 1, 64) and torch.allclose(gguf_last, model_last, atol=1e-3)
    assert gguf_cache.length == model_cache.length == 9


def test_crop_and_reorder_equal_a_fresh_context_fed_the_same_tokens(tmp_path):
    target, draft = tiny_pair()
    drafter = GGUFDrafter.load(gguf_of(draft.model, target.tokenizer, tmp_path), target.tokenizer, 64, "tiny")
    used = drafter.new_cache()
    used.forward([4, 8, 15, 16, 23, 42])
    used.crop(3)
    used.reorder(torch.tensor([0, 0]))
    used.forward(torch.tensor([[30, 31], [32, 33]]))
    used.reorder(torch.tensor([1, 1]))
    fresh = drafter.new_cache()
    expected = fresh.forward([4, 8, 15, 32, 33, 7], keep=1)
    assert torch.allclose(used.forward(torch.tensor([[7], [7]]), keep=1)[1], expected[0], atol=1e-4)


def test_a_long_feed_grows_the_context_and_keeps_every_row(tmp_path, monkeypatch):
    from pacer_core.llama import model
    monkeypatch.setattr(model, "START_CELLS", 256)      # the smallest context llama.cpp takes here
    target, _ = tiny_pair(draft_noise=None)
    drafter = GGUFDrafter.load(gguf_of(target.model, target.tokenizer, tmp_path), target.tokenizer, 64, "tiny")
    cache, reference = drafter.new_cache(), CachedModel(target.model, 64)
    prompt = [index % 60 for index in range(250)]
    cache.forward(prompt), reference.forward(prompt)
    cache.reorder(torch.tensor([0, 0])), reference.reorder(torch.tensor([0, 0]))
    more = torch.tensor([[1, 2, 3, 4, 5, 6], [6, 5, 4, 3, 2, 1]])
    assert torch.allclose(cache.forward(more), reference.forward(more), atol=1e-3)
    assert cache.context.n_ctx() > 256


def test_greedy_fixed_and_pacer_with_a_gguf_drafter_return_ars_tokens(pair_with_gguf):
    target, drafters = pair_with_gguf
    drafter = load_drafter(target, drafters, "gguf")
    assert drafter_key(drafter) == "gguf"
    with_layer = [Pacer(1, 8, None, shipped_layer(), "submit"), Pacer(2, 12, None, shipped_layer(0.9), "discard")]
    assert greedy_rejections(target, drafter, also=with_layer) > 0   # the draft is sometimes wrong


PROMPT, N_TOKENS, RUNS = [1, 2], 3, 1000
FILTERED = {"temperature": 0.8, "top_k": 4}


@pytest.fixture(scope="module")
def five_token_pair_with_gguf(tmp_path_factory):
    """(a five-token tiny pair, its draft written in float16 as a GGUF file and loaded as a gguf drafter)."""
    target, draft = tiny_pair(vocab_size=5, scale=6.0, target_layers=1, hidden=32, draft_noise=0.5)
    folder = tmp_path_factory.mktemp("gguf5")
    return target, GGUFDrafter.load(gguf_of(draft.model, target.tokenizer, folder, float16=True), target.tokenizer, 5, "t5")


@pytest.mark.statistical
@pytest.mark.parametrize("decoder", [FixedSpeculative(2), Pacer(1, 2, 0.5, ConfidencePreVerifier(), "submit"),
                                     Pacer(1, 2, 0.9, shipped_layer(0.9), "submit")],
                         ids=["fixed", "pacer", "pacer-trained-layer"])
def test_sampling_with_a_gguf_drafter_matches_the_target(five_token_pair_with_gguf, decoder):
    target, drafter = five_token_pair_with_gguf
    assert p_value_against_target(decoder, target, drafter, PROMPT, N_TOKENS, RUNS, **FILTERED) > SIGNIFICANCE


def test_smc_sd_runs_with_a_gguf_drafter_and_its_proposal_has_full_support(pair_with_gguf):
    target, drafters = pair_with_gguf
    drafter = load_drafter(target, drafters, "gguf")
    cache = drafter.new_cache(None, full_support=True)
    probs = torch.softmax(cache.forward([1, 2, 3], keep=1)[0, -1], dim=-1)
    assert (probs > 0).all()
    *events, result = SMC().run(target, drafter, [1, 2, 3], validate_settings(
        max_new_tokens=12, temperature=1.0, n_particles=4, draft_len=3))
    assert len(result.token_ids) == 12 and events


def test_contexts_are_reused_across_runs(pair_with_gguf):
    target, drafters = pair_with_gguf
    drafter = load_drafter(target, drafters, "gguf")
    for _ in range(3):
        run_result(FixedSpeculative(3), target, drafter, [1, 2, 3], max_new_tokens=8)
    assert drafter.pool.created == 1


@pytest.mark.pure
def test_gguf_names_and_vocabulary_check():
    assert valid_drafter_name("gguf") and valid_drafter_name("gguf-2") and not valid_drafter_name("gguf-0")
    assert entry_for_key("gguf").kind == "gguf"
    assert vocabulary_mismatch(["a", "b", "c"], ["a", "b", "c"], 3) is None
    assert "2 token ids" in vocabulary_mismatch(["a", "x", "y"], ["a", "b", "c"], 3)
    assert "scores 2 token ids" in vocabulary_mismatch(["a", "b"], ["a", "b", "c"], 3)


def test_a_missing_file_is_a_clear_error(tmp_path):
    target, drafter = tiny_pair()
    drafters = LoadedDrafters.around(drafter, gguf_file=str(tmp_path / "nowhere.gguf"))
    with pytest.raises(ValueError, match="nowhere.gguf' does not exist"):
        load_drafter(target, drafters, "gguf")


def test_a_file_that_is_not_gguf_is_a_clear_error(tmp_path):
    target, drafter = tiny_pair()
    (tmp_path / "weights.gguf").write_bytes(b"PK\x03\x04 not a gguf file")
    drafters = LoadedDrafters.around(drafter, gguf_file=str(tmp_path / "weights.gguf"))
    with pytest.raises(ValueError, match="is not a GGUF file"):
        load_drafter(target, drafters, "gguf")


def test_a_gguf_with_another_tokenizer_is_a_clear_error_naming_both(tmp_path):
    target, drafter = tiny_pair()
    other_tokens = [f"u{index}" for index in range(64)]
    other_file = gguf_of(drafter.model, target.tokenizer, tmp_path, tokens=other_tokens)
    drafters = LoadedDrafters.around(drafter, gguf_file=other_file)
    with pytest.raises(ValueError, match=r"does not share the tokenizer of the target 'tiny-target'.*'u0'.*'t0'"):
        load_drafter(target, drafters, "gguf")


def test_without_a_file_the_kind_says_how_to_give_one():
    target, drafter = tiny_pair()
    assert "--draft-gguf" in gguf_unavailable(target, LoadedDrafters.around(drafter))


@pytest.mark.embedded
def test_the_embedded_gguf_drafts_ars_tokens_on_the_embedded_target(embedded_target, embedded_drafters):
    drafter = load_drafter(embedded_target, embedded_drafters, "gguf")
    assert drafter.describe()["file"].endswith(".gguf")
    drafted = accepted = 0
    for prompt in ("Name three primary colours.", "Write a haiku about rain."):
        prompt_ids = embedded_target.encode_prompt(prompt)
        reference = run_result(Autoregressive(), embedded_target, drafter, prompt_ids, max_new_tokens=24).token_ids
        result = run_result(FixedSpeculative(5), embedded_target, drafter, prompt_ids, max_new_tokens=24)
        assert result.token_ids == reference
        drafted += result.metrics.drafted_tokens
        accepted += result.metrics.accepted_tokens
    assert accepted / drafted > 0.9


@pytest.mark.embedded
def test_the_pages_shared_scoring_pass_gives_each_outputs_own_logits(embedded_target, embedded_drafters):
    """``output_logits`` (one target pass over the prompt, the drafter adopting its cells) against scoring each
    output alone, on the embedded target with its gguf drafter."""
    target, drafter = embedded_target, load_drafter(embedded_target, embedded_drafters, "gguf")
    prompt_ids = target.encode_prompt("Name three primary colours.")
    outputs = {"a": run_result(Autoregressive(), target, drafter, prompt_ids, max_new_tokens=12).token_ids,
               "b": run_result(Autoregressive(), target, drafter, prompt_ids, max_new_tokens=12, temperature=1.0,
                               seed=1).token_ids}
    target_logits, draft_logits = output_logits(target, drafter, prompt_ids, outputs, {"a": False, "b": True})
    for key, output_ids in outputs.items():
        alone = target_teacher_forced_logits(target, drafter, prompt_ids, output_ids)
        assert target_logits[key].shape == alone.shape and torch.allclose(target_logits[key], alone, atol=1e-3)
        drafted = draft_teacher_forced_logits(target, drafter, prompt_ids, output_ids, full_support=key == "b")
        assert torch.allclose(draft_logits[key], drafted, atol=1e-3)


@pytest.mark.embedded
@pytest.mark.parametrize("decoder", [FixedSpeculative(4), Pacer(1, 16, None, ConfidencePreVerifier(), "submit"),
                                     SMC(2, 4, 0.5)], ids=["fixed", "pacer", "smc"])
def test_a_kept_rows_run_draws_the_same_tokens_and_keeps_the_drafters_rows_bit_for_bit(embedded_target,
                                                                                        embedded_drafters, decoder):
    """The page's scored runs keep the gguf drafter's rows as they decode (``kvcache.RowRecorder``; SMC-SD along its
    lineage), which computes one more logits row per step: the run still draws exactly the tokens of the same run
    unrecorded, and its rows are the teacher-forced pass's, bit for bit, so the page's scoring needs no drafter
    pass. The seeds include runs whose last token no draft call fed (``Result.complete_rows``)."""
    target, drafter = embedded_target, load_drafter(embedded_target, embedded_drafters, "gguf")
    prompt_ids = target.encode_prompt("Write a Python function that returns the factorial of n.")
    settings = validate_settings(max_new_tokens=23, temperature=0.7)
    for seed in range(3):
        seeded = dataclasses.replace(settings, seed=seed)
        *_, plain = decoder.run(target, drafter, prompt_ids, seeded)
        *_, kept = decoder.run(target, drafter, prompt_ids, seeded, keep_rows=True)
        assert kept.token_ids == plain.token_ids
        if kept.complete_rows is not None:
            kept.complete_rows()
        expected = draft_teacher_forced_logits(target, drafter, prompt_ids, kept.token_ids,
                                               full_support=decoder.name == "smc")
        assert torch.equal(kept.draft_rows, expected)


@pytest.mark.embedded
def test_pacer_runs_the_shipped_layer_on_the_embedded_default_and_returns_ars_tokens(embedded_target, embedded_drafters):
    """The page's default pair: PACER's pre-verifier is the trained layer (with its layer for sampled tokens), on the
    threshold rule it stops drafting on its own, greedy output is AR's, and on gguf's starting rule (auto: the cost
    rule) its estimates price the drafts."""
    from pacer_core import generate
    from pacer_core.preverifier import default_preverifier

    target, drafter = embedded_target, load_drafter(embedded_target, embedded_drafters, "gguf")
    trained = default_preverifier(target, drafter)
    assert trained.kind == "trained" and trained.sampling_layer is not None and trained.layer.hidden_size == 0
    for prompt in ("Name three primary colours.", "Write a Python function that reverses a string."):
        reference = generate(target, drafter, "ar", prompt, max_new_tokens=32).token_ids
        result = generate(target, drafter, "pacer", prompt, max_new_tokens=32, max_draft_len=8, stop_rule="threshold")
        assert result.token_ids == reference
        assert result.info["preverifier"] == "trained" and "trained pre-verification layer" in result.info["stopped_by"]
    sampled = generate(target, drafter, "pacer", "Write a haiku about rain.", max_new_tokens=32, temperature=0.7)
    assert "the trained layer's acceptance estimates" in sampled.info["stopped_by"]
    threshold = generate(target, drafter, "pacer", "Write a haiku about rain.", max_new_tokens=16, temperature=0.7,
                         stop_rule="threshold")
    assert "trained pre-verification layer at threshold 0.70" in threshold.info["stopped_by"]
    rule = generate(target, drafter, "pacer", "Write a haiku about rain.", max_new_tokens=16,
                    preverifier_choice="confidence")
    assert rule.info["preverifier"] == "heuristic" and rule.settings["threshold"] == 0.05   # the drafter's measured


@pytest.mark.pure
def test_the_embedded_default_drafter_is_gguf_on_a_cpu_with_llama_cpp(monkeypatch):
    from pacer_core.llama import availability
    from pacer_core.drafters.construction import default_embedded_drafter
    assert default_embedded_drafter("embedded", torch.device("cpu")) == "gguf"
    assert default_embedded_drafter(None, torch.device("cpu")) == "gguf"
    assert default_embedded_drafter("small", torch.device("cpu")) == "small"
    assert default_embedded_drafter("embedded", torch.device("cuda")) == "embedded-small"
    monkeypatch.setattr(availability, "llama_unavailable", lambda: "not installed")
    assert default_embedded_drafter("embedded", torch.device("cpu")) == "embedded-small"


@pytest.mark.embedded
def test_the_page_offers_gguf_first_on_the_embedded_default(embedded_target, embedded_drafters):
    from pacer_core.ui.drafter_menu import DrafterMenu
    gguf_drafter = load_drafter(embedded_target, embedded_drafters, "gguf")
    menu = DrafterMenu(embedded_target, dataclasses.replace(embedded_drafters, default=gguf_drafter))
    assert menu.default_key == "gguf" and "gguf" in menu.keys and "small" in menu.keys
    line = next(option.description for option in menu.options() if option.key == "gguf")
    assert line.startswith("gguf · the target's own GGUF file run by llama.cpp · 94 MB")
