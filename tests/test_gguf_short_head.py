"""The gguf drafter's short head (pacer_core/llama/short_head.py): the copy of a file with its token rows
reordered and ``pacer.head_rows`` set, read back by GGUF's own layout; the drafter over it computes the full
file's logits on the kept ids and q = 0 elsewhere (SMC-SD: q > 0 everywhere); greedy fixed SD and PACER return
AR's tokens and sampled decoders match the target's law with it (a new proposer gets both tests)."""

import struct

import numpy as np
import pytest
import torch

from pacer_core import FixedSpeculative, Pacer
from pacer_core.drafters import valid_drafter_name
from pacer_core.drafters.gguf_drafter import GGUFDrafter, frequent_ids_for_gguf, short_head_choice
from pacer_core.drafters.vocabulary import OFF_VOCABULARY_MASS
from pacer_core.llama import short_head
from pacer_core.preverifier import ConfidencePreVerifier
from pacer_core.testing.gguf_file import write_llama_gguf
from pacer_core.testing.runs import greedy_rejections, p_value_against_target
from pacer_core.testing.tiny import tiny_pair

llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (bash setup.sh builds it)")

SIGNIFICANCE = 1e-3
RANKED = [5, 9, 1, 2, 33, 17, 40, 3, 8, 60, 12, 27, 51, 25, 4, 6]     # a made-up ranking of the tiny vocabulary


def tiny_gguf(tmp_path, model, tokenizer, **options):
    return write_llama_gguf(model, tokenizer, tmp_path / "draft.gguf", **options)


@pytest.mark.pure
def test_the_copy_moves_only_the_token_rows_and_adds_the_head_key(tmp_path):
    target, draft = tiny_pair()
    source = tiny_gguf(tmp_path, draft.model, target.tokenizer)
    order = short_head.full_order(RANKED, 64)
    copy = short_head.write_short_head_file(source, tmp_path / "short.gguf", order, len(RANKED))
    before, after = short_head.read_layout(source.read_bytes()), short_head.read_layout(copy.read_bytes())
    assert after.metadata_count == before.metadata_count + 2
    assert after.data_start % after.alignment == 0
    source_bytes, copy_bytes = source.read_bytes(), copy.read_bytes()
    moved = 0
    for old, new in zip(before.tensors, after.tensors):
        assert (old.name, old.dims, old.ggml_type, old.offset) == (new.name, new.dims, new.ggml_type, new.offset)
        size = short_head.row_bytes(old) * int(np.prod(old.dims[1:]))
        old_data = np.frombuffer(source_bytes, np.uint8, size, before.data_start + old.offset)
        new_data = np.frombuffer(copy_bytes, np.uint8, size, after.data_start + new.offset)
        if old.name in short_head.TOKEN_ROWS:
            assert (new_data.reshape(64, -1) == old_data.reshape(64, -1)[order]).all()
            moved += 1
        else:
            assert (new_data == old_data).all()
    assert moved >= 1
    key = short_head.HEAD_ROWS_KEY.encode()
    at = copy_bytes.index(key) + len(key)
    assert struct.unpack_from("<II", copy_bytes, at) == (short_head.UINT32, len(RANKED))


@pytest.mark.pure
def test_the_order_puts_the_ranked_ids_first_and_every_other_id_after_once():
    order = short_head.full_order([7, 2, 5], 10)
    assert order.tolist() == [7, 2, 5, 0, 1, 3, 4, 6, 8, 9]
    vocabulary = short_head.ShortHeadVocabulary.from_order(order, 3)
    assert vocabulary.kept_ids.tolist() == [7, 2, 5]
    assert [int(vocabulary.position_of[token]) for token in (7, 2, 5, 0, 9)] == [0, 1, 2, 3, 9]
    with pytest.raises(ValueError):
        short_head.full_order([1, 1], 10)


@pytest.mark.pure
def test_a_file_that_cannot_have_a_short_head_says_why(tmp_path):
    not_gguf = tmp_path / "x.gguf"
    not_gguf.write_bytes(b"GGML" + bytes(64))
    with pytest.raises(short_head.ShortHeadUnavailable, match="not a GGUF"):
        short_head.read_layout(not_gguf.read_bytes())
    target, draft = tiny_pair()
    source = tiny_gguf(tmp_path, draft.model, target.tokenizer)
    with pytest.raises(short_head.ShortHeadUnavailable, match="not short"):
        short_head.prepare(source, RANKED, 64, tmp_path)
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(source.read_bytes()[:200])
    with pytest.raises(short_head.ShortHeadUnavailable):
        short_head.token_count(truncated)


