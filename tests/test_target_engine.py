"""The llama.cpp target engine (llama/target.py): its row invariance bit for bit (the reason for the companion token
and the chunking), greedy identity of every decoder with AR on the same engine, chi-square on sampling against the
engine's own distribution, SMC-SD on it, the engine choice and its errors, and the embedded target's F32 file."""
import dataclasses
import json
import itertools
import os
from types import SimpleNamespace

import pytest
import torch

from pacer_core import Autoregressive, FixedSpeculative, Pacer, validate_settings
from pacer_core.decoders.base import make_state
from pacer_core.decoders.smc import SMC
from pacer_core.drafters import LoadedDrafters, load_drafter, new_caches
from pacer_core.drafters.gguf_drafter import GGUFDrafter
from pacer_core.kvcache import CachedModel, prefill_prompt
from pacer_core.llama.cache import GGUFCache
from pacer_core.llama.engine import active_engine, choose_engine, engine_label, parse_engine, target_cache
from pacer_core.llama import target as llama_target
from pacer_core.llama.target import (CHUNK_TOKENS, FLASH_CONTEXT, PLAIN_CONTEXT, PROBE_PREFILL, TILED_ROWS,
                                     LlamaTarget, balanced_chunks, needs_companion)
from pacer_core.preverifier import ConfidencePreVerifier
from pacer_core.testing.enumeration import chi_square_p_value, sequence_distribution
from pacer_core.testing.runs import greedy_rejections, run_result, sample_counts
from pacer_core.testing.gguf_file import write_llama_gguf
from pacer_core.testing.tiny import tiny_pair
from script_module import ROOT, run_script

SIGNIFICANCE = 1e-3


