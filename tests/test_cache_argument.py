"""The KV cache reaches a transformers model under the name its release takes it by: ``cache`` from transformers
5.24, ``past_key_values`` before. A name the forward does not know disappears into its ``**kwargs``: the model
then builds a fresh cache each call and decodes without context (on transformers 5.17 every greedy speculative
run came out different from AR's). ``kvcache.forward_with_cache`` turns such a mismatch into an error."""
from __future__ import annotations

import pytest
import torch
from transformers import LlamaForCausalLM, LlamaModel

from pacer_core.decoders import Autoregressive
from pacer_core.drafters.independent import IndependentDrafter
from pacer_core.kvcache import CachedModel, cache_keyword
from pacer_core.testing.runs import greedy_rejections, run_ids
from pacer_core.testing.tiny import tiny_pair

pytestmark = pytest.mark.pure


class OlderNamesLlama(LlamaForCausalLM):
    """A Llama whose forward takes its cache as ``past_key_values`` (transformers before 5.24)."""

    def forward(self, input_ids=None, past_key_values=None, use_cache=None, output_hidden_states=None,
                logits_to_keep=0, **kwargs):
        assert "cache" not in kwargs, "the cache came under the new name"
        return super().forward(input_ids=input_ids, cache=past_key_values, use_cache=use_cache,
                               output_hidden_states=output_hidden_states, logits_to_keep=logits_to_keep, **kwargs)


class OlderNamesLlamaModel(LlamaModel):
    def forward(self, input_ids=None, past_key_values=None, use_cache=None, **kwargs):
        assert "cache" not in kwargs, "the cache came under the new name"
        return super().forward(input_ids=input_ids, cache=past_key_values, use_cache=use_cache, **kwargs)


class CacheIgnoringLlama(LlamaForCausalLM):
    """A Llama that drops the cache it is handed, as a forward does with a name it does not know."""

    def forward(self, input_ids=None, cache=None, **kwargs):
        return super().forward(input_ids=input_ids, **kwargs)


def test_the_keyword_follows_the_forwards_signature():
    assert cache_keyword(LlamaForCausalLM) == "cache"
    assert cache_keyword(OlderNamesLlama) == "past_key_values"
    assert cache_keyword(OlderNamesLlamaModel) == "past_key_values"


def test_a_release_with_the_older_name_decodes_like_this_one():
    target, drafter = tiny_pair(scale=6.0, draft_noise=0.2)
    expected = {tuple(prompt): run_ids(Autoregressive(), target, drafter, prompt, max_new_tokens=24)
                for prompt in ([1, 2, 3], list(range(20)))}
    target.model.__class__ = OlderNamesLlama
    drafter.model.__class__ = OlderNamesLlama
    for prompt, tokens in expected.items():
        assert run_ids(Autoregressive(), target, drafter, list(prompt), max_new_tokens=24) == list(tokens)
    assert greedy_rejections(target, drafter, max_new_tokens=24) > 0


def test_a_reduced_vocabulary_draft_feeds_its_decoder_under_the_older_name():
    target, noisy = tiny_pair(scale=6.0, draft_noise=0.2)
    drafter = IndependentDrafter(noisy.model, target.vocab_size, "kept", kept_ids=torch.arange(0, 64, 2))
    tokens = torch.tensor([[1, 2, 3, 4, 5]])
    expected = drafter.new_cache(None).forward(tokens)
    noisy.model.model.__class__ = OlderNamesLlamaModel
    cache = drafter.new_cache(None)
    fed_in_two = torch.cat([cache.forward(tokens[:, :3]), cache.forward(tokens[:, 3:])], 1)
    kept = expected.isfinite()
    assert torch.allclose(fed_in_two[kept], expected[kept], atol=1e-5)     # the second call saw the first three


def test_a_model_that_drops_the_cache_is_an_error_not_wrong_tokens():
    target, _ = tiny_pair()
    target.model.__class__ = CacheIgnoringLlama
    cache = CachedModel(target.model, target.vocab_size)
    with pytest.raises(RuntimeError, match="did not use the KV cache"):
        cache.forward(torch.tensor([[1, 2, 3]]))
