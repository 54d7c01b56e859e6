"""PACER: draft in blocks, let a small pre-verifier score each block, stop drafting at the first
block that scores below the threshold (docs/algorithms.md#pacer; Zhang et al. 2026, arXiv 2602.01274).
With ``stop_rule="cost"`` it drafts another block only while that raises the step's expected tokens per
unit of measured time (docs/algorithms.md#cost-aware-stopping), and ``"auto"`` takes the threshold rule when
greedy and the cost rule when sampling (``effective_stop_rule``); with ``phrase_len`` > 0 a block may be a
phrase copied from the prompt or the output instead of drafted (docs/algorithms.md#phrase-drafts).

on_fail="submit" sends the failing block to the target too: the stopping rule only looks at drafted
tokens, so the output keeps the target's distribution exactly. on_fail="discard" drops that block;
exact under greedy decoding only (approximate under sampling, and labelled so)."""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field

from ..drafters import active_engine
from ..events import BlockDecision, StepEvent
from ..phrases import PhraseIndex, PhraseMatch
from ..preverifier import ConfidencePreVerifier, own_threshold, token_features
from ..preverifier.features import DraftContext, history_context
from ..settings import DecodeSettings
from ..stopping import AcceptanceCalibration, CostMeter, decide_extension
from .base import DecodeState, DraftBuilder, Proposal, SpeculativeDecoder


class Pacer(SpeculativeDecoder):
    name = "pacer"

    def __init__(self, block_size: int | None = None, max_draft_len: int | None = None,
                 threshold: float | None = None, preverifier=None, on_fail: str | None = None):
        super().__init__(block_size=block_size, max_draft_len=max_draft_len, threshold=threshold, on_fail=on_fail)
        self.preverifier = preverifier if preverifier is not None else ConfidencePreVerifier()

    def threshold(self, settings: DecodeSettings) -> float:
        """The run's threshold; None (a decoder used without a run request) means the pre-verifier's own."""
        return own_threshold(self.preverifier, settings.temperature) if settings.threshold is None \
            else float(settings.threshold)

    def propose(self, pair, state: DecodeState, settings: DecodeSettings, budget: int) -> Proposal:
        threshold = self.threshold(settings)
        limit = min(settings.max_draft_len, max(budget - 1, 0))
        draft, plan = DraftBuilder(pair, state, settings), BlockPlan()
        meters = pair_meters(pair, state.device)
        costs = meters.costs.costs() if effective_stop_rule(settings) == "cost" else None
        context = history_context(state.first_verified, state.first_accepted, state.last_first_accepted)
        phrases = phrase_index(state) if settings.phrase_len else None
        while len(draft.drafted_ids) < limit:
            block_start = len(draft.drafted_ids)
            room = limit - block_start
            phrase = phrases.find(draft.sequence, state.prompt_len, min(settings.phrase_len, room)) \
                if phrases is not None else None
            size = len(phrase.token_ids) if phrase else min(settings.block_size, room)
            if costs is not None and plan.blocks:
                estimates = meters.calibration.calibrate(plan.token_probs)
                decision = decide_extension(estimates, estimates[-1], size, costs)
                if not decision.extend:
                    plan.stop("cost", note=decision.describe())
                    break
            features, hit_eos = (self._phrase_features(draft, phrase, state, context) if phrase
                                 else self._drafted_features(draft, size, state, context))
            context = features[-1].context.after(features[-1].draft_prob)   # the next block's first token's
            block_score, token_probs = self.preverifier.score_block(features)
            passed = costs is not None or block_score >= threshold
            plan.add(BlockDecision(len(plan.blocks), len(features), float(block_score), threshold, passed,
                                   phrase=phrase.describe() if phrase else None), token_probs)
            if not passed:
                plan.stop("preverifier", stopped_from=block_start,
                          discarded=len(features) if settings.on_fail == "discard" else 0)
                break
            if hit_eos:
                plan.stop("eos")
                break
        if plan.stop_reason == "max_len" and limit < settings.max_draft_len:
            plan.stop("budget")
        return draft.proposal(**plan.proposal_fields())

    def _drafted_features(self, draft: DraftBuilder, size: int, state: DecodeState,
                          context: DraftContext) -> tuple[list, bool]:
        """Draft ``size`` tokens with the drafter; their pre-verifier features (``context``: the block's first
        token's), and whether EOS was drafted."""
        features = []
        for _ in range(size):
            position = len(draft.drafted_ids)
            token_id, logits_row, hidden_row = draft.draw(with_hidden=True)
            features.append(token_features(logits_row, hidden_row, token_id, position, context,
                                           sampled=not draft.settings.greedy))
            context = context.after(features[-1].draft_prob)
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

    def step(self, pair, state: DecodeState, settings: DecodeSettings, step: int) -> StepEvent:
        """The shared step, then its timings go to this pair's cost meter (what the cost rule reads)."""
        event = super().step(pair, state, settings, step)
        meters = pair_meters(pair, state.device)
        drafted_by_model = sum(1 for token in event.tokens[:-1] if not token.phrase)
        phrase_calls = sum(1 for block in event.blocks if block.phrase)
        meters.costs.record_draft(drafted_by_model + phrase_calls, event.draft_seconds)
        meters.costs.record_verify(event.n_drafted + 1, event.verify_seconds)
        verified = event.tokens[: event.n_drafted]
        meters.calibration.record([token.preverifier_prob or 0.0 for token in verified], event.n_accepted)
        return event

    def describe(self, settings: DecodeSettings) -> dict:
        return {"preverifier": getattr(self.preverifier, "kind", "custom"), "block_size": settings.block_size,
                "max_draft_len": settings.max_draft_len, "threshold": self.threshold(settings),
                "on_fail": settings.on_fail, "stop_rule": settings.stop_rule, "phrase_len": settings.phrase_len}


