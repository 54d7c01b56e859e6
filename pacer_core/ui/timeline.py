"""Pure numbers behind three plots (no plotly, no Gradio): the wall-clock timeline of target passes,
the expected speedup as a function of per-token acceptance, and the accepted-tokens-per-step histogram.

Timeline. Every event (a StepEvent of AR, fixed SD or PACER, an SMCCycleEvent of SMC-SD) is one target
pass and carries its own ``draft_seconds`` and ``verify_seconds``; the first also carries ``prefill_seconds``,
what the run spent before it (fresh caches, the prompt's prefill: the same work for every method on an engine
that prefills, as the llama.cpp target does). Each lane lays ITS OWN passes end to end from 0: the prefill, then
per pass draft, then verify (Run times the methods alone, one after another; Step between clicks). The draft time
of a step is split in proportion to its drafted tokens into the part that drafted tokens the target kept and the
part that drafted tokens it rejected (or that PACER's pre-verifier discarded): that part was wasted. What a lane
leaves out is the decoder's own work between model calls (sampling, bookkeeping): its seconds in the metrics
table are a little longer.

Expected speedup (Leviathan et al. 2023, arXiv 2211.17192, section 3). If the target accepts each drafted
token independently with probability α, a step that drafts γ tokens emits

    E[tokens per step] = (1 - α^(γ+1)) / (1 - α)        (γ + 1 at α = 1)

and, with c the cost of drafting one token and v the cost of the verifying target pass, both in units of
one AR step (one target pass producing one token),

    speedup(α) = E[tokens per step] / (γ c + v).

The paper assumes v = 1; here c and v are MEASURED on the run: c = the method's draft seconds per drafted
token, v = its verify seconds per step, each divided by AR's seconds per token from the AR lane. A
method's operating point is α̂, the acceptance at which the formula gives the run's tokens per step τ,
and its measured speedup τ / (mean step seconds / AR seconds per token), which lies on its curve by
construction. Worked example: γ = 4, c = 0.1, v = 1.2, α = 0.5: E = (1 - 0.5^5) / 0.5 = 1.9375, cost
= 4 x 0.1 + 1.2 = 1.6, speedup = 1.21; at α = 0 it is 1 / 1.6 = 0.625 (slower than AR)."""
from __future__ import annotations

from dataclasses import dataclass

from ..events import SMCCycleEvent, StepEvent, TokenState
from ..method_table import method_keys

KEPT_DRAFT, WASTED_DRAFT, VERIFY, PREFILL = "draft kept", "draft wasted", "verify", "prefill"
_WASTED_STATES = (TokenState.REJECTED, TokenState.DISCARDED)
_DRAFT_STATES = (TokenState.ACCEPTED, TokenState.REJECTED, TokenState.DISCARDED)


def drafted_and_wasted(event) -> tuple[int, int]:
    """(tokens drafted in this pass, how many of them the target did not keep). SMC-SD keeps every drafted
    token (it reweights particles instead of rejecting): K drafted per particle, none wasted."""
    if isinstance(event, SMCCycleEvent):
        if event.particle_tokens:
            drafted = max((sum(t.state is TokenState.DRAFTED for t in row) for row in event.particle_tokens),
                          default=0)
        else:
            drafted = max((len(ids) for ids in event.particle_token_ids), default=1) - 1
        return max(drafted, 0), 0
    drafted = sum(token.state in _DRAFT_STATES for token in event.tokens)
    return drafted, sum(token.state in _WASTED_STATES for token in event.tokens)


def kept_per_step(event) -> int:
    """Drafted tokens the target kept in one pass: accepted ones (SMC-SD: all K drafted per particle)."""
    if isinstance(event, SMCCycleEvent):
        return drafted_and_wasted(event)[0]
    return int(event.n_accepted)


