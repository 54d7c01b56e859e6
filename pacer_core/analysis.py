"""Analysis after a run: the oracle draft length γ* of every step, for the timeline plot, the
target's log-likelihood of an output (how likely the target finds what a method wrote), and how far the
draft's distribution is from the target's along an output (what SMC-SD's importance weights must correct).

γ*_t is how many leading tokens of a forced long draft the target would accept at step t.
Greedy: the draft's greedy continuation from the true prefix matches the target's output exactly
as long as its teacher-forced argmax does, so ONE draft forward over prompt + output gives every
γ*_t. Sampling: we report the expected accepted length along the emitted path,
Σ_k Π_{j<k} a_j with a_j = Σ_x min(p_j(x), q_j(x)) (one forward of each model)."""
from __future__ import annotations

import torch

from .events import StepEvent
from .kvcache import prefill_prompt
from .particles import proposal_kl
from .sampling import chosen_log_probs, logits_to_probs, token_log_probs


def step_starts(events) -> list[int]:
    """Output position (0-based, in generated tokens) at which each step began."""
    starts, emitted = [], 0
    for event in events:
        if isinstance(event, StepEvent):
            starts.append(emitted)
            emitted = event.total_new_tokens
    return starts


@torch.inference_mode()
@torch.inference_mode()
def target_teacher_forced_logits(target, drafter, prompt_ids, output_ids) -> torch.Tensor:
    """The target's logits predicting each output token: [len(output), V], from one feed on the engine the target
    runs on beside ``drafter`` (``llama.engine.target_cache``: llama.cpp where it runs the target, a tenth of a torch
    forward's time)."""
    from .llama import engine
    target_cache = engine.target_cache(target, drafter)
    fed = list(prompt_ids) + list(output_ids)
    if len(prompt_ids) > 1 and hasattr(target_cache, "prefill"):     # the llama.cpp target: as a run starts
        prefill_prompt(target_cache, prompt_ids)
        fed = fed[len(prompt_ids) - 1:]
    logits = target_cache.forward(fed, keep=len(output_ids) + 1)
    return logits[0, :-1, : target.vocab_size].float().cpu()


@torch.inference_mode()
def draft_teacher_forced_logits(target, drafter, prompt_ids, output_ids, full_support: bool = False) -> torch.Tensor:
    """The drafter's logits predicting each output token given the true prefix: [len(output), V], with the
    prompt given to the drafter as a run gives it (``decoders.base.make_state``). A feature head reads the
    target's real hidden states here, so these are its first-token predictions (deeper drafted tokens read its
    own predicted states); a draft cache that adopts the target's prompt (the gguf drafter beside the llama.cpp
    target) takes the target's keys and values for prompt[:-1] and computes the rest."""
    from .drafters import new_caches
    target_cache, draft = new_caches(target, drafter, full_support)
    ids = list(prompt_ids) + list(output_ids)
    if drafter.reads_target_features:
        target_cache.forward(ids)
    elif adopts_prompt(draft, prompt_ids):
        prefill_prompt(target_cache, prompt_ids)
        return adopted_draft_logits(draft, target_cache, prompt_ids, output_ids)
    return draft.forward(ids)[0, len(prompt_ids) - 1: -1].float().cpu()


def adopts_prompt(draft, prompt_ids) -> bool:
    """Whether a run's draft cache takes the target's prompt[:-1] rather than computing it (``make_state``)."""
    return len(prompt_ids) > 1 and getattr(draft, "adopts_target_prompt", False)


def adopted_draft_logits(draft, target_cache, prompt_ids, output_ids) -> torch.Tensor:
    """The drafter's logits predicting each output token, [len(output), V], its cache adopting ``target_cache``, a
    target cache holding prompt[:-1]."""
    draft.adopt(target_cache)
    return draft.forward(list(prompt_ids[-1:]) + list(output_ids[:-1]))[0].float().cpu()


