"""PACER: draft in blocks, let a small pre-verifier score each block, stop drafting at the first
block that scores below the threshold (docs/algorithms.md#pacer; Zhang et al. 2026, arXiv 2602.01274).
With ``stop_rule="cost"`` it drafts another block only while that raises the step's expected tokens per
unit of time (docs/algorithms.md#cost-aware-stopping): the drafted tokens' acceptance estimates (the pre-verifier's,
or the draft's entropy's when sampling without a layer trained for it) priced by step costs that are either this
run's own (``cost_source="run"``: its steps' draft and verify seconds so far, ``stopping.RunCosts``, over the stored
model as a prior) or the drafter's stored model (``"stored"``: measured once per kind of device, so a seeded sampled
run repeats token for token); ``"auto"`` takes the run's when greedy, where the output is the target's argmax
whatever the timing, and the stored model when sampling. ``stop_rule="auto"`` is the cost rule. With ``phrase_len``
> 0 a block may be a phrase copied from the prompt or the output instead of drafted
(docs/algorithms.md#phrase-drafts).

on_fail="submit" sends the failing block to the target too: the stopping rule only looks at drafted
tokens, so the output keeps the target's distribution exactly. on_fail="discard" drops that block;
exact under greedy decoding only (approximate under sampling, and labelled so)."""
from __future__ import annotations

import time
from dataclasses import replace
from functools import partial

import torch

from ..drafters import drafter_key, measured_drafter
from ..events import BlockDecision, StepEvent
from ..phrases import PhraseIndex, PhraseMatch
from ..preverifier import ConfidencePreVerifier, own_threshold, token_features
from ..preverifier.features import DraftContext, history_context
from ..settings import DecodeSettings
from ..stopping import PRIOR_COSTS, PacerCostModel, decide_extension, entropy_nats
from .base import DecodeState, DraftBuilder, SpeculativeDecoder
from .pacer_state import PacerProposal, PacerState