@dataclass(frozen=True)
class Segment:
    """One bar of the timeline: part of one target pass of one method."""
    method: str
    step: int           # 0-based pass index
    kind: str           # PREFILL (before the first pass), KEPT_DRAFT, WASTED_DRAFT or VERIFY
    start: float        # seconds from the method's start, its own passes laid end to end
    seconds: float
    drafted: int        # tokens drafted in this pass (0 for AR)
    wasted: int         # of which rejected or discarded
    emitted: int        # tokens the pass added to the output
    passes: int = 1     # consecutive passes this bar stands for (``method_segments``' ``group``)


def _passes(events) -> list:
    return [event for event in events or [] if isinstance(event, (StepEvent, SMCCycleEvent))]


def lane_order(methods) -> list[str]:
    """The lanes of ``methods`` top to bottom: the method table's order (AR first), then any it does not know."""
    known = method_keys()
    return [m for m in known if m in methods] + [m for m in methods if m not in known]


def emitted_per_pass(events) -> list[int]:
    """Tokens each pass added to the output (from the running totals)."""
    counts, before = [], 0
    for event in _passes(events):
        counts.append(max(event.total_new_tokens - before, 0))
        before = event.total_new_tokens
    return counts


def method_segments(method: str, events, group: int = 1) -> list[Segment]:
    """One method's lane: the prefill before its first pass, then per pass the kept draft time, the wasted draft
    time and the verify time (zero-length parts left out). ``group`` > 1: each bar stands for that many consecutive passes (their
    times and counts summed, ``step`` the first one's), so a long run's lane keeps a bounded number of bars
    on the same time axis."""
    segments, clock = [], 0.0
    passes = list(zip(_passes(events), emitted_per_pass(events)))
    for first in range(0, len(passes), max(1, group)):
        chunk = passes[first: first + max(1, group)]
        counts = [drafted_and_wasted(event) for event, _ in chunk]
        drafted, wasted = sum(count for count, _ in counts), sum(lost for _, lost in counts)
        emitted = sum(count for _, count in chunk)
        draft_seconds = sum(max(event.draft_seconds, 0.0) for event, _ in chunk)
        verify_seconds = sum(max(event.verify_seconds, 0.0) for event, _ in chunk)
        wasted_seconds = sum(max(event.draft_seconds, 0.0) * lost / count
                             for (event, _), (count, lost) in zip(chunk, counts) if count)
        prefill_seconds = sum(max(event.prefill_seconds, 0.0) for event, _ in chunk)
        parts = ((PREFILL, prefill_seconds), (KEPT_DRAFT, draft_seconds - wasted_seconds),
                 (WASTED_DRAFT, wasted_seconds), (VERIFY, verify_seconds))
        for kind, seconds in parts:
            if seconds > 0:
                segments.append(Segment(method, chunk[0][0].step, kind, clock, seconds, drafted, wasted, emitted,
                                        len(chunk)))
                clock += seconds
    return segments