@torch.inference_mode()
def output_logits(target, drafter, prompt_ids, outputs: dict, drafted: dict | None = None,
                  known_target_logits: dict | None = None, known_draft_logits: dict | None = None) -> tuple[dict, dict]:
    """The target's teacher-forced logits of every output (``outputs``: {key: output ids}) and the drafter's of
    some (``drafted``: {key: full_support}), [len(output), V] each, as ``target_teacher_forced_logits`` and
    ``draft_teacher_forced_logits`` give them, after ONE target pass over prompt[:-1]: each output continues it
    (the cache cropped back in between), and a draft cache that adopts the target's prompt takes its cells.
    ``known_target_logits``: {key: the target's rows along that output}, already at hand (a run that kept the
    rows that judged its tokens): returned as they are, with no target pass over that output;
    ``known_draft_logits`` likewise, the drafter's rows (a run that kept them), with no draft pass."""
    from .llama import engine
    known, known_drafted = known_target_logits or {}, known_draft_logits or {}
    target_logits = {key: known[key] for key in outputs if key in known}
    missing = {key: output_ids for key, output_ids in outputs.items() if key not in known}
    known_draft = {key: known_drafted[key] for key in (drafted or {}) if key in known_drafted}
    drafted = {key: full_support for key, full_support in (drafted or {}).items() if key not in known_drafted}
    if not drafted and not missing:
        return target_logits, known_draft
    target_cache = engine.target_cache(target, drafter)
    prefix, last = list(prompt_ids[:-1]), list(prompt_ids[-1:])
    if prefix:
        prefill_prompt(target_cache, prompt_ids)
    draft_logits = known_draft | {key: drafted_after(target, drafter, target_cache, prompt_ids, outputs[key],
                                                     full_support) for key, full_support in drafted.items()}
    for key, output_ids in missing.items():
        target_cache.crop(len(prefix))
        fed = last + list(output_ids[:-1])
        target_logits[key] = target_cache.forward(fed, keep=len(fed))[0, :, : target.vocab_size].float().cpu()
    return target_logits, draft_logits


def drafted_after(target, drafter, target_cache, prompt_ids, output_ids, full_support: bool) -> torch.Tensor:
    """``draft_teacher_forced_logits`` from a target cache holding prompt[:-1], as a run's drafter starts: a draft
    cache that adopts the target's prompt takes its cells; any other drafter scores prompt and output itself."""
    if drafter.reads_target_features:
        return draft_teacher_forced_logits(target, drafter, prompt_ids, output_ids, full_support)
    draft = drafter.new_cache(target_cache, full_support)
    if adopts_prompt(draft, prompt_ids):
        return adopted_draft_logits(draft, target_cache, prompt_ids, output_ids)
    return draft.forward(list(prompt_ids) + list(output_ids))[0, len(prompt_ids) - 1: -1].float().cpu()


def target_log_likelihood(target, drafter, prompt_ids: list[int], output_ids: list[int],
                          target_logits: torch.Tensor | None = None) -> tuple[float, int]:
    """Sum of the target's log-probabilities (temperature 1) of the generated tokens, and their count.
    Exact samplers (AR, fixed SD, PACER) and SMC-SD can be compared by the mean of this per token.
    ``target_logits``: the output's ``target_teacher_forced_logits``, when already computed."""
    if not output_ids:
        return 0.0, 0
    if target_logits is None:
        target_logits = target_teacher_forced_logits(target, drafter, prompt_ids, output_ids)
    return sum(chosen_log_probs(target_logits, list(output_ids))), len(output_ids)


def proposal_divergence(target, drafter, prompt_ids: list[int], output_ids: list[int], temperature: float,
                        draft_temperature: float | None = None, top_k: int = 0, top_p: float = 1.0,
                        target_logits: torch.Tensor | None = None,
                        draft_logits: torch.Tensor | None = None) -> tuple[float, int]:
    """Sum over the output's positions of KL(p_T || q_Td) in nats (the target's sampling distribution at
    ``temperature`` against the draft's at ``draft_temperature`` as SMC-SD proposes it (full support: a
    reduced-vocabulary head keeps a little mass on every id), both after top-k/top-p, each given the
    true prefix), and the number of positions. Divided, it is SMC-SD's per-token proposal divergence.
    ``target_logits``, ``draft_logits`` (full support): the output's teacher-forced logits, when already computed."""
    if not output_ids:
        return 0.0, 0
    if target_logits is None:
        target_logits = target_teacher_forced_logits(target, drafter, prompt_ids, output_ids)
    if draft_logits is None:
        draft_logits = draft_teacher_forced_logits(target, drafter, prompt_ids, output_ids, full_support=True)
    divergence = proposal_kl(token_log_probs(target_logits, temperature, top_k, top_p),
                             token_log_probs(draft_logits, draft_temperature or temperature, top_k, top_p))
    return float(divergence.sum()), len(output_ids)


