"""SMC-SD: sequential Monte Carlo speculative decoding (docs/algorithms.md#smc-sd).

Emara, Barba da Costa, Chang, Freer, Vieira, Cotterell, Abdelfattah 2026, "Faster LLM Inference via
Sequential Monte Carlo" (arXiv 2604.15672); reference engine github.com/abdelfattah-lab/smcsd
(Apache-2.0; this is an independent implementation, no code copied).

SMC-SD is APPROXIMATE: its output is NOT distributed exactly as the target's. Instead of rejecting
drafted tokens it keeps N particles (one batch row each) and reweights them; the output distribution
approaches the target's only as N grows (benchmarks/smc_tv.py measures the gap).

One cycle, batched over the N particles:
  1. draft:   d_1..d_K ~ q_Td, all N rows as one [N, ·] batch per draft forward, keeping log q_Td(d_k)
  2. verify:  ONE target forward over the K+1 positions [last token, d_1..d_K] for all N rows
  3. weight:  logw_i += Σ_k [ a · log p_T(d_k) − log q_Td(d_k) ]   (tokens after an EOS masked)
  4. bonus:   b ~ p_T at the last position; every live particle grows by exactly K+1 tokens
  5. resample when ESS = 1 / Σ w² < 1 + ess_threshold · (N − 1) (the threshold is a fraction of the ESS range
     [1, N], so it can fire at every N ≥ 2; ``particles.resample_line``): systematic resampling, copy rows of
     BOTH KV caches and of the token histories by ancestor index, reset logw = 0
  6. stop when every particle is finished (EOS or max_new_tokens); output one particle drawn from the
     final normalised weights (or their argmax)
Nothing is rejected and nothing is rolled back.

Design decisions (documented here because the UI and the validation layer rely on them):
* Temperature 0 is refused (``SettingsError``): SMC-SD is a sampling method. At T = 0 p_T is one-hot,
  every particle would be the same deterministic sequence (N wasted) and its drafted tokens would be the
  DRAFT's argmax, not the target's greedy output. Use AR / fixed SD / PACER for greedy decoding.
* p_T and q_Td use the same top-k / top-p filter as the bonus token. A drafted token the target's filter
  excludes gets log p = -inf, so its particle has weight 0 and dies at the next resampling; if every
  particle has weight 0 the log-weights restart at 0 (no information left to weigh by).
* Only drafted tokens are weighted (the bonus is drawn from p_T itself, so at a = 1 its ratio is 1).
* Prefill: the prompt minus its last token is fed ONCE with batch 1 to each model, then the caches are
  expanded to N rows (``reorder`` with an all-zero ancestor index, i.e. index_select on the batch
  dimension). The prompt is computed once instead of N times; the price is one extra forward pass per
  model, which IS counted in ``target_calls`` / ``draft_calls`` (``info["prefill_calls"]``), and whose time is
  model time: the first cycle's ``draft_seconds`` / ``verify_seconds`` include it (as the other decoders'
  first draft and verify calls include the prompt they feed).
* The last cycle drafts only K' = min(K, room − 1) tokens so the particles end exactly at
  ``max_new_tokens``; no drafted token is ever thrown away.
* Finished particles stay in the batch (their rows are fed padding, their outputs ignored); they add 0
  to their log-weight and their continuation no longer changes. Resampling may copy them.
* Metrics: ``tau`` = tokens of the chosen particle / target forward passes (prefill included);
  ``alpha`` is None (nothing is accepted or rejected); draft tokens of all particles are counted in
  ``info["drafted_tokens"]``.

Devices: every per-particle tensor (histories, lengths, masks, log-weights, drafted ids, EOS ids) and
the generator live on the target cache's device; the draft's logits are moved there before sampling
(the rule of ``decoders/base.py``). Seeded runs are reproducible per device.

Shape letters: N particles, K drafted tokens this cycle, L tokens in every row's history, V vocabulary.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator

import torch

from ..drafters import new_caches
from ..events import Metrics, Result, SMCCycleEvent, TokenRecord, TokenState
from ..kvcache import ModelCache, prefill_prompt, records_rows, rows_over
from ..particles import (dead_particle_cycles, effective_sample_size, normalize_log_weights, resample_line,
                         should_resample, systematic_resample)
from ..sampling import sample_rows, token_log_probs
from ..settings import DecodeSettings, SettingsError
from .base import CancelFlag, PrefillOnce, new_generator, pinned_values, steps_until_done, with_pinned

DRAFT_ROWS_BUDGET = 512 * 2**20   # bytes of float32 draft rows a kept-rows run may hold for all its particles
DEAD_WEIGHT = 0.01    # a particle under this share of the weight is 'dead': its rows cost work and add almost nothing


@dataclass
class ParticleState(PrefillOnce):
    """N particles decoded in lock-step.

    Invariants: every row of ``histories`` has the same length (prompt + the same number of generated
    positions); a live particle's continuation is its whole row after the prompt; a finished particle's
    continuation is the first ``lengths[i]`` positions after the prompt (the rest is padding). Each
    model's cache holds the first ``model.length`` columns of every row."""
    prompt_len: int
    histories: torch.Tensor      # [N, L] long
    lengths: torch.Tensor        # [N] long: valid continuation tokens
    finished: torch.Tensor       # [N] bool
    ended_with_eos: torch.Tensor  # [N] bool
    log_weights: torch.Tensor    # [N] float64
    target: ModelCache
    draft: ModelCache
    prefill_seconds: float = 0.0   # fresh caches, the prompt's prefill and the N rows made, until the first cycle
    cycle_target_logits: list | None = None   # each cycle's verify logits [N, K+1, V], when the run keeps them
    cycle_draft_logits: list | None = None    # each cycle's draft calls, (first position predicted, [N, T, V]) each

    @property
    def n_particles(self) -> int:
        return self.histories.shape[0]

    @property
    def device(self) -> torch.device:
        """Where the particles' tensors live: the target cache's device."""
        return self.histories.device

    @property
    def generated(self) -> int:
        """Positions generated so far in every row (live particles' length)."""
        return self.histories.shape[1] - self.prompt_len

    def continuation(self, index: int) -> list[int]:
        return self.histories[index, self.prompt_len: self.prompt_len + int(self.lengths[index])].tolist()

    def reorder(self, ancestors: torch.Tensor) -> None:
        """Row i becomes old row ancestors[i]: both KV caches and all per-particle tensors."""
        self.target.reorder(ancestors)
        self.draft.reorder(ancestors)
        self.histories = self.histories.index_select(0, ancestors)
        self.lengths = self.lengths.index_select(0, ancestors)
        self.finished = self.finished.index_select(0, ancestors)
        self.ended_with_eos = self.ended_with_eos.index_select(0, ancestors)
        self.log_weights = self.log_weights.index_select(0, ancestors)


