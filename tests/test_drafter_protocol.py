"""Every drafter kind is a ``drafters.Drafter`` (the members the decoders, the loader and the page use), and every
cache a run holds, the target's on either engine included, is a ``kvcache.ModelCache``. One case per row of the
drafter table, so a new row without a case fails here."""
import pytest
import torch

from pacer_core.drafters import Drafter, drafter_key, drafter_keys
from pacer_core.drafters.feature_head import random_head_drafter
from pacer_core.drafters.independent import IndependentDrafter
from pacer_core.drafters.kinds import entry_for_key
from pacer_core.drafters.self_quantized import SelfQuantizedDrafter
from pacer_core.kvcache import CachedModel, ModelCache
from pacer_core.testing.tiny import tiny_pair

VOCAB = 64


def gguf_drafter(target, draft_model, folder):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (bash setup.sh builds it)")
    from pacer_core.drafters.gguf_drafter import GGUFDrafter
    from pacer_core.testing.gguf_file import write_llama_gguf
    return GGUFDrafter.load(write_llama_gguf(target.model, target.tokenizer, folder / "tiny.gguf"), target.tokenizer,
                            VOCAB, "tiny")


BUILDS = {
    "small": lambda target, draft_model, folder: IndependentDrafter(draft_model, VOCAB, "tiny"),
    "head": lambda target, draft_model, folder: random_head_drafter(target.model, VOCAB, seed=3),
    "self-int8": lambda target, draft_model, folder: SelfQuantizedDrafter.from_target(target.model, VOCAB, "self-int8"),
    "self-int4": lambda target, draft_model, folder: SelfQuantizedDrafter.from_target(target.model, VOCAB, "self-int4"),
    "gguf": gguf_drafter,
}


@pytest.fixture(scope="module")
def tiny():
    """(a tiny pair, its drafter: an unrelated 1-layer model)."""
    return tiny_pair(draft_noise=None)


def test_every_row_of_the_drafter_table_has_a_case():
    assert set(BUILDS) == set(drafter_keys())


@pytest.mark.parametrize("key", sorted(BUILDS))
def test_every_drafter_kind_is_a_drafter_and_hands_out_a_model_cache(target, draft_model, key, tmp_path):
    drafter = BUILDS[key](target, draft_model, tmp_path)
    assert isinstance(drafter, Drafter)
    assert drafter.kind == entry_for_key(key).kind and drafter_key(drafter) == key
    target_cache = CachedModel(target.model, VOCAB, keep_features=drafter.reads_target_features)
    cache = drafter.new_cache(target_cache)
    assert isinstance(cache, ModelCache) and isinstance(target_cache, ModelCache)
    assert cache.feature_length == 0 and cache.device == torch.device("cpu")
    assert isinstance(drafter.describe(), dict) and drafter.describe()["name"] == drafter.name


def test_the_llama_cpp_targets_cache_is_a_model_cache(target, tmp_path):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (bash setup.sh builds it)")
    from pacer_core.llama.target import LlamaTarget
    from pacer_core.testing.gguf_file import write_llama_gguf
    engine = LlamaTarget.load(write_llama_gguf(target.model, target.tokenizer, tmp_path / "target.gguf"),
                              target.tokenizer, VOCAB)
    assert isinstance(engine.new_cache(), ModelCache)
