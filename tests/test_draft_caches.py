"""Every kind of cache a run drafts with meets one contract (``kvcache.ModelCache``), checked by the same
functions: a causal LM's ``CachedModel``, the independent draft over a reduced vocabulary, the self-quantized
lean step (int8 and int4), the feature head, and the gguf drafter's llama.cpp context (a tiny GGUF written
in-process; skipped without llama-cpp-python).

The reference is always a fresh cache of the same kind fed the same tokens at once: whatever a cache went
through (crops, row copies 1 → N and N → N, growth past its capacity, ``keep``, ``feed_sequence``), it must
return what a fresh one returns."""
import pytest
import torch

from pacer_core.drafters.feature_head import random_head_drafter
from pacer_core.drafters.independent import IndependentDrafter
from pacer_core.drafters.self_quantized import SelfQuantizedDrafter
from pacer_core.kvcache import CachedModel, ModelCache, GrowingLayer
from pacer_core.testing.tiny import tiny_pair

VOCAB = 64
PROMPT = [3, 9, 27, 17, 51, 25]
MORE = [5, 6]


def close(got: torch.Tensor, expected: torch.Tensor) -> bool:
    return got.shape == expected.shape and torch.allclose(got, expected, atol=2e-4, rtol=1e-4)


@pytest.fixture(scope="module")
def tiny():
    """(a tiny pair, its drafter: an unrelated 1-layer model)."""
    return tiny_pair(draft_noise=None)


def causal_lm(target):
    return lambda: CachedModel(target.model, VOCAB)


def reduced_vocabulary(draft_model):
    drafter = IndependentDrafter(draft_model, VOCAB, "tiny [small-32]", torch.arange(0, VOCAB, 2))
    return lambda: drafter.new_cache(None)


def self_quantized(bits):
    def maker(target):
        drafter = SelfQuantizedDrafter.from_target(target.model, VOCAB, f"self-int{bits}")
        assert drafter.lean
        return lambda: drafter.new_cache(None)
    return maker


def feature_head(target):
    drafter = random_head_drafter(target.model, VOCAB, seed=3)
    return lambda: drafter.new_cache(CachedModel(target.model, VOCAB, keep_features=True))


def gguf(target, folder):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (bash setup.sh builds it)")
    from pacer_core.drafters.gguf_drafter import GGUFDrafter
    from pacer_core.testing.gguf_file import write_llama_gguf
    path = write_llama_gguf(target.model, target.tokenizer, folder / "tiny.gguf")
    drafter = GGUFDrafter.load(path, target.tokenizer, VOCAB, "tiny")
    return drafter.new_cache


KINDS = {"causal-lm": causal_lm, "reduced-vocabulary": reduced_vocabulary, "self-int8": self_quantized(8),
         "self-int4": self_quantized(4), "feature-head": feature_head, "gguf": gguf}


@pytest.fixture(params=sorted(KINDS))
def new_cache(request, target, draft_model, tmp_path_factory):
    """A function returning a fresh, empty cache of one kind."""
    maker = KINDS[request.param]
    if request.param == "reduced-vocabulary":
        return maker(draft_model)
    return maker(target, tmp_path_factory.mktemp("gguf")) if request.param == "gguf" else maker(target)


def fresh_logits(new_cache, tokens: list[int]) -> torch.Tensor:
    """[T, V]: what a fresh cache returns for every position of ``tokens``."""
    return new_cache().forward(tokens)[0]


def test_every_cache_is_a_draft_cache_and_counts_what_it_holds(new_cache):
    cache = new_cache()
    assert isinstance(cache, ModelCache) and cache.length == 0 and cache.calls == 0
    logits = cache.forward(PROMPT)
    assert logits.shape == (1, len(PROMPT), VOCAB) and logits.dtype == torch.float32
    logits, hidden = cache.forward(MORE, output_hidden_states=True)
    assert logits.shape == (1, 2, VOCAB) and hidden.shape[:2] == (1, 2)
    assert cache.length == len(PROMPT) + 2 and cache.calls == 2
    assert cache.features is None or cache.features.shape[1] == cache.length