def start_particles(target, drafter, prompt_ids: list[int], n_particles: int) -> ParticleState:
    """Prefill prompt[:-1] once with batch 1 in both models, then expand the caches to N rows."""
    if not prompt_ids:
        raise ValueError("SMC-SD needs at least one prompt token.")
    target_cache, draft = new_caches(target, drafter, full_support=True)   # the target runs first below: a head sees its states
    device = target_cache.device
    expand = torch.zeros(n_particles, dtype=torch.long, device=device)
    if len(prompt_ids) > 1:
        prefill_prompt(target_cache, prompt_ids)              # as every run starts (decoders.base.make_state)
        if getattr(draft, "adopts_target_prompt", False):
            draft.adopt(target_cache)                         # the target's keys and values (drafters/gguf_drafter.py)
        else:                                                 # [1, P-1]; the logits are not used: compute one row
            draft.forward(torch.tensor([list(prompt_ids[:-1])], dtype=torch.long, device=device), keep=1)
        for model in (target_cache, draft):
            model.reorder(expand)                             # [1, ...] → [N, ...]
    histories = torch.tensor([list(prompt_ids)], dtype=torch.long, device=device).expand(n_particles, -1).clone()
    return ParticleState(prompt_len=len(prompt_ids), histories=histories,
                         lengths=torch.zeros(n_particles, dtype=torch.long, device=device),
                         finished=torch.zeros(n_particles, dtype=torch.bool, device=device),
                         ended_with_eos=torch.zeros(n_particles, dtype=torch.bool, device=device),
                         log_weights=torch.zeros(n_particles, dtype=torch.float64, device=device),
                         target=target_cache, draft=draft)


