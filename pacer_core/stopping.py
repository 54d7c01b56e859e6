"""Cost-aware stopping for PACER: draft another block only when it raises the step's expected tokens
per unit of time (docs/algorithms.md#cost-aware-stopping).

A step that drafts k tokens, each accepted with probability a_i given that the ones before it were,
yields E(k) = 1 + A_1 + … + A_k tokens (A_i = a_1 ⋯ a_i: the first i all accepted; the 1 is the target's
corrected or bonus token) and costs C(k) = k · c_draft + v(k + 1), with v(n) the time of one target pass
over n tokens. On a GPU v is nearly flat in n; on a CPU it is not, so it is measured, not assumed
(``CostMeter``). Drafting b more tokens adds ΔE = A_k (a + a² + … + a^b) for ΔC = b · c_draft +
v(k + b + 1) − v(k + 1); it pays when ΔE / ΔC > E(k) / C(k), i.e. when the step's rate goes up.
Times are in units of one single-token target pass, so the numbers read as "AR steps"."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

# Before anything is measured: a draft token costs 0.15 of a target pass, each extra verified token 0.15.
PRIOR_DRAFT_COST = 0.15
PRIOR_VERIFY_SLOPE = 0.15
HISTORY = 64


@dataclass(frozen=True)
class StepCosts:
    """Costs relative to one single-token target pass: per drafted token, and per extra verified token."""
    draft_per_token: float
    verify_slope: float

    def verify(self, tokens: int) -> float:
        """v(n): one target pass over ``tokens`` tokens (v(1) = 1)."""
        return 1.0 + self.verify_slope * max(tokens - 1, 0)

    def step(self, drafted: int) -> float:
        """C(k): drafting k tokens and verifying them plus the target's own next token."""
        return drafted * self.draft_per_token + self.verify(drafted + 1)


def expected_tokens(accept_probs: list[float]) -> float:
    """E(k) = 1 + Σ_i Π_{j≤i} a_j for per-token conditional acceptance probabilities a_1..a_k."""
    total, all_accepted = 1.0, 1.0
    for probability in accept_probs:
        all_accepted *= probability
        total += all_accepted
    return total


@dataclass(frozen=True)
class ExtendDecision:
    extend: bool
    gain_tokens: float        # ΔE
    extra_cost: float         # ΔC (target passes)
    current_rate: float       # E(k) / C(k)

    def describe(self) -> str:
        marginal = self.gain_tokens / self.extra_cost if self.extra_cost > 0 else float("inf")
        verdict = "draft on" if self.extend else "stop"
        sign = ">" if self.extend else "≤"
        return (f"next block: +{self.gain_tokens:.2f} expected tokens for +{self.extra_cost:.2f} pass-time "
                f"({marginal:.2f}/pass {sign} {self.current_rate:.2f}/pass now) → {verdict}")


def decide_extension(accept_probs: list[float], next_accept: float, block: int, costs: StepCosts) -> ExtendDecision:
    """Whether drafting ``block`` more tokens, each accepted with probability ``next_accept``, raises the
    step's expected tokens per unit time, given the acceptance estimates of the tokens drafted so far."""
    drafted = len(accept_probs)
    prefix_accepted = 1.0
    for probability in accept_probs:
        prefix_accepted *= probability
    gain = prefix_accepted * sum(next_accept ** i for i in range(1, block + 1))
    extra = block * costs.draft_per_token + costs.verify(drafted + block + 1) - costs.verify(drafted + 1)
    rate = expected_tokens(accept_probs) / costs.step(drafted)
    return ExtendDecision(gain / extra > rate if extra > 0 else gain > 0, gain, extra, rate)


class CostMeter:
    """Online estimate of StepCosts for one pair and device, from the run's own timings: seconds per
    drafted token, and a least-squares line through (tokens verified, seconds) of the target passes,
    both divided by the fitted single-token pass. Keeps the last ``HISTORY`` observations of each."""

    def __init__(self, history: int = HISTORY):
        self.drafts: deque[tuple[int, float]] = deque(maxlen=history)
        self.verifies: deque[tuple[int, float]] = deque(maxlen=history)

    def record_draft(self, tokens: int, seconds: float) -> None:
        if tokens > 0 and seconds > 0:
            self.drafts.append((tokens, seconds))

    def record_verify(self, tokens: int, seconds: float) -> None:
        if tokens > 0 and seconds > 0:
            self.verifies.append((tokens, seconds))

    def costs(self) -> StepCosts:
        intercept, slope = self._verify_line()
        if intercept is None:
            return StepCosts(PRIOR_DRAFT_COST, PRIOR_VERIFY_SLOPE)
        single_pass = intercept + slope
        draft_seconds = sum(s for _, s in self.drafts) / max(sum(t for t, _ in self.drafts), 1)
        draft_cost = draft_seconds / single_pass if self.drafts else PRIOR_DRAFT_COST
        return StepCosts(max(draft_cost, 0.0), max(slope / single_pass, 0.0))

    def _verify_line(self) -> tuple[float | None, float]:
        """(intercept, slope) of seconds against tokens; None until two different sizes were seen."""
        sizes = [t for t, _ in self.verifies]
        if len(set(sizes)) < 2:
            return None, 0.0
        count = len(sizes)
        mean_t = sum(sizes) / count
        mean_s = sum(s for _, s in self.verifies) / count
        covariance = sum((t - mean_t) * (s - mean_s) for t, s in self.verifies)
        variance = sum((t - mean_t) ** 2 for t in sizes)
        slope = covariance / variance
        intercept = mean_s - slope * mean_t
        if intercept + slope <= 0:
            return None, 0.0
        return intercept, slope


class AcceptanceCalibration:
    """Rescales the pre-verifier's per-token acceptance estimates to this pair's measured acceptance:
    factor = Σ accepted / Σ predicted over the judged tokens of recent steps (those up to and including
    the first rejection, each judged given that the ones before it were accepted). 1 until measured."""

    def __init__(self, history: int = HISTORY):
        self.steps: deque[tuple[float, int]] = deque(maxlen=history)

    def record(self, predicted: list[float], accepted: int) -> None:
        judged = predicted[: accepted + 1]
        if judged:
            self.steps.append((sum(judged), accepted))

    @property
    def factor(self) -> float:
        predicted = sum(total for total, _ in self.steps)
        return sum(accepted for _, accepted in self.steps) / predicted if predicted > 0 else 1.0

    def calibrate(self, probabilities: list[float]) -> list[float]:
        return [min(1.0, max(0.0, probability * self.factor)) for probability in probabilities]
