"""Typed step events: the only contract between the decoders and everything that shows them.

Every event is a dataclass of plain numbers, strings and lists, so ``asdict`` gives JSON (a field marked
``IN_MEMORY_ONLY`` in its metadata is left out of it and of traces).
Token states are ``TokenState`` (docs/algorithms.md#token-states-and-colours); "stopped" is not a
state but a flag on the tokens of the block the pre-verifier failed (they also carry accepted or
rejected once verified)."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from enum import StrEnum

IN_MEMORY_ONLY = "in_memory_only"      # field metadata key: the field is never serialised


class TokenState(StrEnum):
    """What happened to one token. A str: ``TokenState.ACCEPTED == "accepted"``, and JSON shows the value."""
    DRAFTED = "drafted"        # proposed by the draft: not yet verified, or (SMC-SD) kept and reweighted
    ACCEPTED = "accepted"      # drafted, then accepted by the target
    REJECTED = "rejected"      # drafted, then rejected by the target
    DISCARDED = "discarded"    # PACER "discard" mode: the failed block, never sent to the target
    CORRECTED = "corrected"    # the target's own token in place of the first rejected one
    BONUS = "bonus"            # the target's extra token after every draft was accepted
    TARGET = "target"          # produced by the target alone (AR)


@dataclass
class TokenRecord:
    """One token shown in a column, with what the models thought of it."""
    token_id: int
    text: str
    state: TokenState                   # a plain string is accepted and converted
    draft_prob: float | None = None     # q(x) at the decoding temperature (T=1 softmax when greedy)
    target_prob: float | None = None    # p(x) likewise
    accept_prob: float | None = None    # min(1, p/q); 1/0 under greedy
    block: int | None = None            # PACER block index of a drafted token
    preverifier_prob: float | None = None  # PACER per-token acceptance estimate
    stopped: bool = False               # inside the block the pre-verifier failed
    phrase: bool = False                # PACER: copied from an earlier occurrence (q one-hot), not drafted by a model

    def __post_init__(self):
        self.state = TokenState(self.state)


@dataclass
class BlockDecision:
    """PACER: the pre-verifier's verdict on one drafted block."""
    index: int
    size: int
    score: float
    threshold: float
    passed: bool
    phrase: str | None = None           # a phrase block: where it was copied from ("copied 5 tokens from the prompt …")


@dataclass
class StepEvent:
    """One target forward pass of AR, fixed-length SD or PACER."""
    method: str
    step: int
    tokens: list[TokenRecord]           # drafted tokens in order, then the corrected/bonus token
    emitted_ids: list[int]              # tokens appended to the output this step
    emitted_text: str
    n_drafted: int
    n_accepted: int
    draft_seconds: float
    verify_seconds: float
    total_new_tokens: int
    blocks: list[BlockDecision] = field(default_factory=list)
    stop_reason: str | None = None      # PACER: why drafting stopped (preverifier, cost, max_len, budget, eos)
    stop_note: str | None = None        # PACER's cost rule: the comparison that ended drafting
    oracle_len: float | None = None     # gamma*: accepted count of a forced long draft (pacer_core.analysis)
    prefill_seconds: float = 0.0        # the run's first pass only: the prompt's prefill and fresh caches before it
    kind: str = "step"


@dataclass
class SMCCycleEvent:
    """One SMC-SD cycle: N particles drafted, weighted and possibly resampled."""
    method: str
    step: int
    particle_texts: list[str]           # each particle's new tokens this cycle
    particle_token_ids: list[list[int]]
    log_weights: list[float]            # after this cycle's increment, before any reset
    weights: list[float]                # normalised
    ess: float
    ess_threshold: float
    resampled: bool
    ancestors: list[int]                # row i now descends from old row ancestors[i]
    finished: list[bool]
    draft_seconds: float
    verify_seconds: float
    total_new_tokens: int               # length of the longest particle's continuation
    leader_text: str = ""               # the currently heaviest particle's full continuation
    particle_tokens: list[list[TokenRecord]] = field(default_factory=list)  # each particle's new tokens this
    #                                     cycle, each with its own text: DRAFTED (kept, reweighted) or BONUS
    resample_below: float | None = None  # the ESS line it resampled below: 1 + ess_threshold·(N − 1)
    prefill_seconds: float = 0.0        # the first cycle only: the prompt's prefill and the N rows made before it
    kind: str = "smc_cycle"

    @property
    def resample_line(self) -> float:
        """The ESS below which this cycle resampled (``particles.resample_line``). A trace without
        ``resample_below`` was recorded by a decoder that drew the line at ess_threshold · N."""
        if self.resample_below is not None:
            return self.resample_below
        return self.ess_threshold * len(self.weights)


@dataclass
class Metrics:
    """Names as in docs/algorithms.md#metrics."""
    tau: float
    alpha: float | None
    target_calls: int
    draft_calls: int
    new_tokens: int
    seconds: float
    tokens_per_s: float
    drafted_tokens: int = 0
    accepted_tokens: int = 0

    @classmethod
    def of_run(cls, new_tokens: int, seconds: float, target_calls: int, draft_calls: int,
               drafted_tokens: int = 0, accepted_tokens: int = 0) -> Metrics:
        """Every decoder's Metrics, from its counts: tau = new tokens / target calls; alpha = accepted / drafted,
        None when nothing was drafted and judged (AR; SMC-SD, which reweights instead of rejecting)."""
        return cls(tau=new_tokens / target_calls if target_calls else 0.0,
                   alpha=accepted_tokens / drafted_tokens if drafted_tokens else None,
                   target_calls=target_calls, draft_calls=draft_calls, new_tokens=new_tokens, seconds=seconds,
                   tokens_per_s=new_tokens / seconds if seconds > 0 else 0.0,
                   drafted_tokens=drafted_tokens, accepted_tokens=accepted_tokens)


@dataclass
class Result:
    method: str
    text: str
    token_ids: list[int]
    events: list
    metrics: Metrics
    settings: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)   # e.g. {"preverifier": "heuristic"}, {"approximate": True}
    finish_reason: str = "length"              # eos | length | cancelled
    kind: str = "result"
    target_log_probs: list[float] = field(default_factory=list)   # per token, T = 1, when the run recorded them
    # The target's logits row that judged each token, [len(token_ids), V], when the run was asked to keep them
    # (RunRequest.keep_rows: the page scores a run's output from them instead of another target pass).
    target_rows: object = field(default=None, repr=False, compare=False, metadata={IN_MEMORY_ONLY: True})
    # The drafter's logits row predicting each token given the true prefix, [len(token_ids), V], when the run kept
    # them (PACER's oracle and SMC-SD's proposal divergence read them); ``complete_rows``, when not None, computes
    # the rows no draft call fed (a last bonus token) and fills ``draft_rows``: the page calls it untimed.
    draft_rows: object = field(default=None, repr=False, compare=False, metadata={IN_MEMORY_ONLY: True})
    complete_rows: object = field(default=None, repr=False, compare=False, metadata={IN_MEMORY_ONLY: True})

    def to_dict(self) -> dict:
        in_memory = [item.name for item in fields(self) if item.metadata.get(IN_MEMORY_ONLY)]
        data = asdict(replace(self, **dict.fromkeys(in_memory)))
        for name in in_memory:
            del data[name]                  # in memory only (IN_MEMORY_ONLY): never in a trace
        return data

    def to_json(self, **kwargs) -> str:
        return json.dumps(self.to_dict(), **kwargs)