def short_and_full(tmp_path, float16=False, vocab_size=64, ranked=RANKED, **pair):
    target, draft = tiny_pair(vocab_size=vocab_size, **pair)
    source = tiny_gguf(tmp_path, draft.model, target.tokenizer, float16=float16)
    full = GGUFDrafter.load(source, target.tokenizer, vocab_size, "full")
    short = GGUFDrafter.load(source, target.tokenizer, vocab_size, "short", kept_ids=ranked, head_rows=len(ranked))
    return target, full, short


def test_the_short_head_computes_the_full_files_logits_on_the_kept_ids_and_none_elsewhere(tmp_path):
    target, full, short = short_and_full(tmp_path)
    assert short.short_head is not None and short.describe()["kept_ids"] == len(RANKED)
    assert short.model.path != full.model.path
    prompt = [3, 9, 27, 17, 51, 25, 63, 0]
    full_logits, short_logits = full.new_cache().forward(prompt), short.new_cache().forward(prompt)
    kept = torch.tensor(RANKED)
    assert torch.allclose(short_logits[..., kept], full_logits[..., kept], atol=1e-4)
    others = torch.ones(64, dtype=torch.bool)
    others[kept] = False
    assert torch.isneginf(short_logits[..., others]).all()
    cache = short.new_cache(None, full_support=True)
    probabilities = torch.softmax(cache.forward(prompt, keep=1)[0, -1], dim=-1)
    assert (probabilities > 0).all()
    assert probabilities[others].sum().item() == pytest.approx(OFF_VOCABULARY_MASS, rel=1e-3)


def test_greedy_fixed_and_pacer_with_a_short_head_return_ars_tokens(tmp_path):
    ranked = list(range(0, 64, 2)) + [63]        # half the ids and the end-of-sequence id
    target, _, short = short_and_full(tmp_path, ranked=ranked, scale=6.0, eos_token_id=63)
    also = [Pacer(1, 8, None, ConfidencePreVerifier(), "submit"), Pacer(2, 12, 0.5, ConfidencePreVerifier(), "submit")]
    assert greedy_rejections(target, short, also=also) > 0


@pytest.mark.statistical
@pytest.mark.parametrize("decoder", [FixedSpeculative(2), Pacer(1, 2, 0.5, ConfidencePreVerifier(), "submit")],
                         ids=["fixed", "pacer"])
def test_sampling_with_a_short_head_matches_the_target(tmp_path, decoder):
    """Three of five ids drafted: the two others are never proposed and come only from the residual."""
    target, _, short = short_and_full(tmp_path, float16=True, vocab_size=5, ranked=[3, 0, 2], scale=6.0,
                                      target_layers=1, hidden=32, draft_noise=0.5)
    assert p_value_against_target(decoder, target, short, [1, 2], 3, 1000, temperature=0.8, top_k=4) > SIGNIFICANCE


@pytest.mark.pure
def test_only_gguf_n_gives_the_embedded_file_a_short_head(monkeypatch):
    class Embedded:
        name = "SmolLM2-135M-Instruct (embedded GGUF)"

    class Drafters:
        gguf_file = ""

    monkeypatch.delenv("PACER_DRAFT_GGUF", raising=False)
    assert short_head_choice(Embedded(), Drafters()) == (None, 0)
    ranked, rows = short_head_choice(Embedded(), Drafters(), "gguf-8192")
    assert rows == 8192 and ranked[:3] == frequent_ids_for_gguf()[:3]
    assert short_head_choice(Embedded(), Drafters(), "gguf-all") == (None, 0)
    assert valid_drafter_name("gguf-8192") and valid_drafter_name("gguf-all") and not valid_drafter_name("gguf-x")
    Drafters.gguf_file = "/elsewhere/model.gguf"
    assert short_head_choice(Embedded(), Drafters(), "gguf-8192") == (None, 0)