def timeline_segments(events_by_method: dict, max_bars: int | None = None) -> list[Segment]:
    """Every lane's segments, lanes in ``lane_order`` (the method table's order, AR first). ``max_bars``: a lane
    with more passes than that groups consecutive passes (the fewest per bar that fit)."""
    order = lane_order(events_by_method)
    segments = []
    for method in order:
        count = len(_passes(events_by_method[method]))
        group = -(-count // max_bars) if max_bars and count > max_bars else 1
        segments += method_segments(method, events_by_method[method], group)
    return segments


# ---------------------------------------------------------------- expected speedup (Leviathan et al. 2023)

def expected_tokens_per_step(alpha: float, gamma: float) -> float:
    """E[tokens per step] = (1 - α^(γ+1)) / (1 - α): accepted drafts plus the one corrected or bonus token."""
    alpha = min(max(float(alpha), 0.0), 1.0)
    if alpha >= 1.0 - 1e-12:
        return gamma + 1.0
    return (1.0 - alpha ** (gamma + 1.0)) / (1.0 - alpha)


def expected_speedup(alpha: float, gamma: float, draft_cost: float, verify_cost: float,
                     drafted_per_step: float | None = None) -> float:
    """E[tokens per step] / (drafted_per_step x draft_cost + verify_cost), costs in AR steps.
    ``drafted_per_step`` defaults to γ (PACER drafts, and may discard, a different number per step)."""
    cost = (gamma if drafted_per_step is None else drafted_per_step) * draft_cost + verify_cost
    return expected_tokens_per_step(alpha, gamma) / cost if cost > 0 else float("nan")


def implied_acceptance(tokens_per_step: float, gamma: float) -> float:
    """α̂ in [0, 1] with expected_tokens_per_step(α̂, γ) = tokens_per_step (clamped; bisection: the
    expectation increases with α from 1 to γ + 1)."""
    if tokens_per_step <= 1.0 or gamma <= 0:
        return 0.0
    if tokens_per_step >= gamma + 1.0:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        if expected_tokens_per_step(middle, gamma) < tokens_per_step:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def ar_seconds_per_token(ar_events) -> float | None:
    """AR's measured seconds per token (its passes' time over its tokens), None before it has any."""
    passes = _passes(ar_events)
    tokens = passes[-1].total_new_tokens if passes else 0
    seconds = sum(event.draft_seconds + event.verify_seconds for event in passes)
    return seconds / tokens if tokens and seconds > 0 else None


@dataclass(frozen=True)
class OperatingPoint:
    """A speculative method on the speedup-against-acceptance plot, from its measured passes."""
    method: str
    gamma: float              # mean tokens sent to the target per step (γ of the formula)
    drafted_per_step: float   # mean tokens drafted per step (PACER's discarded ones included)
    draft_cost: float         # c: draft seconds per drafted token / AR seconds per token
    verify_cost: float        # v: verify seconds per step / AR seconds per token
    tokens_per_step: float    # τ measured
    alpha_hat: float          # acceptance at which the formula gives τ
    speedup: float            # measured: τ / (mean step seconds / AR seconds per token)
    kept_fraction: float | None   # accepted / drafted as counted (the table's α); None for SMC-SD

    def curve(self, alphas) -> list[float]:
        return [expected_speedup(a, self.gamma, self.draft_cost, self.verify_cost, self.drafted_per_step)
                for a in alphas]


def operating_point(method: str, events, ar_seconds: float) -> OperatingPoint | None:
    """The measured costs and operating point of one method, None without passes or drafted tokens."""
    passes = _passes(events)
    if not passes or not ar_seconds or ar_seconds <= 0:
        return None
    counts = [drafted_and_wasted(event) for event in passes]
    drafted = sum(count for count, _ in counts)
    if drafted == 0:
        return None
    steps = len(passes)
    sent = sum(event.n_drafted for event in passes) if isinstance(passes[0], StepEvent) else drafted
    draft_seconds = sum(event.draft_seconds for event in passes)
    verify_seconds = sum(event.verify_seconds for event in passes)
    tokens = passes[-1].total_new_tokens
    gamma, tau = sent / steps, tokens / steps
    kept = None
    if isinstance(passes[0], StepEvent):
        kept = sum(event.n_accepted for event in passes) / sent if sent else None
    step_cost = (draft_seconds + verify_seconds) / steps / ar_seconds
    return OperatingPoint(method, gamma, drafted / steps, draft_seconds / drafted / ar_seconds,
                          verify_seconds / steps / ar_seconds, tau, implied_acceptance(tau, gamma),
                          tau / step_cost if step_cost > 0 else float("nan"), kept)


def accepted_histogram(events) -> dict[int, int]:
    """{accepted drafted tokens in a pass: number of passes}, every count from 0 to the largest present."""
    kept = [kept_per_step(event) for event in _passes(events)]
    if not kept:
        return {}
    return {count: kept.count(count) for count in range(max(kept) + 1)}