def new_token_records(target, token_ids: list[int], n_draft: int) -> list[TokenRecord]:
    """One particle's new tokens of a cycle, each with its own text: the first ``n_draft`` were drafted
    (kept and reweighted), the one after them is the target's bonus (absent after an EOS)."""
    return [TokenRecord(token_id, text, TokenState.DRAFTED if index < n_draft else TokenState.BONUS)
            for index, (token_id, text) in enumerate(zip(token_ids, target.token_texts(token_ids)))]


@dataclass
class CycleOutcome:
    new_tokens: list[list[int]]        # each particle's valid new tokens (before resampling)
    n_draft: int                       # K of this cycle: new_tokens[i][:K] drafted, new_tokens[i][K] the bonus
    draft_seconds: float
    verify_seconds: float


class SMC:
    """Sequential Monte Carlo speculative decoding (APPROXIMATE). See the module docstring."""

    name = "smc"

    def __init__(self, n_particles: int | None = None, draft_len: int | None = None,
                 ess_threshold: float | None = None, draft_temperature: float | None = None,
                 power: float | None = None, final: str | None = None):
        """Settings given here are pinned (see decoders/base.py); ``make_decoder`` gives none."""
        self.pinned = pinned_values(n_particles=n_particles, draft_len=draft_len, ess_threshold=ess_threshold,
                                    draft_temperature=draft_temperature, power=power, final=final)

    # ------------------------------------------------------------------ the loop
    def run(self, target, drafter, prompt_ids: list[int], settings: DecodeSettings,
            cancel: CancelFlag | None = None, keep_rows: bool = False) -> Iterator:
        """Yield one SMCCycleEvent per cycle (= one target forward), then the Result (with
        ``Result.target_rows``, the rows that judged the output particle's tokens, when ``keep_rows``)."""
        if settings.greedy:
            raise SettingsError("SMC-SD samples, so it needs a temperature above 0 (for example 0.7 or 1.0). "
                                "For greedy decoding choose AR, fixed SD or PACER.")
        settings = with_pinned(settings, self.pinned)
        started = time.perf_counter()
        state = start_particles(target, drafter, prompt_ids, settings.n_particles)
        state.prefill_seconds = time.perf_counter() - started       # the first cycle's event reports it
        state.cycle_target_logits = [] if keep_rows else None
        state.cycle_draft_logits = [] if keep_rows and keeps_draft_rows(state, drafter, settings) else None
        generator = new_generator(settings.seed, state.device)
        sorted_eos_ids = sorted(target.eos_token_ids)
        eos_ids = torch.tensor(sorted_eos_ids, dtype=torch.long, device=state.device)
        pad_id = sorted_eos_ids[0] if sorted_eos_ids else 0
        prefill_calls = {"target": state.target.calls, "draft": state.draft.calls}
        events, counts = [], {"resamples": 0, "drafted_tokens": 0}

        def cycle(index: int) -> SMCCycleEvent:
            n_draft = min(settings.draft_len, settings.max_new_tokens - state.generated - 1)
            outcome = self.cycle(state, n_draft, settings, eos_ids, pad_id, generator)
            counts["drafted_tokens"] += n_draft * state.n_particles  # every row is drafted, finished ones too
            event = self.resample_and_report(target, state, index, outcome, generator, settings.ess_threshold)
            counts["resamples"] += int(event.resampled)
            return event
        cancelled = yield from steps_until_done(lambda: bool(state.finished.all()), cycle, events, cancel)
        yield self.result(target, state, events, settings, generator, started, cancelled,
                          {"prefill_calls": prefill_calls} | counts)

    # ------------------------------------------------------------------ one cycle
    def cycle(self, state: ParticleState, n_draft: int, settings: DecodeSettings, eos_ids: torch.Tensor,
              pad_id: int, generator: torch.Generator) -> CycleOutcome:
        """Draft K tokens per particle, verify them in one target pass, update log-weights, add the bonus."""
        temperature = settings.temperature
        draft_temperature = settings.draft_temperature or temperature
        n_particles = state.n_particles

        # 1. Draft: d_k ~ q_Td(· | row), one [N, ·] draft forward per token.
        started = time.perf_counter()
        device = state.device
        drafted_ids = torch.zeros(n_particles, n_draft, dtype=torch.long, device=device)          # [N, K]
        draft_log_probs = torch.zeros(n_particles, n_draft, dtype=torch.float64, device=device)   # [N, K] log q_Td
        pending = state.histories[:, state.draft.length:]                           # [N, 1 or 2]
        if state.cycle_draft_logits is not None:
            state.cycle_draft_logits.append([])
        for k in range(n_draft):
            draft_logits = self.draft_call(state, pending).to(device)              # [N, V]
            draft_log_dist = token_log_probs(draft_logits, draft_temperature, settings.top_k, settings.top_p)
            drafted_ids[:, k] = sample_rows(draft_log_dist.exp(), generator)
            draft_log_probs[:, k] = draft_log_dist.gather(-1, drafted_ids[:, k: k + 1]).squeeze(-1)
            pending = drafted_ids[:, k: k + 1]
        draft_seconds = time.perf_counter() - started

        # 2. Verify: ONE target forward over [pending, d_1..d_K] for all N rows; the last K+1 positions
        #    score d_1..d_K and the bonus.
        started = time.perf_counter()
        target_input = torch.cat([state.histories[:, state.target.length:], drafted_ids], dim=1)
        target_logits = state.target.forward(target_input, keep=n_draft + 1)[:, -(n_draft + 1):].to(device)  # [N, K+1, V]
        target_log_dist = token_log_probs(target_logits, temperature, settings.top_k, settings.top_p)
        target_log_probs = target_log_dist[:, :n_draft].gather(-1, drafted_ids.unsqueeze(-1)).squeeze(-1)  # [N, K]
        bonus_ids = sample_rows(target_log_dist[:, n_draft].exp(), generator)       # [N]
        verify_seconds = time.perf_counter() - started
        if state.cycle_target_logits is not None:
            state.cycle_target_logits.append(target_logits)                          # kept, not computed

        # 3. Weight: logw_i += Σ_k [a · log p_T(d_k) − log q_Td(d_k)], masked after EOS and for finished rows.
        new_ids = torch.cat([drafted_ids, bonus_ids.unsqueeze(1)], dim=1)           # [N, K+1]
        is_eos = torch.isin(new_ids, eos_ids)                                       # [N, K+1]
        eos_before = (torch.cumsum(is_eos.long(), dim=1) - is_eos.long()) > 0       # an EOS earlier in the cycle
        live_tokens = ~state.finished.unsqueeze(1) & ~eos_before                    # [N, K+1]
        scaled_target = settings.power * target_log_probs if settings.power != 0 else torch.zeros_like(target_log_probs)
        increments = torch.where(live_tokens[:, :n_draft], scaled_target - draft_log_probs,
                                 torch.zeros_like(draft_log_probs)).sum(dim=1)      # [N] float64
        state.log_weights = state.log_weights + increments
        if bool(torch.isneginf(state.log_weights).all()):
            state.log_weights = torch.zeros_like(state.log_weights)  # no particle is possible: restart weights

        # 4. Bonus and growth: every live particle grows by K+1 (truncated after its EOS); pad the rest.
        state.histories = torch.cat([state.histories, new_ids.masked_fill(~live_tokens, pad_id)], dim=1)
        new_counts = live_tokens.long().sum(dim=1)                                  # [N]
        state.lengths = state.lengths + new_counts
        hit_eos = (is_eos & live_tokens).any(dim=1)
        state.ended_with_eos = state.ended_with_eos | hit_eos
        state.finished = state.finished | hit_eos | (state.lengths >= settings.max_new_tokens)
        new_tokens = [row[:count] for row, count in zip(new_ids.tolist(), new_counts.tolist())]  # two host syncs
        return CycleOutcome(new_tokens, n_draft, draft_seconds, verify_seconds)

    @staticmethod
    def draft_call(state: ParticleState, pending: torch.Tensor) -> torch.Tensor:
        """One draft forward over ``pending`` [N, T]: the last position's logits [N, V]. A run that keeps its rows
        computes every fed position's and keeps them (a cycle's first call feeds the last cycle's bonus too)."""
        if state.cycle_draft_logits is None:
            return state.draft.forward(pending, keep=1)[:, -1]
        first = state.draft.length + 1
        logits = state.draft.forward(pending)
        state.cycle_draft_logits[-1].append((first, logits))
        return logits[:, -1]

    # ------------------------------------------------------------------ 5. resampling
    def resample_and_report(self, target, state: ParticleState, step: int, outcome: CycleOutcome,
                            generator: torch.Generator, ess_threshold: float) -> SMCCycleEvent:
        """Normalise, compute ESS, resample when it falls below ``resample_line(N, ess_threshold)``; describe the cycle.

        The event's per-particle lists (tokens, log-weights, weights, finished) describe the rows BEFORE
        resampling; ``ancestors[i]`` is the old row that new row i copies (identity when not resampled)."""
        weights = normalize_log_weights(state.log_weights)                          # [N] float64
        ess = effective_sample_size(weights)
        n_particles = state.n_particles
        log_weights = state.log_weights.tolist()
        finished = state.finished.tolist()
        leader = int(torch.argmax(weights))
        leader_text = target.decode(state.continuation(leader))
        total_new_tokens = int(state.lengths.max())
        resampled = should_resample(ess, n_particles, ess_threshold)
        if resampled:
            ancestors = systematic_resample(weights, generator)                     # [N] long
            state.reorder(ancestors)
            state.log_weights = torch.zeros(n_particles, dtype=torch.float64, device=state.device)
        else:
            ancestors = torch.arange(n_particles, device=state.device)
        return SMCCycleEvent(
            method=self.name, step=step, particle_texts=[target.decode(ids) for ids in outcome.new_tokens],
            particle_token_ids=outcome.new_tokens, log_weights=log_weights, weights=weights.tolist(), ess=ess,
            ess_threshold=ess_threshold, resample_below=resample_line(n_particles, ess_threshold), resampled=resampled,
            ancestors=ancestors.tolist(), finished=finished,
            draft_seconds=outcome.draft_seconds, verify_seconds=outcome.verify_seconds,
            total_new_tokens=total_new_tokens, leader_text=leader_text, prefill_seconds=state.take_prefill_seconds(),
            particle_tokens=[new_token_records(target, ids, outcome.n_draft) for ids in outcome.new_tokens])

    # ------------------------------------------------------------------ 6. the output particle
    def choose(self, state: ParticleState, generator: torch.Generator, final: str) -> tuple[int, torch.Tensor]:
        weights = normalize_log_weights(state.log_weights)
        if final == "argmax":
            return int(torch.argmax(weights)), weights
        return int(torch.multinomial(weights, 1, generator=generator)), weights

    def result(self, target, state, events, settings, generator, started, cancelled, extra) -> Result:
        chosen, weights = self.choose(state, generator, settings.final)
        token_ids = state.continuation(chosen)
        metrics = Metrics.of_run(len(token_ids), time.perf_counter() - started, state.target.calls,
                                 state.draft.calls)
        if cancelled:
            finish_reason = "cancelled"
        else:
            finish_reason = "eos" if bool(state.ended_with_eos[chosen]) else "length"
        info = {"approximate": True,
                "note": "SMC-SD is approximate: its output only approaches the target's distribution as the "
                        "number of particles grows (Emara et al. 2026, arXiv 2604.15672).",
                "n_particles": settings.n_particles, "draft_len": settings.draft_len,
                "ess_threshold": settings.ess_threshold,
                "draft_temperature": settings.draft_temperature or settings.temperature, "power": settings.power,
                "final": settings.final, "cycles": len(events), "chosen_particle": chosen,
                "final_weights": weights.tolist(), "dead_particles": dead_particle_report(events),
                "particle_texts": [target.decode(state.continuation(i)) for i in range(state.n_particles)]} | extra
        result = Result(method=self.name, text=target.decode(token_ids), token_ids=token_ids, events=events,
                        metrics=metrics, settings=settings.to_dict(), info=info, finish_reason=finish_reason,
                        target_rows=lineage_rows(state.cycle_target_logits, events, chosen))
        if state.cycle_draft_logits is not None and len(state.cycle_draft_logits) == len(events):
            attach_lineage_draft_rows(result, state, events, chosen)
        return result


