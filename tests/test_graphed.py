"""The graphed engine on the CPU (pacer_core/graphed/): everything but the CUDA capture itself.

The static-cache path must give what the dynamic cache gives: the same logits call by call (through crops, row
reorders, kept positions, hidden states and recorded features), the same greedy tokens for AR, fixed SD, PACER and
the feature head, the target's distribution for sampled fixed SD (chi-square), and SMC-SD runs. Graphs are stood in
for by a fake capturer that, like a CUDA graph, returns the SAME output tensors at every replay and can only see
new inputs through the static buffers: a step that read anything else would replay stale values and fail these
tests. The real capture (graphs.cuda_capturer) needs a GPU: tests/test_cuda_tier.py runs with PACER_GRAPHED=1 there
(scripts/device_check.sh)."""
import gc

import pytest
import torch

from pacer_core import Autoregressive, FixedSpeculative, Pacer, graphed, validate_settings
from pacer_core.decoders.base import make_state
from pacer_core.decoders.smc import SMC
from pacer_core.drafters.feature_head import random_head_drafter
from pacer_core.graphed import GraphedCache, GraphedEngine, GraphPool, StepShape, install_engine
from pacer_core.graphed.static_kv import causal_mask
from pacer_core.kvcache import CachedModel
from pacer_core.preverifier import ConfidencePreVerifier
from pacer_core.testing.enumeration import chi_square_p_value, target_sequence_distribution
from pacer_core.testing.runs import run_ids, sample_counts
from pacer_core.testing.tiny import tiny_pair

PROMPTS = [[1, 2, 3], [7, 7, 7, 7, 9], list(range(20))]
SIGNIFICANCE = 1e-3


class FakeCapturer:
    """Stands in for CUDA graph capture on the CPU: a capture runs the step once and keeps its output tensors; a
    replay recomputes the step and copies the result INTO those kept tensors, returning them (a graph's outputs
    are static). Counts captures."""

    def __init__(self):
        self.captures = 0

    def __call__(self, step):
        self.captures += 1
        static_outputs = step()

        def replay():
            for kept, fresh in zip(static_outputs, step()):
                if kept is not None:
                    kept.copy_(fresh)
            return static_outputs

        return replay


def graphed_pair(capturer=None, capacity=64, **pair_options):
    """A tiny pair whose target and draft model have graphed engines (small capacity: quick on the CPU)."""
    target, drafter = tiny_pair(**pair_options)
    for model in (target.model, drafter.model):
        install_engine(model, GraphedEngine(model, capacity=capacity, capturer=capturer))
    return target, drafter


@pytest.fixture
def graphs_asked(monkeypatch):
    monkeypatch.setenv(graphed.GRAPHED_ENV, "1")


def without_graphs(monkeypatch, function, *args, **kwargs):
    monkeypatch.delenv(graphed.GRAPHED_ENV, raising=False)
    try:
        return function(*args, **kwargs)
    finally:
        monkeypatch.setenv(graphed.GRAPHED_ENV, "1")


@pytest.mark.pure
def test_causal_mask_hides_stale_and_future_positions():
    mask = causal_mask(torch.tensor([2, 3]), torch.arange(5), torch.float32)
    blocked = torch.finfo(torch.float32).min
    assert mask.shape == (1, 1, 2, 5)
    assert mask[0, 0].tolist() == [[0, 0, 0, blocked, blocked], [0, 0, 0, 0, blocked]]


@pytest.mark.pure
def test_a_call_reads_the_span_covering_its_last_position():
    from pacer_core.graphed.static_kv import span_for

    assert [span_for(end, 2304) for end in (1, 130, 256, 257, 2300)] == [256, 256, 256, 512, 2304]
    assert span_for(100, 64) == 64                                   # never past the capacity


@pytest.mark.pure
def test_default_capacity_holds_the_longest_run_the_app_allows():
    from pacer_core.settings import Limits

    assert graphed.default_capacity(Limits()) == 2304        # 1536 + 512 + 64 + 1, rounded up to 256
    assert graphed.default_capacity(Limits(max_prompt_tokens=10, max_new_tokens=10)) == 256