class Pacer(SpeculativeDecoder):
    name = "pacer"
    state_type = PacerState

    def __init__(self, block_size: int | None = None, max_draft_len: int | None = None,
                 threshold: float | None = None, preverifier=None, on_fail: str | None = None):
        super().__init__(block_size=block_size, max_draft_len=max_draft_len, threshold=threshold, on_fail=on_fail)
        self.preverifier = preverifier if preverifier is not None else ConfidencePreVerifier()

    def threshold(self, settings: DecodeSettings) -> float:
        """The run's threshold; None (a decoder used without a run request) means the pre-verifier's own."""
        return own_threshold(self.preverifier, settings.temperature) if settings.threshold is None \
            else float(settings.threshold)

    def propose(self, target, state: PacerState, settings: DecodeSettings, budget: int) -> PacerProposal:
        threshold = self.threshold(settings)
        limit = min(settings.max_draft_len, max(budget - 1, 0))
        draft, plan = DraftBuilder(target, state, settings), BlockPlan()
        model = run_cost_model(target, state, settings) if effective_stop_rule(settings, self.preverifier) == "cost" \
            else None
        estimated_by_preverifier = settings.greedy or trained_for_sampling(self.preverifier)
        context = history_context(state.first_verified, state.first_accepted, state.last_first_accepted)
        phrases = phrase_index(state) if settings.phrase_len else None
        while len(draft.drafted_ids) < limit:
            block_start = len(draft.drafted_ids)
            room = limit - block_start
            phrase = phrases.find(draft.sequence, state.prompt_len, min(settings.phrase_len, room)) \
                if phrases is not None else None
            size = len(phrase.token_ids) if phrase else min(settings.block_size, room)
            if model is not None and plan.blocks:
                next_accept = next_token_acceptance(model, state, settings, plan.acceptance)
                decision = decide_extension(plan.acceptance, next_accept, size, model.costs)
                if not decision.extend:
                    plan.stop(cost_stop_reason(plan.acceptance, next_accept, size, model, estimated_by_preverifier),
                              note=decision.describe())
                    break
            features, hit_eos = (self._phrase_features(draft, phrase, state, context) if phrase
                                 else self._drafted_features(draft, size, state, context))
            context = features[-1].context.after(features[-1].draft_prob)   # the next block's first token's
            block_score, token_probs = self.preverifier.score_block(features)
            passed = model is not None or block_score >= threshold
            estimates = cost_rule_estimates(self.preverifier, features, token_probs) if model is not None else []
            plan.add(BlockDecision(len(plan.blocks), len(features), float(block_score), threshold, passed,
                                   phrase=phrase.describe() if phrase else None), token_probs,
                     block_acceptance(model, features, draft.rows[block_start:], estimates,
                                      trained_for_sampling(self.preverifier)))
            if not passed:
                plan.stop("preverifier", stopped_from=block_start,
                          discarded=len(features) if settings.on_fail == "discard" else 0)
                break
            if hit_eos:
                plan.stop("eos")
                break
        if plan.stop_reason == "max_len" and limit < settings.max_draft_len:
            plan.stop("budget")
        return draft.proposal(PacerProposal, token_phrase=list(draft.phrase_flags), **plan.proposal_fields())

    def step(self, target, state: PacerState, settings: DecodeSettings, step: int) -> StepEvent:
        """The shared step, then what the cost rule learns from it: its draft, verify and bookkeeping seconds (after
        the first step, whose calls may include a prefill) and whether the target rejected a drafted token."""
        started = time.perf_counter()
        event = super().step(target, state, settings, step)
        if step > 0:
            other_seconds = time.perf_counter() - started - event.draft_seconds - event.verify_seconds
            state.run_costs.observe(len(event.tokens) - 1, event.draft_seconds, event.n_drafted + 1,
                                    event.verify_seconds, max(other_seconds, 0.0))
        state.rejections += int(event.n_accepted < event.n_drafted)
        return event

    def _drafted_features(self, draft: DraftBuilder, size: int, state: DecodeState,
                          context: DraftContext) -> tuple[list, bool]:
        """Draft ``size`` tokens with the drafter; their pre-verifier features (``context``: the block's first
        token's), and whether EOS was drafted."""
        features, sampled = [], not draft.settings.greedy
        for _ in range(size):
            position = len(draft.drafted_ids)
            token_id, feature = draft.draw_described(partial(token_features, position=position, context=context,
                                                             sampled=sampled))
            features.append(feature)
            context = context.after(feature.draft_prob)
            if token_id in state.eos_ids:
                return features, True
        return features, False

    def _phrase_features(self, draft: DraftBuilder, phrase: PhraseMatch, state: DecodeState,
                         context: DraftContext) -> tuple[list, bool]:
        """Append a copied phrase (cut after an EOS); the pre-verifier reads the draft's view of each token."""
        token_ids = list(phrase.token_ids)
        for index, token_id in enumerate(token_ids):
            if token_id in state.eos_ids:
                token_ids = token_ids[: index + 1]
                break
        first = len(draft.drafted_ids)
        rows = draft.add_phrase(token_ids)
        features = []
        for offset, (token_id, logits_row, hidden_row) in enumerate(rows):
            features.append(token_features(logits_row, hidden_row, token_id, first + offset, context))
            context = context.after(features[-1].draft_prob)
        return features, token_ids[-1] in state.eos_ids

    def describe(self, settings: DecodeSettings) -> dict:
        threshold = self.threshold(settings)
        return {"preverifier": getattr(self.preverifier, "kind", "custom"),
                "stopped_by": stop_rule_summary(self.preverifier, settings, threshold),
                "block_size": settings.block_size, "max_draft_len": settings.max_draft_len, "threshold": threshold,
                "on_fail": settings.on_fail, "stop_rule": settings.stop_rule, "cost_source": settings.cost_source,
                "phrase_len": settings.phrase_len}


def effective_stop_rule(settings: DecodeSettings, preverifier=None) -> str:
    """``auto`` is the cost rule at every temperature: draft another block while it raises the expected tokens
    per unit of time (docs/algorithms.md#cost-aware-stopping). Greedy, the pre-verifier's estimate (the trained
    layer's, or the draft's own q(x)) says how likely the target's argmax is the token, so a risky token lowers the
    gain of drafting on and the rule stops there, while a run of confident tokens drafts as far as the costs
    allow (a fixed threshold stops at the same risk whatever drafting costs); sampling with a drafter close to
    the target, acceptance is about 1 - TV(p, q) whatever the token, so little per-token signal is left, and the
    economics decide, priced with a layer trained on sampled tokens where there is one (``block_acceptance``),
    else the draft's entropy."""
    if settings.stop_rule == "auto":
        return "cost"
    return settings.stop_rule


