"""Tiny random Llama pairs built in-process, and a minimal tokenizer for them."""
from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from ..models import target_from_models


class TinyTokenizer:
    """Maps id i to the text 't<i> ' ; enough for decoders that only need decode()."""

    chat_template = None
    eos_token_id = None

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size

    def decode(self, ids, skip_special_tokens=False):
        return "".join(f"t{int(i)} " for i in ids)

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [int(part[1:]) for part in text.split() if part.startswith("t")]}

    def get_vocab(self):
        return {f"t{i}": i for i in range(self.vocab_size)}

    def __len__(self):
        return self.vocab_size


def tiny_llama(vocab_size=64, hidden=32, layers=2, seed=0, eos_token_id=None, scale=1.0):
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=hidden * 2,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, eos_token_id=eos_token_id, bos_token_id=None,
                         pad_token_id=None, tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    return model.eval()


def noisy_copy(model, noise: float, seed: int):
    """A draft that agrees with the target often but not always: its weights plus Gaussian noise."""
    import copy

    generator = torch.Generator().manual_seed(seed)
    draft = copy.deepcopy(model)
    with torch.no_grad():
        for parameter in draft.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * noise * parameter.std())
    return draft.eval()


def tiny_pair(vocab_size=64, target_seed=0, draft_seed=1, eos_token_id=None, scale=1.0, draft_noise=0.3,
              target_layers=2, hidden=32):
    """(the pair, its drafter): target a 2-layer Llama, drafter a noisy copy of it (draft_noise=None: an unrelated
    1-layer model) as an ``IndependentDrafter``; ``LoadedDrafters.around(drafter)`` builds the other drafters."""
    target = tiny_llama(vocab_size, hidden=hidden, layers=target_layers, seed=target_seed, eos_token_id=eos_token_id,
                        scale=scale)
    if draft_noise is None:
        draft = tiny_llama(vocab_size, hidden=16, layers=1, seed=draft_seed, eos_token_id=eos_token_id, scale=scale)
    else:
        draft = noisy_copy(target, draft_noise, draft_seed)
    tokenizer = TinyTokenizer(vocab_size)
    return target_from_models(target, draft, tokenizer, "tiny-target", "tiny-draft", use_chat_template=False)