@pytest.mark.pure
def test_graph_pool_captures_each_key_once_and_replays_its_static_outputs():
    capturer = FakeCapturer()
    pool = GraphPool(capturer, graphable=lambda key: key.fed <= 4)
    source = torch.zeros(3)
    step = lambda: (source * 2,)                                  # noqa: E731 - reads only the static buffer
    one = StepShape(1, 1, 1, False, False, 256)
    first, replayed = pool.run(one, step)
    source.fill_(5.0)
    second, _ = pool.run(one, step)
    assert replayed and first[0] is second[0] and second[0].tolist() == [10.0] * 3   # same tensor, new values
    pool.run(StepShape(1, 2, 2, False, False, 256), step)
    pool.run(StepShape(1, 2, 2, False, False, 256), step)
    outputs, replayed = pool.run(StepShape(1, 9, None, False, False, 256), step)          # not graphable: eager
    assert not replayed and outputs[0] is not first[0]
    assert capturer.captures == pool.captures == 2 and pool.replays == 4 and pool.capture_seconds >= 0


@pytest.mark.pure
def test_a_failed_capture_falls_back_to_eager_and_says_why():
    def failing(step):
        raise RuntimeError("operation not permitted when stream is capturing")

    pool = GraphPool(failing)
    outputs, replayed = pool.run(StepShape(1, 1, 1, False, False, 256), lambda: (torch.ones(2),))
    assert not replayed and outputs[0].tolist() == [1.0, 1.0]
    assert "RuntimeError" in pool.fallback_reason and "capturing" in pool.fallback_reason and not pool.active
    assert graphed.capture_line(torch.nn.Linear(2, 2)) == "graphed engine: not used yet in this process"
    assert not pool.run(StepShape(1, 1, 1, False, False, 256), lambda: (torch.ones(2),))[1]


@pytest.mark.parametrize("capturer", [None, "fake"])
def test_graphed_cache_returns_the_dynamic_cache_logits_call_by_call(capturer):
    target, _ = tiny_pair(scale=3.0)
    engine = install_engine(target.model, GraphedEngine(target.model, capacity=32,
                                                        capturer=FakeCapturer() if capturer else None))
    reference, static = CachedModel(target.model, target.vocab_size, keep_features=True), \
        GraphedCache(engine, target.vocab_size, keep_features=True)

    def same(*call, **options):
        expected, got = reference.forward(*call, **options), static.forward(*call, **options)
        for want, have in zip(expected if isinstance(expected, tuple) else (expected,),
                              got if isinstance(got, tuple) else (got,)):
            assert want.shape == have.shape and torch.allclose(want, have, atol=1e-5), call
        assert reference.length == static.length and torch.allclose(reference.features, static.features, atol=1e-5)

    same([1, 2, 3, 4, 5], keep=1)
    for token in (6, 7, 8):
        same([token], keep=1)
    same([9, 10, 11], keep=3)
    reference.crop(6), static.crop(6)
    same([12, 13], output_hidden_states=True, keep=2)
    same([14], keep=1)
    expand = torch.zeros(3, dtype=torch.long)
    reference.reorder(expand), static.reorder(expand)                           # 1 row -> 3 rows
    same(torch.tensor([[1, 2], [3, 4], [5, 6]]), keep=2)
    shuffle = torch.tensor([2, 2, 0])
    reference.reorder(shuffle), static.reorder(shuffle)                         # 3 -> 3, in place
    same(torch.tensor([[7], [8], [9]]), keep=1)
    same(torch.tensor([[7], [8], [9]]), keep=1)
    with pytest.raises(ValueError, match="rows change only through reorder"):
        static.forward([1])
    if capturer:
        assert engine.captures >= 4 and "CUDA graphs" in engine.describe()


@pytest.mark.parametrize("capturer", [None, "fake"])
def test_greedy_fixed_pacer_and_ar_on_the_graphed_engine_return_the_dynamic_tokens(capturer, graphs_asked,
                                                                                   monkeypatch):
    target, drafter = graphed_pair(FakeCapturer() if capturer else None, scale=6.0, draft_noise=0.3, eos_token_id=63)
    decoders = [Autoregressive(), FixedSpeculative(1), FixedSpeculative(4),
                Pacer(2, 8, 0.3, ConfidencePreVerifier(), "submit"), Pacer(1, 4, 0.99, ConfidencePreVerifier(), "discard")]
    for prompt in PROMPTS:
        reference = without_graphs(monkeypatch, run_ids, Autoregressive(), target, drafter, prompt, max_new_tokens=30)
        for decoder in decoders:
            assert run_ids(decoder, target, drafter, prompt, max_new_tokens=30) == reference, (decoder.info(), prompt)
    target_engine = graphed.engine_for(target.model)
    assert len(target_engine.slots) == 1          # every run reused the first run's slot (and its graphs)
    line = graphed.capture_line(target.model, drafter.model)
    if capturer:
        replays = sum(slot.pool.replays for slot in target_engine.slots)
        assert target_engine.captures >= 3 and replays > target_engine.captures
        assert line.startswith("graphs captured in ") and f"({target_engine.captures + graphed.engine_for(drafter.model).captures} shapes)" in line
    else:
        assert "eager" in line