@pytest.mark.pure
def test_balanced_chunks_cover_the_feed_with_no_lonely_token():
    assert balanced_chunks(0, 48) == [] and balanced_chunks(1, 48) == [1] and balanced_chunks(48, 48) == [48]
    assert balanced_chunks(100, 48) == [34, 33, 33] and balanced_chunks(49, 48) == [25, 24]
    for count in range(2, 400):
        sizes = balanced_chunks(count, CHUNK_TOKENS)
        assert sum(sizes) == count and max(sizes) <= CHUNK_TOKENS and min(sizes) >= 2
        assert len(sizes) == -(-count // CHUNK_TOKENS)


@pytest.mark.pure
def test_a_call_needs_the_companion_exactly_when_a_one_row_kernel_would_run():
    assert needs_companion(1, 1) and needs_companion(1, 0) and needs_companion(5, 1)
    assert not needs_companion(2, 2) and not needs_companion(5, 0) and not needs_companion(5, 3)


@pytest.mark.pure
def test_engine_choice_and_its_errors():
    assert parse_engine(None) == "auto" and parse_engine("LLAMA.CPP") == "llama.cpp" and parse_engine("llamacpp") == "llama.cpp"
    with pytest.raises(ValueError, match="Unknown target engine 'tpu': use auto, torch or llama.cpp"):
        parse_engine("tpu")
    assert choose_engine("torch", True, "cpu", "float32") == "torch"
    assert choose_engine("auto", True, "cuda", "bfloat16") == "torch"
    assert choose_engine("auto", False, "cpu", "float32") == "torch"
    with pytest.raises(ValueError, match="only the embedded target has a GGUF"):
        choose_engine("llama.cpp", False, "cpu", "float32")
    with pytest.raises(ValueError, match="runs the target in float32"):
        choose_engine("llama.cpp", True, "cpu", "bfloat16")


llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (bash setup.sh builds it)")


def engine_for(model, tokenizer, folder, vocab=64) -> LlamaTarget:
    return LlamaTarget.load(write_llama_gguf(model, tokenizer, folder / "target.gguf"), tokenizer, vocab)


@pytest.fixture(scope="module")
def llama_load(tmp_path_factory):
    """(a tiny pair whose target runs on llama.cpp (its F32 GGUF), what it loaded: a noisy copy as its draft (torch)
    and that draft's GGUF for the gguf drafter)."""
    target, drafter = tiny_pair(scale=6.0, eos_token_id=63)
    folder = tmp_path_factory.mktemp("engine")
    target = dataclasses.replace(target, engine=engine_for(target.model, target.tokenizer, folder))
    draft_file = str(write_llama_gguf(drafter.model, target.tokenizer, folder / "draft.gguf"))
    return target, LoadedDrafters.around(drafter, gguf_file=draft_file)


@pytest.fixture(scope="module")
def target_on_llama(llama_load):
    """``llama_load``'s pair."""
    return llama_load[0]


@pytest.fixture(scope="module")
def drafters_on_llama(llama_load):
    """What ``llama_load``'s pair loaded beside it (``.default``: its torch draft)."""
    return llama_load[1]


def stepped_and_verified(cache_factory, prompt, continuation, verify_sizes):
    """Logits rows after prompt + k tokens: once from one-token steps, once from verify-style feeds, both after
    the prefill every run starts with (prompt[:-1], ``kvcache.prefill_prompt``)."""
    stepped, verifying, sequence = cache_factory(), cache_factory(), list(prompt) + list(continuation)
    for cache in (stepped, verifying):
        prefill_prompt(cache, prompt)
    rows = [stepped.forward(prompt[-1:], keep=1)[0, -1]]
    rows += [stepped.forward([token_id], keep=1)[0, -1] for token_id in continuation]
    pieces = [verifying.forward(sequence[len(prompt) - 1: len(prompt) + 1], keep=2)[0]]
    position = len(prompt) + 1
    for size in itertools.cycle(verify_sizes):
        if position >= len(sequence):
            break
        size = min(size, len(sequence) - position)
        pieces.append(verifying.forward(sequence[position: position + size], keep=size)[0])
        position += size
    return torch.stack(rows), torch.cat(pieces)


@pytest.fixture(params=["as loaded", "companion", "plain", "plain with a companion"])
def engine_mode(request, target_on_llama, monkeypatch):
    """The engine as its library makes it (flash attention where setup.sh patched the library), forced to the
    companion token a stock library needs, and in the plain context (flash attention off, float32 cells) a library
    without the attention patch gets, with and without the companion: every one must be row-invariant."""
    engine = target_on_llama.engine
    if request.param.startswith("plain"):
        engine = LlamaTarget(engine.model, engine.vocab_size)
        engine.pool, engine.flash_attention = engine._pool(PLAIN_CONTEXT), False
    if request.param.endswith("companion"):
        monkeypatch.setattr(engine, "one_row_invariant", False)
    return engine


def test_the_engine_is_row_invariant_bit_for_bit_and_computes_the_models_logits(target_on_llama, engine_mode):
    engine, prompt = engine_mode, [3 + index % 57 for index in range(300)]     # past 256 cells, and one chunk
    continuation = [(7 * index) % 60 for index in range(40)]
    stepped, verified = stepped_and_verified(engine.new_cache, prompt, continuation, (2, 5, 9, 3, 13))
    assert torch.equal(stepped, verified)
    reference = CachedModel(target_on_llama.model, 64).forward(prompt + continuation)[0, len(prompt) - 1:]
    float16_cells = engine.pool.options["type_k"] == llama_target.GGML_TYPE_F16
    assert torch.allclose(stepped, reference, atol=2e-2 if float16_cells else 1e-4)


def test_the_engine_decodes_with_flash_attention_only_where_its_proof_passes(target_on_llama, monkeypatch):
    """On setup.sh's library the engine proves flash attention row-invariant past 256 cells and takes the float16
    context; where that proof fails (a stock library, or one built before the attention patch) it keeps the plain
    context, whose one-row probe then decides the companion."""
    engine = target_on_llama.engine
    if os.environ.get("PACER_STOCK_LLAMA") != "1":
        assert engine.flash_attention and engine.pool.options == FLASH_CONTEXT and engine.one_row_invariant
        assert "flash attention" in engine.describe()
    monkeypatch.setattr(llama_target, "attention_is_row_invariant", lambda owner: False)
    plain = LlamaTarget(engine.model, engine.vocab_size)
    assert not plain.flash_attention and plain.pool.options == PLAIN_CONTEXT
    assert plain.one_row_invariant == llama_target.one_row_is_invariant(plain)
    assert "flash attention" not in plain.describe()


def test_the_attention_probe_tells_a_flash_context_on_a_stock_library_apart(target_on_llama):
    """The proof the engine chooses its context by: true on setup.sh's library in both contexts; in the plain one
    exactly when one-row products round like many-row ones. The probe's cells go past the 256 where llama.cpp
    starts splitting a lone row's cells, its step has the most rows a step feeds, and its prefill is tiled."""
    engine = LlamaTarget(target_on_llama.engine.model, target_on_llama.engine.vocab_size)
    assert PROBE_PREFILL + TILED_ROWS - 1 > 256 and PROBE_PREFILL >= TILED_ROWS
    engine.pool = engine._pool(PLAIN_CONTEXT)
    assert llama_target.attention_is_row_invariant(engine) == llama_target.one_row_is_invariant(engine)
    engine.pool = engine._pool(FLASH_CONTEXT)
    assert llama_target.attention_is_row_invariant(engine) == (os.environ.get("PACER_STOCK_LLAMA") != "1")


def test_crops_and_growth_keep_the_engine_row_invariant(target_on_llama, engine_mode, monkeypatch):
    from pacer_core.llama import model
    monkeypatch.setattr(model, "START_CELLS", 256)
    engine = LlamaTarget(target_on_llama.engine.model, 64)
    engine.one_row_invariant = engine_mode.one_row_invariant
    cache, prompt = engine.new_cache(), [index % 60 for index in range(250)]
    cache.prefill(prompt[:-1])                         # one call of 249 rows: tiled on setup.sh's library
    cache.forward(prompt[-1:] + [5, 6, 7, 8, 9, 10])
    cache.crop(252)                                    # a rejected draft rolled back
    grown = cache.forward(list(range(11, 19)), keep=8)[0]   # needs more cells: refilled, the prefill's chunk again
    assert cache.context.n_ctx() > 256
    fresh = engine.new_cache()
    fresh.prefill(prompt[:-1])
    fresh.forward(prompt[-1:] + [5, 6], keep=1)
    stepped = torch.stack([fresh.forward([token_id], keep=1)[0, -1] for token_id in range(11, 19)])
    assert torch.equal(grown, stepped)


def test_plain_calls_are_row_invariant_exactly_when_the_engine_proved_it(target_on_llama):
    """Plain llama.cpp calls (no chunks, no companion) give one-token steps the bits of a verify feed only on the
    library setup.sh builds (scripts/patch_llama_source.py); the engine's probe at load says which it has."""
    owner = target_on_llama.engine
    stepped, verified = stepped_and_verified(lambda: GGUFCache(owner), list(range(3, 20)), list(range(20, 50)), (4,))
    assert torch.equal(stepped, verified) == owner.one_row_invariant
    assert torch.allclose(stepped, verified, atol=1e-3)


def test_the_library_setup_builds_is_one_row_invariant(target_on_llama):
    """setup.sh builds llama-cpp-python with scripts/patch_llama_source.py; a stock wheel would leave the engine
    on the slower companion path (PACER_STOCK_LLAMA=1 says that is expected, e.g. a prebuilt library)."""
    if os.environ.get("PACER_STOCK_LLAMA") == "1":
        pytest.skip("PACER_STOCK_LLAMA=1: a stock llama-cpp-python is expected here")
    assert target_on_llama.engine.one_row_invariant, (
        "llama-cpp-python is not the patched build: bash scripts/build_llama.sh --rebuild")


@pytest.mark.parametrize("drafter_name", ["small", "gguf"])
def test_greedy_fixed_and_pacer_on_the_engine_return_ars_tokens(target_on_llama, drafters_on_llama, drafter_name):
    target = target_on_llama
    drafter = load_drafter(target, drafters_on_llama, drafter_name)
    assert isinstance(target_cache(target, drafter), GGUFCache)
    long_prompt = [3 + index % 57 for index in range(2 * TILED_ROWS + 30)]      # a prefill of two tiled calls
    assert greedy_rejections(target, drafter, ([1, 2, 3], [7, 7, 7, 7, 9], list(range(60)), long_prompt)) > 0


def test_every_run_of_a_prompt_starts_with_the_same_prefill_whose_tiles_round_apart(target_on_llama,
                                                                                   drafters_on_llama):
    """A prompt's prefill is the only feed of TILED_ROWS rows or more, and the patched library tiles it: its cells
    have other bits than the same tokens fed row by row, so AR and every speculative run must prefill alike
    (``make_state`` on the llama.cpp target: prompt[:-1], a call of its own only where a draft adopts it)."""
    engine, prompt = target_on_llama.engine, [3 + index % 57 for index in range(TILED_ROWS + 40)]
    prefilled, row_by_row = engine.new_cache(), engine.new_cache()
    prefilled.prefill(prompt[:-1])
    row_by_row.forward(prompt[:-1], keep=1)            # a plain feed: chunks below TILED_ROWS
    assert prefilled.length == row_by_row.length == len(prompt) - 1 and prefilled.calls == 1
    tiled = not torch.equal(prefilled.forward(prompt[-1:])[0], row_by_row.forward(prompt[-1:])[0])
    assert tiled == (engine.flash_attention and os.environ.get("PACER_STOCK_LLAMA") != "1")
    with pytest.raises(ValueError, match="empty cache of one row"):
        prefilled.prefill(prompt)
    settings = validate_settings(max_new_tokens=4)
    for drafter_name in ("small", "gguf"):
        drafter = load_drafter(target_on_llama, drafters_on_llama, drafter_name)
        for with_draft in (False, True):           # AR's run, a speculative run
            state = make_state(target_on_llama, drafter, prompt, settings, with_draft=with_draft)
            counted = getattr(state.draft, "adopts_target_prompt", False)    # a call of its own only then
            assert state.target.prefilled == len(prompt) - 1 and state.target.calls == int(counted)


def test_ars_first_pass_is_its_prefill_with_the_bits_of_a_step_after_it(target_on_llama, drafters_on_llama,
                                                                       monkeypatch):
    """On the patched library a prompt of fewer than TILED_ROWS tokens is one chunk run row by row, so AR feeds it
    whole in one call and takes its first token's row from it (``LlamaTargetCache.first_pass``): that row, the cells
    and a refill after growing are the bits of the prefill plus the one-token step every speculative run starts
    with. A prompt of TILED_ROWS tokens (its prefill would be tiled), a one-token prompt and the plain context keep
    the two calls; so does every run that drafts."""
    from pacer_core.llama import model
    monkeypatch.setattr(model, "START_CELLS", 256)
    engine = LlamaTarget(target_on_llama.engine.model, 64)
    prompt, after = [3 + index % 57 for index in range(TILED_ROWS - 1)], [(5 * index) % 60 for index in range(200)]
    whole, split = engine.new_cache(), engine.new_cache()
    first = whole.first_pass(prompt)
    if not engine.flash_attention:                     # a stock library: nothing fed, the two calls stay
        assert first is None and whole.length == 0
        return
    split.prefill(prompt[:-1])
    assert torch.equal(first, split.forward(prompt[-1:], keep=1)[0, -1])
    assert whole.calls == 1 and whole.length == whole.prefilled == len(prompt)
    for start in range(0, len(after), 50):            # past 256 cells: both grow and refill their prompts
        assert torch.equal(whole.forward(after[start: start + 50])[0], split.forward(after[start: start + 50])[0])
    assert whole.context.n_ctx() > 256
    assert engine.new_cache().first_pass(prompt + [4]) is None and engine.new_cache().first_pass(prompt[:1]) is None
    plain = LlamaTarget(engine.model, engine.vocab_size)
    plain.pool, plain.flash_attention = plain._pool(PLAIN_CONTEXT), False
    assert plain.new_cache().first_pass(prompt) is None
    settings = validate_settings(max_new_tokens=4)
    drafter = load_drafter(target_on_llama, drafters_on_llama, "gguf")
    ar_state = make_state(target_on_llama, drafter, prompt, settings, with_draft=False)
    two_calls = target_on_llama.engine.new_cache()
    two_calls.prefill(prompt[:-1])
    assert ar_state.target.calls == 1
    assert torch.equal(ar_state.take_first_target_row(), two_calls.forward(prompt[-1:], keep=1)[0, -1])
    assert ar_state.take_first_target_row() is None                          # read once
    assert make_state(target_on_llama, drafter, prompt, settings, with_draft=True).first_target_row is None


def engine_sequence_distribution(engine, prompt_ids, n_tokens, temperature, top_k=0, top_p=1.0) -> dict:
    """P(first n_tokens = s) for every s, enumerated with the ENGINE's logits (the distribution decoders on it
    must reproduce)."""
    return sequence_distribution(lambda ids: engine.new_cache().forward(ids)[0], engine.vocab_size, prompt_ids,
                                 n_tokens, temperature, top_k, top_p)


PROMPT, N_TOKENS, RUNS = [1, 2], 3, 1000
FILTERED = {"temperature": 0.8, "top_k": 4}


@pytest.fixture(scope="module")
def five_token_pair_on_llama(tmp_path_factory):
    """(a five-token tiny pair whose target runs on llama.cpp, its drafter: a noisy copy in torch)."""
    target, drafter = tiny_pair(vocab_size=5, scale=6.0, target_layers=1, hidden=32, draft_noise=0.5)
    engine = engine_for(target.model, target.tokenizer, tmp_path_factory.mktemp("engine5"), vocab=5)
    return dataclasses.replace(target, engine=engine), drafter


@pytest.mark.statistical
@pytest.mark.parametrize("decoder", [Autoregressive(), FixedSpeculative(2),
                                     Pacer(1, 2, 0.5, ConfidencePreVerifier(), "submit")], ids=["ar", "fixed", "pacer"])
def test_sampling_on_the_engine_matches_the_engines_distribution(five_token_pair_on_llama, decoder):
    target, drafter = five_token_pair_on_llama
    truth = engine_sequence_distribution(target.engine, PROMPT, N_TOKENS, **FILTERED)
    counts = sample_counts(decoder, target, drafter, PROMPT, N_TOKENS, RUNS, **FILTERED)
    assert chi_square_p_value(counts, truth) > SIGNIFICANCE


def test_smc_sd_runs_on_the_engine(target_on_llama, drafters_on_llama):
    drafter = load_drafter(target_on_llama, drafters_on_llama, "gguf")
    *events, result = SMC().run(target_on_llama, drafter, [1, 2, 3], validate_settings(
        max_new_tokens=12, temperature=1.0, n_particles=4, draft_len=3))
    assert len(result.token_ids) == 12 and events


def test_a_drafter_that_reads_the_target_falls_back_to_torch_for_ar_and_verify(target_on_llama, drafters_on_llama):
    head_like = SimpleNamespace(reads_target_features=True, name="head", describe=lambda: {})
    own = drafters_on_llama.default
    assert active_engine(target_on_llama, head_like) is None
    assert isinstance(target_cache(target_on_llama, head_like), CachedModel)
    assert engine_label(target_on_llama, head_like).startswith("torch (the drafter reads the target's hidden states")
    assert engine_label(target_on_llama, own).startswith("llama.cpp (target.gguf, ")
    assert target_on_llama.describe(own)["target_engine"].startswith("llama.cpp")


def test_a_gguf_with_another_vocabulary_cannot_run_the_target(tmp_path):
    target, _ = tiny_pair()
    path = write_llama_gguf(target.model, target.tokenizer, tmp_path / "other.gguf", tokens=[f"u{i}" for i in range(64)])
    with pytest.raises(RuntimeError, match="cannot run the target: 64 token ids have other strings"):
        LlamaTarget.load(path, target.tokenizer, 64)


@pytest.mark.embedded
def test_the_embedded_target_runs_on_llama_cpp_by_default_and_sd_keeps_ars_tokens():
    from pacer_core import load_target
    target, drafters = load_target("embedded", "gguf", device="cpu")
    drafter = drafters.default
    assert target.describe(drafter)["target_engine"].startswith("llama.cpp (smollm2-135m-instruct-f32.gguf")
    prompt_ids = target.encode_prompt("Explain how a refrigerator keeps food cold.")
    stepped, verified = stepped_and_verified(target.engine.new_cache, prompt_ids, list(range(300, 330)), (5, 9))
    assert torch.equal(stepped, verified)
    code = [json.loads(line)["prompt"] for line in open(ROOT / "assets/prompts/code.jsonl")][-1]   # ~500 tokens
    for prompt in ("Name three primary colours.", "Write a haiku about rain.", code):
        prompt_ids = target.encode_prompt(prompt)
        reference = run_result(Autoregressive(), target, drafter, prompt_ids, max_new_tokens=32).token_ids
        for decoder in (FixedSpeculative(10), Pacer(4, 32, 0.05, ConfidencePreVerifier(), "submit")):
            assert run_result(decoder, target, drafter, prompt_ids, max_new_tokens=32).token_ids == reference
    torch_target, torch_drafters = load_target("embedded", "gguf", device="cpu", target_engine="torch")
    assert torch_target.engine is None and torch_target.describe(torch_drafters.default)["target_engine"] == "torch"


@pytest.fixture(scope="module")
def pair_adopting(tmp_path_factory):
    """A tiny pair on the llama.cpp engine whose gguf drafter is a file of the target itself (the embedded pair's
    case: the same attention layout), so its caches take the target's prompt instead of computing their own; with
    what it loaded (that file as its ``gguf_file``)."""
    target, drafter = tiny_pair(scale=6.0, eos_token_id=63, draft_noise=0.0)
    folder = tmp_path_factory.mktemp("adopting")
    target = dataclasses.replace(target, engine=engine_for(target.model, target.tokenizer, folder))
    target_file = str(write_llama_gguf(target.model, target.tokenizer, folder / "draft.gguf"))
    return target, LoadedDrafters.around(drafter, gguf_file=target_file)


def test_a_gguf_draft_of_the_targets_layout_adopts_the_targets_prompt(pair_adopting, tmp_path):
    (target, drafters), prompt = pair_adopting, list(range(3, 60))
    drafter = load_drafter(target, drafters, "gguf")
    target_cache, draft = new_caches(target, drafter)
    assert draft.adopts_target_prompt and draft.context is not None
    target_cache.forward(prompt[:-1], keep=1)
    draft.adopt(target_cache)
    assert draft.length == len(prompt) - 1 and draft.row_tokens == target_cache.row_tokens
    adopted = draft.forward(prompt[-1:], keep=1)[0, -1]
    own = drafter.new_cache().forward(prompt, keep=1)[0, -1]        # beside no target: its own prefill
    assert torch.allclose(adopted, own, atol=1e-3)        # its own cells are float16, the adopted float32
    with pytest.raises(ValueError, match="empty cache of one row"):
        draft.adopt(target_cache)
    assert not drafter.new_cache(CachedModel(target.model, 64)).adopts_target_prompt   # a torch target
    unrelated, unrelated_drafter = tiny_pair(draft_noise=None)          # a 1-layer draft: another layout
    path = write_llama_gguf(unrelated_drafter.model, unrelated.tokenizer, tmp_path / "one-layer.gguf")
    one_layer = GGUFDrafter.load(path, unrelated.tokenizer, 64, "one layer")
    assert not one_layer.new_cache(target_cache).adopts_target_prompt


def test_adopting_drafts_keep_ars_tokens_and_smc_runs(pair_adopting):
    target, drafters = pair_adopting
    decoders = [FixedSpeculative(gamma) for gamma in (1, 4)] + [Pacer(1, 8, 0.3, ConfidencePreVerifier(), "submit")]
    drafter = load_drafter(target, drafters, "gguf")
    for prompt in ([5], [1, 2, 3], list(range(60)) + list(range(40))):
        reference = run_result(Autoregressive(), target, drafter, prompt, max_new_tokens=30).token_ids
        for decoder in decoders:
            result = run_result(decoder, target, drafter, prompt, max_new_tokens=30)
            assert result.token_ids == reference, (decoder.info(), prompt)
            assert result.metrics.accepted_tokens > 0
    *events, result = SMC().run(target, drafter, list(range(30)), validate_settings(
        max_new_tokens=12, temperature=1.0, n_particles=4, draft_len=3))
    assert len(result.token_ids) == 12 and events


@pytest.mark.statistical
def test_sampling_with_an_adopting_draft_matches_the_engines_distribution(five_token_pair_on_llama, tmp_path):
    target, drafter = five_token_pair_on_llama
    target_file = str(write_llama_gguf(target.model, target.tokenizer, tmp_path / "d.gguf"))
    drafters = LoadedDrafters.around(drafter, gguf_file=target_file)
    truth = engine_sequence_distribution(target.engine, PROMPT, N_TOKENS, **FILTERED)
    adopting = load_drafter(target, drafters, "gguf")
    assert new_caches(target, adopting)[1].adopts_target_prompt
    counts = sample_counts(FixedSpeculative(2), target, adopting, PROMPT, N_TOKENS, RUNS, **FILTERED)
    assert chi_square_p_value(counts, truth) > SIGNIFICANCE


def test_a_runs_seconds_count_the_targets_prompt_fed_for_the_draft(pair_adopting, monkeypatch):
    """The target's prefill that the draft adopts happens before the first step; the run's clock (seconds,
    tokens/s: the speedups the page and the benchmarks print) must count it, and AR's its own (on a short prompt its
    first pass, ``first_pass``)."""
    import time

    from pacer_core.llama.target import LlamaTargetCache

    def slowed(feed):
        def slow_feed(cache, token_ids, *args, **kwargs):
            time.sleep(0.5)
            return feed(cache, token_ids, *args, **kwargs)
        return slow_feed
    for name in ("prefill", "first_pass"):
        monkeypatch.setattr(LlamaTargetCache, name, slowed(getattr(LlamaTargetCache, name)))
    target, drafters = pair_adopting
    drafter = load_drafter(target, drafters, "gguf")
    for decoder in (FixedSpeculative(3), Autoregressive()):
        assert run_result(decoder, target, drafter, list(range(40)), max_new_tokens=4).metrics.seconds >= 0.5


@pytest.mark.embedded
def test_the_engine_contexts_benchmark_runs_in_its_tiny_form(tmp_path):
    """benchmarks/engine_contexts.py: the embedded target as proven and with the proof failed, every row in both
    contexts; on setup.sh's library the two engines are the flash and the plain one, and greedy rows equal AR."""
    out = tmp_path / "engine-contexts"
    run_script("benchmarks/engine_contexts.py", "--limit", "1", "--repeats", "1", "--max-new-tokens", "4",
               "--out", str(out))
    report = json.loads((out / "results.json").read_text())
    assert [(row["context"], row["row"]) for row in report["rows"]] == [
        (context, row) for context in ("flash", "plain") for row in ("ar", "fixed@gguf", "pacer@gguf")]
    assert all(row["seconds"] > 0 and row["same_as_ar"] == 1 for row in report["rows"])
    assert "flash attention" not in report["engines"]["plain"]
    if os.environ.get("PACER_STOCK_LLAMA") != "1":
        assert "flash attention" in report["engines"]["flash"]