def greedy_match_flags(target, drafter, prompt_ids, output_ids) -> list[bool]:
    """flags[j]: the draft's argmax given the true prefix equals output token j."""
    if not output_ids:
        return []
    draft_logits = draft_teacher_forced_logits(target, drafter, prompt_ids, output_ids)
    return (draft_logits.argmax(-1) == torch.tensor(list(output_ids))).tolist()


@torch.inference_mode()
def drafted_run_lengths(target, drafter, prompt_ids, output_ids, starts: list[int], max_len: int) -> list[int]:
    """γ*_t by drafting greedily from each start until the first token that differs from the output: exact
    for a drafter whose deeper tokens read its own predictions (a feature head), where one teacher-forced
    pass would only give first-token matches."""
    from .drafters import new_caches
    target_cache, _ = new_caches(target, drafter)
    sequence = list(prompt_ids) + list(output_ids)
    target_cache.forward(sequence)
    verified = FeaturePrefix(target_cache.features)
    draft = drafter.new_cache(verified)
    lengths = []
    for start in starts:
        committed = len(prompt_ids) + start
        verified.length = committed - 1        # what the target had verified when this step began
        draft.crop(min(draft.length, committed - 1))
        drafted = []
        while len(drafted) < max_len and committed + len(drafted) < len(sequence):
            token_id = int(draft.feed_sequence(sequence[:committed] + drafted)[-1].argmax())
            if token_id != sequence[committed + len(drafted)]:
                break
            drafted.append(token_id)
        lengths.append(len(drafted))
    return lengths


class FeaturePrefix:
    """The target's recorded features seen only up to ``length`` (what a head reads of the target)."""

    def __init__(self, features):
        self.all_features, self.length = features, 0

    @property
    def features(self):
        return self.all_features[:, : self.length]

    @property
    def feature_length(self) -> int:
        return self.length


def run_lengths(flags: list[bool], starts: list[int], max_len: int) -> list[int]:
    """For each start, the number of consecutive True flags from there, capped at max_len."""
    lengths = []
    for start in starts:
        length = 0
        while start + length < len(flags) and flags[start + length] and length < max_len:
            length += 1
        lengths.append(length)
    return lengths


def expected_run_lengths(accept_rates: list[float], starts: list[int], max_len: int) -> list[float]:
    """E[accepted] from each start when position j is accepted with probability accept_rates[j]."""
    expected = []
    for start in starts:
        survival, total = 1.0, 0.0
        for j in range(start, min(start + max_len, len(accept_rates))):
            survival *= accept_rates[j]
            total += survival
        expected.append(total)
    return expected


def oracle_lengths(target, drafter, prompt_ids, output_ids, starts, temperature: float = 0.0, top_k: int = 0,
                   top_p: float = 1.0, max_len: int = 16, target_logits: torch.Tensor | None = None,
                   draft_logits: torch.Tensor | None = None) -> list[float]:
    """γ*_t for every step start (see module docstring for the sampling definition). ``target_logits``,
    ``draft_logits``: the output's teacher-forced logits, when already computed (sampling only)."""
    if temperature <= 0 and drafter.reads_target_features:
        return [float(n) for n in drafted_run_lengths(target, drafter, prompt_ids, output_ids, starts, max_len)]
    if temperature <= 0:
        flags = greedy_match_flags(target, drafter, prompt_ids, output_ids)
        return [float(n) for n in run_lengths(flags, starts, max_len)]
    if draft_logits is None:
        draft_logits = draft_teacher_forced_logits(target, drafter, prompt_ids, output_ids)
    draft_probs = logits_to_probs(draft_logits, temperature, top_k, top_p)
    if target_logits is None:
        target_logits = target_teacher_forced_logits(target, drafter, prompt_ids, output_ids)
    target_probs = logits_to_probs(target_logits, temperature, top_k, top_p)
    accept_rates = torch.minimum(draft_probs, target_probs).sum(-1).tolist()
    return expected_run_lengths(accept_rates, starts, max_len)


def attach_oracle(target, drafter, prompt_ids, result, max_len: int = 16) -> list[float]:
    """Fill ``oracle_len`` of every StepEvent of a finished Result; returns the lengths."""
    settings = result.settings
    steps = [event for event in result.events if isinstance(event, StepEvent)]
    lengths = oracle_lengths(target, drafter, prompt_ids, result.token_ids, step_starts(steps),
                             settings.get("temperature", 0.0), settings.get("top_k", 0), settings.get("top_p", 1.0),
                             max_len)
    for event, length in zip(steps, lengths):
        event.oracle_len = length
    return lengths