def test_keep_returns_only_the_last_positions(new_cache):
    kept = new_cache().forward(PROMPT, keep=2)
    assert close(kept[0], fresh_logits(new_cache, PROMPT)[-2:])
    logits, hidden = new_cache().forward(PROMPT, output_hidden_states=True, keep=1)
    assert logits.shape == (1, 1, VOCAB) and hidden.shape[:2] == (1, 1)


def test_a_cropped_cache_continues_like_a_fresh_one(new_cache):
    cache = new_cache()
    cache.forward(PROMPT)
    cache.crop(3)
    assert cache.length == 3
    assert close(cache.forward(MORE)[0], fresh_logits(new_cache, PROMPT[:3] + MORE)[-2:])
    cache.crop(10)                                  # past its length: nothing changes
    assert cache.length == 5


def test_reorder_copies_rows_one_to_many_and_many_to_many(new_cache):
    cache = new_cache()
    cache.forward(PROMPT)
    cache.reorder(torch.tensor([0, 0, 0]))          # SMC-SD after its prefill: 1 -> N rows
    rows = [[5, 6], [7, 8], [9, 10]]
    logits = cache.forward(torch.tensor(rows))
    assert logits.shape == (3, 2, VOCAB)
    for row, tokens in enumerate(rows):
        assert close(logits[row], fresh_logits(new_cache, PROMPT + tokens)[-2:]), row
    cache.crop(len(PROMPT) + 1)
    cache.reorder(torch.tensor([2, 0, 0]))          # resampling: N -> N, a row copied twice
    last = cache.forward(torch.tensor([[1], [2], [3]]), keep=1)
    ancestors = [2, 0, 0]
    for row, token in enumerate([1, 2, 3]):
        expected = fresh_logits(new_cache, PROMPT + rows[ancestors[row]][:1] + [token])[-1:]
        assert close(last[row], expected), row


def test_a_cache_grows_past_its_capacity_and_keeps_every_position(new_cache, monkeypatch):
    """Torch caches start with room for 4 more positions here; llama.cpp contexts with 256 cells (its least:
    one decode batch)."""
    monkeypatch.setattr(GrowingLayer, "GROW_BY", 4)
    from pacer_core.llama import model
    monkeypatch.setattr(model.ContextPool.acquire, "__defaults__", (model.BATCH_TOKENS,))
    cache = new_cache()
    tokens = [(7 * index + 3) % VOCAB for index in range(model.BATCH_TOKENS + 8)]
    cache.forward(tokens[:3])
    for token in tokens[3:]:
        last = cache.forward([token])
    assert cache.length == len(tokens)
    assert close(last[0], fresh_logits(new_cache, tokens)[-1:])


def test_feed_sequence_feeds_what_the_cache_lacks(new_cache):
    cache = new_cache()
    first = cache.feed_sequence(PROMPT, keep=1)                   # an empty cache: the whole prompt
    assert first.shape == (1, VOCAB) and cache.length == len(PROMPT)
    assert close(first, fresh_logits(new_cache, PROMPT)[-1:])
    again = cache.feed_sequence(PROMPT)                           # nothing new: the last token is fed again
    assert again.shape == (1, VOCAB) and close(again, first) and cache.length == len(PROMPT)
    logits, hidden = cache.feed_sequence(PROMPT + MORE, [11], output_hidden_states=True)
    assert logits.shape == (3, VOCAB) and hidden.shape[0] == 3
    assert close(logits, fresh_logits(new_cache, PROMPT + MORE + [11])[-3:])
    rolled_back = cache.feed_sequence(PROMPT[:4], [12], keep=1)   # a shorter sequence: crop first
    assert cache.length == 5 and close(rolled_back, fresh_logits(new_cache, PROMPT[:4] + [12])[-1:])