def test_a_model_whose_capture_fails_decodes_eagerly_and_the_line_says_why(graphs_asked, monkeypatch):
    def failing(step):
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

    target, drafter = graphed_pair(failing, scale=6.0)
    reference = without_graphs(monkeypatch, run_ids, Autoregressive(), target, drafter, PROMPTS[0], max_new_tokens=20)
    assert run_ids(FixedSpeculative(4), target, drafter, PROMPTS[0], max_new_tokens=20) == reference
    line = graphed.capture_line(target.model, drafter.model)
    assert line.startswith("graphed engine: eager after a failed capture") and "not permitted" in line


def test_the_feature_head_drafts_the_same_greedy_tokens_over_a_graphed_target(graphs_asked, monkeypatch):
    target, draft = graphed_pair(FakeCapturer(), scale=6.0)
    head = random_head_drafter(target.model, target.vocab_size, scale=3.0)
    for prompt in PROMPTS:
        reference = without_graphs(monkeypatch, run_ids, Autoregressive(), target, head, prompt, max_new_tokens=24)
        for decoder in (FixedSpeculative(3), Pacer(1, 6, 0.3, ConfidencePreVerifier(), "submit")):
            assert run_ids(decoder, target, head, prompt, max_new_tokens=24) == reference, (decoder.info(), prompt)


def test_the_hook_builds_graphed_caches_only_when_asked(monkeypatch):
    target, drafter = graphed_pair()
    settings = validate_settings(max_new_tokens=4)
    monkeypatch.delenv(graphed.GRAPHED_ENV, raising=False)
    state = make_state(target, drafter, [1, 2], settings, with_draft=True)
    assert type(state.target) is CachedModel and type(state.draft) is CachedModel
    monkeypatch.setenv(graphed.GRAPHED_ENV, "1")
    state = make_state(target, drafter, [1, 2], settings, with_draft=True)
    assert isinstance(state.target, GraphedCache) and isinstance(state.draft, GraphedCache)
    assert isinstance(make_state(target, drafter, [1, 2], settings, with_draft=False).target, GraphedCache)


@pytest.mark.pure
def test_models_the_engine_cannot_run_exactly_are_named_with_the_reason():
    from types import SimpleNamespace as Config

    from transformers import LlamaConfig, MistralConfig, Qwen2Config

    def model(config):
        return Config(config=config)

    assert graphed.unsupported(model(LlamaConfig())) is None and graphed.unsupported(model(Qwen2Config())) is None
    assert "sliding window" in graphed.unsupported(model(MistralConfig()))
    assert "sliding window" in graphed.unsupported(model(Config(layer_types=["full_attention", "sliding_attention"])))
    assert "flash_attention_2" in graphed.unsupported(model(Config(_attn_implementation="flash_attention_2")))


def test_a_model_split_over_devices_runs_eagerly(monkeypatch):
    """Weights on two devices (device_map="auto" may split them): a step would copy between devices, which a
    capture refuses, so its runs take the eager cache instead of failing a capture (here the head on "meta")."""
    target, drafter = graphed_pair()
    assert graphed.unsupported(target.model) is None
    monkeypatch.setenv(graphed.GRAPHED_ENV, "1")
    target.model.lm_head.to("meta")           # this pair is the test's own
    assert "split over 2 devices (cpu, meta)" in graphed.unsupported(target.model)
    state = make_state(target, drafter, [1, 2], validate_settings(max_new_tokens=4), with_draft=False)
    assert type(state.target) is CachedModel


def test_runs_alive_together_lease_different_slots_and_a_dropped_run_gives_its_slot_back():
    target, _ = graphed_pair()
    engine = graphed.engine_for(target.model)
    first, second = GraphedCache(engine, target.vocab_size), GraphedCache(engine, target.vocab_size)
    assert first.slot is not second.slot and len(engine.slots) == 2
    kept = second.slot
    del second
    gc.collect()
    assert GraphedCache(engine, target.vocab_size).slot is kept and len(engine.slots) == 2


