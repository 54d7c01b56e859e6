"""End to end on the real embedded pair (SmolLM2-135M-Instruct target, the shipped draft), fp32."""
import copy

import pytest
import torch

from pacer_core import generate
from pacer_core.analysis import attach_oracle

pytestmark = pytest.mark.embedded

PROMPTS = ["What is the capital of France?", "Write a Python function that adds two numbers.",
           "Once upon a time, a small dog"]


def test_embedded_pair_loads_with_the_shipped_draft(embedded_target, embedded_drafters):
    assert embedded_target.vocab_size == 49152
    assert "assets" in embedded_drafters.small_model_id
    assert sum(p.numel() for p in embedded_drafters.small_model.parameters()) < 0.2 * sum(
        p.numel() for p in embedded_target.model.parameters())


def test_the_default_cpu_pair_runs_packed_linear_layers_and_drafts_from_every_id(embedded_target, embedded_drafters):
    """What makes SD beat AR on a CPU (README, "Measured"): float32 weights packed once; and the shipped
    draft folder recommends drafting from all ids (its frequent_ids.json says default_kept 0)."""
    from pacer_core.packed_linear import packing_available

    if packing_available():
        assert embedded_target.describe(embedded_drafters.default)["linear_kernels"] == "oneDNN packed"
    assert embedded_drafters.default.kept_ids is None


def test_the_apps_fixed_length_starts_at_the_measured_cpu_gamma(embedded_target, embedded_drafters):
    """The shipped draft folder records the fixed length the benchmark measured fastest on a CPU: one token beside
    the target run by llama.cpp (a draft call of the small model costs 0.29 of its step), two beside torch (0.12)."""
    from dataclasses import replace

    from pacer_core.drafters import measured_gamma

    assert measured_gamma(replace(embedded_target, engine=None), embedded_drafters.default) == 2
    if embedded_target.engine is not None:
        assert measured_gamma(embedded_target, embedded_drafters.default) == 1


def test_greedy_fixed_and_pacer_are_token_identical_to_ar(embedded_target, embedded_drafters):
    for prompt in PROMPTS:
        reference = generate(embedded_target, embedded_drafters.default, "ar", prompt, max_new_tokens=20)
        for method, settings in (("fixed", {"gamma": 4}), ("fixed", {"gamma": 2}),
                                 ("pacer", {}), ("pacer", {"on_fail": "discard", "block_size": 2})):
            result = generate(embedded_target, embedded_drafters.default, method, prompt, max_new_tokens=20, **settings)
            assert result.token_ids == reference.token_ids, (method, settings, prompt)


def test_greedy_equals_transformers_assisted_generation(embedded_target, embedded_drafters):
    prompt_ids = embedded_target.encode_prompt(PROMPTS[0])
    input_ids = torch.tensor([prompt_ids])
    draft_model = embedded_drafters.small_model
    draft_config = copy.deepcopy(draft_model.generation_config)
    # transformers 5 reads these knobs from the assistant's generation_config, not from generate() kwargs
    draft_model.generation_config.num_assistant_tokens = 4
    draft_model.generation_config.num_assistant_tokens_schedule = "constant"
    draft_model.generation_config.assistant_confidence_threshold = 0.0
    try:
        assisted = embedded_target.model.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                                                  assistant_model=draft_model, do_sample=False,
                                                  max_new_tokens=20, pad_token_id=2)
    finally:
        draft_model.generation_config = draft_config
    ours = generate(embedded_target, embedded_drafters.default, "fixed", PROMPTS[0], max_new_tokens=20, gamma=4)
    assert ours.token_ids == assisted[0, len(prompt_ids):].tolist()


def test_oracle_lengths_are_consistent_with_a_long_fixed_draft(embedded_target, embedded_drafters):
    drafter = embedded_drafters.default
    result = generate(embedded_target, drafter, "fixed", PROMPTS[2], max_new_tokens=24, gamma=12)
    lengths = attach_oracle(embedded_target, drafter, embedded_target.encode_prompt(PROMPTS[2]), result, max_len=12)
    # gamma=12 is a forced long draft: each step's accepted count IS gamma*, and a draft the budget cut
    # short accepts min(its length, gamma*) since it is a prefix of that same greedy draft
    assert len(lengths) == len(result.events) > 1
    assert any(event.n_drafted == 12 for event in result.events)
    for event, length in zip(result.events, lengths):
        assert event.n_accepted == min(event.n_drafted, int(length)), (event.step, event.n_drafted, length)


def test_smc_runs_on_the_embedded_pair(embedded_target, embedded_drafters):
    result = generate(embedded_target, embedded_drafters.default, "smc", PROMPTS[0], max_new_tokens=16, temperature=0.7, n_particles=4,
                      draft_len=4, seed=1)
    assert result.info["approximate"] is True and 0 < len(result.token_ids) <= 16
    assert result.to_json()


def test_both_embedded_drafters_are_exact(embedded_target, embedded_drafters):
    from pacer_core.drafters import load_drafter
    references = [generate(embedded_target, embedded_drafters.default, "ar", prompt, max_new_tokens=24).token_ids
                  for prompt in PROMPTS]
    for name in ("small", "head"):
        accepted = 0
        drafter = load_drafter(embedded_target, embedded_drafters, name)
        for prompt, reference in zip(PROMPTS, references):
            result = generate(embedded_target, drafter, "fixed", prompt, max_new_tokens=24, gamma=3)
            assert result.token_ids == reference, (name, prompt)
            accepted += result.metrics.accepted_tokens
        assert accepted > 0, name   # both paths (accept and reject) are exercised


def test_embedded_drafters_load_by_name():
    from pacer_core import load_target
    head_target, head_drafters = load_target("embedded", "embedded-head", device="cpu", dtype="float32")
    # hf baselines keep the independent draft model beside the head
    assert head_drafters.default.kind == "feature-head" and head_drafters.small_model is not None
    assert head_target.describe(head_drafters.default)["drafter"]["kept_ids"] > 0
    _, small_drafters = load_target("embedded", "embedded-small", device="cpu", dtype="float32")
    assert small_drafters.default.kind == "independent"


def test_the_targets_own_weights_draft_ars_tokens_and_agree_far_more_than_the_small_draft(embedded_target,
                                                                                          embedded_drafters):
    """self-int8 on the real target: greedy fixed SD and PACER return AR's tokens, nearly every drafted token
    is accepted, and the app's fixed length starts at the one measured for it beside the target's engine (one
    token beside llama.cpp, where a self-int8 guess costs more than a target step; three beside torch)."""
    from dataclasses import replace

    from pacer_core.drafters import load_drafter, measured_gamma

    drafter = load_drafter(embedded_target, embedded_drafters, "self-int8")
    assert measured_gamma(replace(embedded_target, engine=None), drafter) == 3
    assert measured_gamma(embedded_target, drafter) == (3 if embedded_target.engine is None else 1)
    reference = generate(embedded_target, drafter, "ar", PROMPTS[1], max_new_tokens=24)
    fixed = generate(embedded_target, drafter, "fixed", PROMPTS[1], max_new_tokens=24, gamma=3)
    pacer = generate(embedded_target, drafter, "pacer", PROMPTS[1], max_new_tokens=24)
    assert fixed.token_ids == reference.token_ids == pacer.token_ids
    assert fixed.metrics.alpha > 0.8
