"""Model loading: saved pairs from disk, tokenizer checks, padded vocabularies, the embedded target."""
import time

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from pacer_core import ModelLoadError, generate, load_target
from pacer_core.models import check_tokenizers_match
from pacer_core.testing.tiny import tiny_llama


def word_tokenizer(words):
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=words[0]))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token=words[0], eos_token=words[1])


WORDS = ["<unk>", "<eos>"] + [f"w{i}" for i in range(62)]


def save_model(directory, model, tokenizer):
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)


def test_load_saved_pair_from_temp_dirs(tmp_path):
    tokenizer = word_tokenizer(WORDS)
    target_dir = save_model(tmp_path / "target", tiny_llama(64, seed=0), tokenizer)
    draft_dir = save_model(tmp_path / "draft", tiny_llama(64, hidden=16, layers=1, seed=1), tokenizer)
    target, drafters = load_target(target_dir, draft_dir, device="cpu", dtype="float32")
    assert target.vocab_size == 64 and target.dtype == torch.float32 and not target.model.training
    ar = generate(target, drafters.default, "ar", "w3 w4 w5", max_new_tokens=8, chat=False)
    fixed = generate(target, drafters.default, "fixed", "w3 w4 w5", max_new_tokens=8, chat=False)
    assert len(ar.token_ids) == 8 and fixed.token_ids == ar.token_ids


def test_tokenizer_mismatch_names_both_models(tmp_path):
    shuffled = WORDS[:2] + list(reversed(WORDS[2:]))
    target_dir = save_model(tmp_path / "target", tiny_llama(64), word_tokenizer(WORDS))
    draft_dir = save_model(tmp_path / "draft", tiny_llama(64, seed=1), word_tokenizer(shuffled))
    with pytest.raises(ModelLoadError) as error:
        load_target(target_dir, draft_dir, device="cpu", dtype="float32")
    assert "Tokenizers do not match" in str(error.value)
    assert target_dir in str(error.value) and draft_dir in str(error.value)


def test_padded_vocab_pair_is_accepted(tmp_path):
    """Like Qwen2.5 0.5B vs 7B: same tokenizer, embedding matrices padded to different sizes."""
    tokenizer = word_tokenizer(WORDS)
    target_dir = save_model(tmp_path / "target", tiny_llama(80, seed=0), tokenizer)
    draft_dir = save_model(tmp_path / "draft", tiny_llama(72, seed=1), tokenizer)
    check_tokenizers_match(tokenizer, tokenizer, "t", "d")
    target, drafters = load_target(target_dir, draft_dir, device="cpu", dtype="float32")
    assert target.vocab_size == 72
    ar = generate(target, drafters.default, "ar", "w3 w4", max_new_tokens=6, chat=False)
    pacer = generate(target, drafters.default, "pacer", "w3 w4", max_new_tokens=6, chat=False)
    assert pacer.token_ids == ar.token_ids and max(ar.token_ids) < 72


def test_missing_local_path_is_a_clear_error(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_target(str(tmp_path / "nowhere"), str(tmp_path / "nowhere"), device="cpu")


def test_unknown_hub_id_offline_is_a_clear_error(monkeypatch):
    import huggingface_hub.constants

    # huggingface_hub reads HF_HUB_OFFLINE once, on import: without the constant the loader goes online and
    # waits out its retries (~15 s idle) before failing with the same error
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelLoadError, match="Could not load the target model"):
        load_target("no-such-org/no-such-model-xyz", "embedded", device="cpu")


@pytest.mark.embedded
def test_embedded_target_loads_fast_and_answers_sensibly():
    from pacer_core.embedded import ensure_embedded_target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory = ensure_embedded_target()  # converts on the first ever call
    started = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    assert time.perf_counter() - started < 5.0
    from pacer_core.models import target_from_models

    target, drafter = target_from_models(model, model, tokenizer, "target", "target")
    result = generate(target, drafter, "ar", "What is the capital of France?", max_new_tokens=12)
    assert "Paris" in result.text