def test_a_run_longer_than_the_capacity_grows_its_slot_and_keeps_the_tokens(graphs_asked, monkeypatch):
    target, drafter = graphed_pair(FakeCapturer(), capacity=16, scale=6.0)
    prompt = list(range(10))
    reference = without_graphs(monkeypatch, run_ids, Autoregressive(), target, drafter, prompt, max_new_tokens=40)
    assert run_ids(FixedSpeculative(4), target, drafter, prompt, max_new_tokens=40) == reference
    engine = graphed.engine_for(target.model)
    assert engine.slots[0].capacity >= 50 and any("grew" in note for note in engine.notes)


def test_a_run_crossing_a_span_captures_the_next_span_and_keeps_the_tokens(graphs_asked, monkeypatch):
    capturer = FakeCapturer()
    target, drafter = graphed_pair(capturer, capacity=512, scale=6.0)
    prompt = [index % 64 for index in range(250)]
    reference = without_graphs(monkeypatch, run_ids, Autoregressive(), target, drafter, prompt, max_new_tokens=20)
    for decoder in (Autoregressive(), FixedSpeculative(3)):
        assert run_ids(decoder, target, drafter, prompt, max_new_tokens=20) == reference, decoder.info()
    spans = {shape.span for slot in graphed.engine_for(target.model).slots for shape in slot.pool.replays_by_key}
    assert spans == {256, 512}


def test_smc_runs_on_the_graphed_engine_like_on_the_dynamic_cache(graphs_asked, monkeypatch):
    target, drafter = graphed_pair(FakeCapturer(), scale=2.0)
    for seed in (0, 1):
        settings = dict(max_new_tokens=20, temperature=1.0, n_particles=4, draft_len=3, seed=seed, ess_threshold=1.0)
        *_, expected = without_graphs(monkeypatch, lambda: list(SMC().run(target, drafter, [1, 2, 3],
                                                                          validate_settings(**settings))))
        *events, got = SMC().run(target, drafter, [1, 2, 3], validate_settings(**settings))
        assert got.token_ids == expected.token_ids and len(got.token_ids) == 20
        assert any(event.resampled for event in events)


@pytest.fixture(scope="module")
def six_token_graphed_pair():
    return graphed_pair(FakeCapturer(), vocab_size=5, scale=6.0, draft_noise=None, target_layers=1, hidden=16)


@pytest.mark.statistical
def test_sampled_fixed_sd_on_the_graphed_engine_matches_the_target_distribution(six_token_graphed_pair,
                                                                                monkeypatch):
    monkeypatch.setenv(graphed.GRAPHED_ENV, "1")
    target, drafter = six_token_graphed_pair
    truth = target_sequence_distribution(target.model, [1, 2], 3, temperature=0.8, top_k=4)
    counts = sample_counts(FixedSpeculative(2), target, drafter, [1, 2], 3, 1000, temperature=0.8, top_k=4)
    assert chi_square_p_value(counts, truth) > SIGNIFICANCE
    assert graphed.engine_for(target.model).captures > 0


@pytest.mark.embedded
def test_the_embedded_target_on_the_graphed_engine_gives_the_dynamic_tokens(embedded_target, embedded_drafters,
                                                                            monkeypatch):
    """The real SmolLM2 target (30 layers, grouped-query attention) with the feature head, which keeps the target on
    torch: greedy AR, fixed SD and PACER return the dynamic cache's tokens on the static one."""
    from pacer_core.drafters import load_drafter

    head = load_drafter(embedded_target, embedded_drafters, "head")
    prompt = embedded_target.tokenizer("The capital of France is")["input_ids"]
    monkeypatch.delenv(graphed.GRAPHED_ENV, raising=False)
    reference = run_ids(Autoregressive(), embedded_target, head, prompt, max_new_tokens=24)
    monkeypatch.setenv(graphed.GRAPHED_ENV, "1")
    for decoder in (Autoregressive(), FixedSpeculative(4), Pacer(2, 8, 0.3)):
        assert run_ids(decoder, embedded_target, head, prompt, max_new_tokens=24) == reference, decoder.info()
    assert graphed.engine_for(embedded_target.model).slots        # the static path ran