def uses_run_costs(settings: DecodeSettings) -> bool:
    """Whether the cost rule prices with the run's own measured costs (``cost_source``; ``auto``: when greedy, whose
    output is the target's argmax whatever the timing) rather than the stored model, which a seeded sampled run
    needs to repeat token for token."""
    if settings.cost_source == "auto":
        return settings.greedy
    return settings.cost_source == "run"


# How many tokens the stored mean acceptance counts for beside the run's own verdicts (greedy).
PRIOR_ACCEPTANCE_TOKENS = 8.0


def next_token_acceptance(model: PacerCostModel, state: PacerState, settings: DecodeSettings,
                          drafted_acceptance: list[float]) -> float:
    """The acceptance the cost rule expects of a token not drafted yet. Greedy: the run's own conditional
    acceptance, kept drafted tokens over kept tokens plus rejections (the estimate of a geometric law's
    parameter), with the stored mean (else the mean estimate of this step's drafted tokens) counting for
    ``PRIOR_ACCEPTANCE_TOKENS`` tokens; it reads only the run's verdicts, so it is the same on every host.
    Sampling: the stored mean at the run's temperature, else the last drafted token's estimate."""
    if not settings.greedy:
        return drafted_acceptance[-1] if model.mean_acceptance is None else model.mean_acceptance
    prior = sum(drafted_acceptance) / len(drafted_acceptance) if model.mean_acceptance is None \
        else model.mean_acceptance
    return (state.accepted_tokens + PRIOR_ACCEPTANCE_TOKENS * prior) / \
        (state.accepted_tokens + state.rejections + PRIOR_ACCEPTANCE_TOKENS)


def cost_stop_reason(drafted_acceptance: list[float], next_accept: float, block: int, model: PacerCostModel,
                     estimated_by_preverifier: bool) -> str:
    """Which of the two stopped a draft the cost rule ended: ``"preverifier"`` when a draft whose tokens had all been
    estimated at the expected acceptance ``next_accept`` would have drafted on (the pre-verifier's low estimates of
    these tokens made the next block not worth its cost), ``"cost"`` when it would have stopped too (the draft
    reached the length where drafting stops paying on these costs). Tokens priced by the draft's entropy rather than
    the pre-verifier are the cost rule's own."""
    typical = decide_extension([next_accept] * len(drafted_acceptance), next_accept, block, model.costs)
    return "preverifier" if estimated_by_preverifier and typical.extend else "cost"


def stop_rule_summary(preverifier, settings: DecodeSettings, threshold: float) -> str:
    """In words, what stops this run's drafting: the trained layer or the confidence rule at its threshold, or the
    cost rule and whose acceptance estimates it prices."""
    trained = getattr(preverifier, "kind", None) == "trained"
    if effective_stop_rule(settings, preverifier) == "cost":
        if trained and (settings.greedy or trained_for_sampling(preverifier)):
            estimates = "the trained layer's"
        else:
            estimates = "the draft's own" if settings.greedy else "the draft's entropy's"
        costs = "this run's measured costs" if uses_run_costs(settings) else "the drafter's stored costs"
        return f"the cost rule (expected gain against {costs}, with {estimates} acceptance estimates)"
    return f"{'the trained pre-verification layer' if trained else 'the confidence rule'} at threshold {threshold:.2f}"


def trained_for_sampling(preverifier) -> bool:
    """Whether the pre-verifier has a layer trained on sampled tokens' acceptance."""
    return getattr(preverifier, "sampling_layer", None) is not None


def phrase_index(state: PacerState) -> PhraseIndex:
    """The run's phrase index over its committed sequence, brought up to date (built on first use)."""
    if state.phrase_index is None:
        state.phrase_index = PhraseIndex()
    state.phrase_index.sync(state.sequence)
    return state.phrase_index