def keeps_draft_rows(state: ParticleState, drafter, settings: DecodeSettings) -> bool:
    """Whether a kept-rows run keeps every particle's draft rows too (only the output particle's are wanted, and
    which that is is known at the end): where recording changes no bit (as ``decoders.base.make_state`` keeps a
    drafter's rows) and all N particles' rows fit ``DRAFT_ROWS_BUDGET``; else the page's scoring computes them."""
    row_bytes = 4 * getattr(state.draft, "vocab_size", 0)
    return (records_rows(state.draft) and not drafter.reads_target_features
            and state.n_particles * settings.max_new_tokens * row_bytes <= DRAFT_ROWS_BUDGET)


def dead_particle_report(events: list) -> dict:
    """How much of the run went on particles that carried almost no weight (``particles.dead_particle_cycles``):
    the cycles that ran with one, the particle rows they drafted and verified for them, out of all rows."""
    cycles, rows = dead_particle_cycles([event.weights for event in events], [event.resampled for event in events],
                                        DEAD_WEIGHT)
    return {"weight_floor": DEAD_WEIGHT, "cycles": cycles, "rows": rows,
            "all_rows": sum(len(event.weights) for event in events)}


def lineage_rows(cycle_target_logits: list | None, events: list, chosen: int):
    """The verify logits rows that judged particle ``chosen``'s tokens, [its tokens, V]: its row in every cycle,
    traced back through each resampling's ancestors (row i after a cycle copies row ``ancestors[i]`` of it), the
    first ``len(particle_token_ids[row])`` positions of that row's [K+1] (drafted tokens, then the bonus).
    None when the run kept no logits."""
    if not cycle_target_logits or len(cycle_target_logits) != len(events):
        return None
    return torch.cat([cycle_logits[particle, : len(event.particle_token_ids[particle])]
                      for cycle_logits, event, particle in zip(cycle_target_logits, events,
                                                               lineage_indices(events, chosen))])