def effective_stop_rule(settings: DecodeSettings) -> str:
    """``auto`` is the threshold rule when greedy and the cost rule when sampling. Greedy, the draft's own q(x)
    says how likely the target's argmax is its token, so a threshold on it stops at the risky blocks; sampling
    with a drafter close to the target, acceptance is about 1 - TV(p, q) whatever the token, so no per-token
    signal is left and only the economics decide: draft another block while it raises the expected tokens per
    unit of measured time (docs/algorithms.md#cost-aware-stopping)."""
    if settings.stop_rule == "auto":
        return "threshold" if settings.greedy else "cost"
    return settings.stop_rule


def phrase_index(state: DecodeState) -> PhraseIndex:
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
        self.stop_reason, self.stop_note, self.stopped_from, self.discarded = "max_len", None, None, 0

    def add(self, block: BlockDecision, token_probs) -> None:
        self.blocks.append(block)
        self.token_blocks += [block.index] * block.size
        self.token_probs += [float(prob) for prob in token_probs]

    def stop(self, reason: str, note: str | None = None, stopped_from: int | None = None, discarded: int = 0) -> None:
        self.stop_reason, self.stop_note, self.stopped_from, self.discarded = reason, note, stopped_from, discarded

    def proposal_fields(self) -> dict:
        return {"blocks": self.blocks, "token_blocks": self.token_blocks, "token_preverifier_probs": self.token_probs,
                "stopped_from": self.stopped_from, "discarded": self.discarded, "stop_reason": self.stop_reason,
                "stop_note": self.stop_note}


@dataclass
class PairMeters:
    """What the cost rule measures for one pair (target and drafter) on one device, across the process's runs."""
    costs: CostMeter = field(default_factory=CostMeter)
    calibration: AcceptanceCalibration = field(default_factory=AcceptanceCalibration)


# Per drafter object (weakly held: a drafter that is dropped takes its meters with it), then per target and
# device, since one drafter may be swapped into several pairs.
_METERS: "weakref.WeakKeyDictionary[object, dict[tuple, PairMeters]]" = weakref.WeakKeyDictionary()


def pair_meters(pair, device) -> PairMeters:
    by_target = _METERS.setdefault(pair.drafter, {})
    return by_target.setdefault((id(pair.target), id(active_engine(pair)), str(device)), PairMeters())