class BlockPlan:
    """What PACER decided while drafting one step: the blocks, each token's block and acceptance
    estimate, and why drafting stopped."""

    def __init__(self):
        self.blocks: list[BlockDecision] = []
        self.token_blocks: list[int] = []
        self.token_probs: list[float] = []
        self.acceptance: list[float] = []   # the cost rule's per-token acceptance estimates
        self.stop_reason, self.stop_note, self.stopped_from, self.discarded = "max_len", None, None, 0

    def add(self, block: BlockDecision, token_probs, acceptance: list[float]) -> None:
        self.blocks.append(block)
        self.token_blocks += [block.index] * block.size
        self.token_probs += [float(prob) for prob in token_probs]
        self.acceptance += acceptance

    def stop(self, reason: str, note: str | None = None, stopped_from: int | None = None, discarded: int = 0) -> None:
        self.stop_reason, self.stop_note, self.stopped_from, self.discarded = reason, note, stopped_from, discarded

    def proposal_fields(self) -> dict:
        return {"blocks": self.blocks, "token_blocks": self.token_blocks, "token_preverifier_probs": self.token_probs,
                "stopped_from": self.stopped_from, "discarded": self.discarded, "stop_reason": self.stop_reason,
                "stop_note": self.stop_note}


def cost_rule_estimates(preverifier, features: list, token_probs) -> list[float]:
    """A block's pre-verifier estimates as the cost rule reads them: through the pre-verifier's
    ``cost_rule_estimate`` where it has one (a trained layer's calibration of its greedy estimates), else as they
    are."""
    read = getattr(preverifier, "cost_rule_estimate", None)
    if read is None:
        return [float(prob) for prob in token_probs]
    return [read(float(prob), feature.sampled) for feature, prob in zip(features, token_probs)]


def block_acceptance(model: PacerCostModel | None, features: list, draft_rows: list[torch.Tensor],
                     token_probs, trusted: bool = False) -> list[float]:
    """The cost rule's acceptance estimate of each token of a block: for a token sampled from q, the model's
    acceptance at the entropy of that q (the distribution it was drawn from, at the run's temperature), unless the
    pre-verifier is ``trusted`` (a layer trained on sampled tokens); for a greedy or copied token, and with a
    trusted pre-verifier, the pre-verifier's estimate. [] without a cost model."""
    if model is None:
        return []
    by_entropy = [feature.sampled and not trusted for feature in features]
    rows = [row for row, priced in zip(draft_rows, by_entropy) if priced]   # only those rows' entropies: [V] each
    entropies = iter(entropy_nats(torch.stack(rows)).tolist() if rows else [])
    return [model.token_acceptance(next(entropies), float(prob)) if priced else float(prob)
            for priced, prob in zip(by_entropy, token_probs)]


def run_cost_model(target, state: PacerState, settings: DecodeSettings) -> PacerCostModel:
    """What the cost rule prices this step with: the stored model at the run's prompt length (read once per run,
    kept on the state), with the costs this run has measured so far over it when the run uses its own
    (``uses_run_costs``)."""
    if state.cost_model is None:
        state.cost_model = pair_cost_model(target, state.drafter).at_prompt_length(state.prompt_len)
    if not uses_run_costs(settings) or not state.run_costs.steps:
        return state.cost_model
    return replace(state.cost_model, costs=state.run_costs.costs(state.cost_model.costs),
                   source=f"this run's {state.run_costs.steps} steps over {state.cost_model.source}")


def pair_cost_model(target, drafter) -> PacerCostModel:
    """What the cost rule prices a block with for this pair and ``drafter`` on its kind of device: the drafter's
    measured model (``pacer_costs`` by device kind in its measured_defaults.json entry, written by ``python -m
    pacer_core.training.pacer_costs``), else the prior costs with the drafter's measured cost per draft call
    (its ``cost``) when there is one, else the prior. Read from files, never timed: the same on every call."""
    device = torch.device(target.device).type
    try:
        entry = measured_drafter(target, drafter, drafter_key(drafter))
    except AttributeError:
        entry = {}
    record = (entry.get("pacer_costs") or {}).get(device)
    if isinstance(record, dict):
        try:
            return PacerCostModel.from_record(record, f"measured ({device})")
        except (KeyError, TypeError, ValueError, IndexError):
            pass
    draft_cost = (entry.get("cost") or {}).get(device)
    if isinstance(draft_cost, (int, float)) and not isinstance(draft_cost, bool) and draft_cost > 0:
        return PacerCostModel(replace(PRIOR_COSTS, draft_per_token=float(draft_cost)),
                              source=f"prior, measured draft cost ({device})")
    return PacerCostModel()