def lineage_indices(events: list, chosen: int) -> list[int]:
    """Particle ``chosen``'s row in every cycle, before that cycle's resampling: traced back from the end through
    each resampling's ancestors (row i after a cycle copies row ``ancestors[i]`` of it)."""
    indices, particle = [], chosen
    for event in reversed(events):
        particle = event.ancestors[particle]
        indices.append(particle)
    return indices[::-1]


def lineage_draft_logits(cycle_draft_logits: list, events: list, chosen: int) -> dict[int, torch.Tensor]:
    """{position: the drafter's logits row predicting it} along particle ``chosen``'s lineage, from every cycle's
    draft calls (``SMC.draft_call``): each call's rows for the particle's row in that cycle."""
    rows = {}
    for calls, particle in zip(cycle_draft_logits, lineage_indices(events, chosen)):
        for first, logits in calls:
            rows.update({first + offset: logits[particle, offset] for offset in range(logits.shape[1])})
    return rows


def attach_lineage_draft_rows(result: Result, state: ParticleState, events: list, chosen: int) -> None:
    """``result.draft_rows``: the drafter's rows along the output particle's tokens. The last cycle's bonus was
    never fed to the drafter: ``result.complete_rows`` feeds it later, off the run's clock (decoders/base.py)."""
    span = (state.prompt_len, state.prompt_len + len(result.token_ids))
    rows = lineage_draft_logits(state.cycle_draft_logits, events, chosen)
    result.draft_rows = rows_over(rows, *span)
    if result.draft_rows is not None or span[1] - 1 <= state.draft.length:
        return

    def complete() -> None:
        first = state.draft.length + 1
        logits = state.draft.forward(state.histories[:, state.draft.length: span[1] - 1])
        rows.update({first + offset: logits[chosen, offset] for offset in range(logits.shape[1])})
        result.draft_rows, result.complete_rows = rows_over(rows, *span), None

    result.complete_rows = complete
