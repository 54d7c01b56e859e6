"""Cost-aware stopping for PACER: draft another block only when it raises the step's expected tokens
per unit of time (docs/algorithms.md#cost-aware-stopping).

A step that drafts k tokens, each accepted with probability a_i given that the ones before it were,
yields E(k) = 1 + A_1 + … + A_k tokens (A_i = a_1 ⋯ a_i: the first i all accepted; the 1 is the target's
corrected or bonus token) and costs C(k) = o + k · c_draft + v(k + 1), with v(n) the time of one target pass
over n tokens and o what a step costs whatever its length outside that pass: its bookkeeping, and the part of its
drafting that does not grow with k (the first draft call feeds the token the target added, two after a draft kept
whole; measured on the 2-core host at T = 0.7 that is 0.35 AR steps a step beside 0.48 a drafted token,
docs/measurements.md "PACER against fixed lengths"). On a GPU v is nearly flat in n; on a CPU it is not,
so it is measured, not assumed. Drafting b more tokens adds ΔE = A_k (a + a² + … + a^b) for ΔC = b · c_draft +
v(k + b + 1) − v(k + 1); it pays when ΔE / ΔC > E(k) / C(k), i.e. when the step's rate goes up.
Times are in units of one autoregressive step, so the numbers read as "AR steps" and E(k) / C(k) is the
step's speed-up over AR.

Under sampling a drafted x ~ q is accepted with probability min(1, p(x)/q(x)), whose mean is 1 − TV(p, q)
(Leviathan et al. 2023): the draft cannot see p, but its own entropy H(q) predicts the TV, since a drafter
close to the target is close to it in the same places (where q is nearly one-hot, so is p).
``AcceptanceByEntropy`` is that prediction, a table fitted on measured acceptance.

The costs and that table are a stored model per pair and kind of device (``PacerCostModel``: measured once by
``python -m pacer_core.training.pacer_costs``, kept in the draft folder's measured_defaults.json), measured inside
runs, where a draft call costs what the run makes it cost, and by prompt length when they depend on it (on a CPU a
longer context makes every pass slower, the draft's relatively more: ``PacerCostModel.at_prompt_length``). Priced
with it, every decision is a function of the run's inputs, its seed and that model, so a seeded sampled run repeats
token for token whatever ran before it. ``RunCosts`` is the other source: the run's own steps' seconds, with the
stored costs as a prior, which price drafting on the host the run is on (greedy runs use it: their output is the
target's argmax whatever the draft lengths)."""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field, replace

import torch

# Without a measured model: a draft token costs 0.15 of a target pass, each extra verified token 0.15.
PRIOR_DRAFT_COST = 0.15
PRIOR_VERIFY_SLOPE = 0.15


def interpolate(points: tuple[tuple[float, float], ...], x: float) -> float:
    """Piecewise-linear through sorted (x, y) points; the first y before them, the last segment's line after."""
    if len(points) == 1 or x <= points[0][0]:
        return points[0][1]
    index = min(bisect.bisect_left([px for px, _ in points], x), len(points) - 1)
    (x0, y0), (x1, y1) = points[index - 1], points[index]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def least_squares_line(xs: list[float], ys: list[float], weights: list[float] | None = None) -> tuple[float, float]:
    """(intercept, slope) of the (weighted) least-squares line through the points; slope 0 when every x is the
    same."""
    weights = [1.0] * len(xs) if weights is None else weights
    if not xs or len(xs) != len(ys) or len(xs) != len(weights) or sum(weights) <= 0:
        raise ValueError("need one y and one positive weight per x, and at least one point")
    total = sum(weights)
    mean_x = sum(w * x for x, w in zip(xs, weights)) / total
    mean_y = sum(w * y for y, w in zip(ys, weights)) / total
    variance = sum(w * (x - mean_x) ** 2 for x, w in zip(xs, weights))
    slope = sum(w * (x - mean_x) * (y - mean_y) for x, y, w in zip(xs, ys, weights)) / variance if variance > 0 else 0.0
    return mean_y - slope * mean_x, slope


def per_step_and_per_token(lengths: list[float], seconds: list[float],
                           weights: list[float] | None = None) -> tuple[float, float] | None:
    """A step's drafting cost split into what the step pays once and what each drafted token adds: the (weighted)
    least-squares line of ``seconds`` on draft ``lengths``. A step's first draft call feeds what the target added
    (one token, two after a draft kept whole), so drafting k tokens costs more than k one-token calls: an average
    per token hides that and prices long drafts too high. None where the line cannot say: every step drafted the
    same length, or a part came out negative (noise)."""
    intercept, slope = least_squares_line(lengths, seconds, weights)
    if intercept >= 0 and slope > 0 and len(set(lengths)) > 1:
        return intercept, slope
    return None


@dataclass(frozen=True)
class StepCosts:
    """Costs in AR steps: per drafted token, a target pass over n tokens (``verify_points``, measured (n, cost)
    pairs, else 1 + ``verify_slope`` · (n − 1)), and what a step costs whatever its length outside that pass
    (``step_overhead``: its bookkeeping and its drafting's fixed part, ``per_step_and_per_token``)."""
    draft_per_token: float
    verify_slope: float = PRIOR_VERIFY_SLOPE
    verify_points: tuple[tuple[int, float], ...] = ()
    step_overhead: float = 0.0

    def verify(self, tokens: int) -> float:
        """v(n): one target pass over ``tokens`` tokens."""
        if self.verify_points:
            return interpolate(self.verify_points, tokens)
        return 1.0 + self.verify_slope * max(tokens - 1, 0)

    def step(self, drafted: int) -> float:
        """C(k): drafting k tokens and verifying them plus the target's own next token."""
        return self.step_overhead + drafted * self.draft_per_token + self.verify(drafted + 1)


PRIOR_COSTS = StepCosts(PRIOR_DRAFT_COST, PRIOR_VERIFY_SLOPE)


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
    extra_cost: float         # ΔC (AR steps)
    current_rate: float       # E(k) / C(k)

    def describe(self) -> str:
        marginal = self.gain_tokens / self.extra_cost if self.extra_cost > 0 else float("inf")
        verdict = "draft on" if self.extend else "stop"
        sign = ">" if self.extend else "≤"
        return (f"next block: +{self.gain_tokens:.2f} expected tokens for +{self.extra_cost:.2f} AR steps "
                f"({marginal:.2f}/step {sign} {self.current_rate:.2f}/step now) → {verdict}")


def decide_extension(accept_probs: list[float], next_accept: float, block: int, costs: StepCosts) -> ExtendDecision:
    """Whether drafting ``block`` more tokens, each accepted with probability ``next_accept``, raises the
    step's expected tokens per unit time, given the acceptance estimates of the tokens drafted so far."""
    drafted = len(accept_probs)
    prefix_accepted = math.prod(accept_probs)
    gain = prefix_accepted * sum(next_accept ** i for i in range(1, block + 1))
    extra = block * costs.draft_per_token + costs.verify(drafted + block + 1) - costs.verify(drafted + 1)
    rate = expected_tokens(accept_probs) / costs.step(drafted)
    return ExtendDecision(gain / extra > rate if extra > 0 else gain > 0, gain, extra, rate)


ESTIMATE_FLOOR = 1e-6          # an acceptance estimate is clipped to [floor, 1 − floor] before its logit


def clipped_logit(probability: float) -> float:
    probability = min(max(probability, ESTIMATE_FLOOR), 1.0 - ESTIMATE_FLOOR)
    return math.log(probability / (1.0 - probability))


def platt(estimate: float, slope: float, offset: float) -> float:
    """An estimate through a Platt map, σ(slope · logit(e) + offset) (the identity at slope 1, offset 0)."""
    return 1.0 / (1.0 + math.exp(-(slope * clipped_logit(estimate) + offset)))


def entropy_nats(probs: torch.Tensor) -> torch.Tensor:
    """H(q) = −Σ q log q over the last dimension, in nats ([..., V] → [...]); 0 · log 0 = 0."""
    probs = probs.double()
    return (-(probs * torch.log(probs.clamp_min(1e-300))).sum(-1)).clamp_min(0.0)


def non_increasing(values: list[float], weights: list[float]) -> list[float]:
    """The weighted least-squares non-increasing fit of ``values`` (pool adjacent violators)."""
    pools: list[list[float]] = []                       # [mean, weight, count]
    for value, weight in zip(values, weights):
        pools.append([value, weight, 1])
        while len(pools) > 1 and pools[-2][0] < pools[-1][0]:
            mean, total, count = pools.pop()
            last = pools[-1]
            last[0] = (last[0] * last[1] + mean * total) / (last[1] + total)
            last[1], last[2] = last[1] + total, last[2] + count
    return [mean for mean, _, count in pools for _ in range(count)]


@dataclass(frozen=True)
class AcceptanceByEntropy:
    """Mean acceptance min(1, p(x)/q(x)) of a sampled draft token by the entropy of the q it was drawn from
    (nats, at the run's temperature): bin i covers entropies up to ``edges[i]`` (the last bin everything above),
    its acceptance is ``acceptance[i]``, non-increasing in the entropy."""
    edges: tuple[float, ...]
    acceptance: tuple[float, ...]

    def __call__(self, entropy: float) -> float:
        return self.acceptance[min(bisect.bisect_left(self.edges, entropy), len(self.acceptance) - 1)]

    @classmethod
    def fit(cls, entropies: list[float], accept_probs: list[float], bins: int = 8) -> "AcceptanceByEntropy":
        """Equal-count entropy bins (ties kept together), each bin's mean acceptance, made non-increasing."""
        if not entropies or len(entropies) != len(accept_probs):
            raise ValueError("need one acceptance probability per entropy, and at least one")
        ordered = sorted(zip(entropies, accept_probs))
        edges, means, counts, start = [], [], [], 0
        for index in range(1, bins + 1):
            end = len(ordered) * index // bins
            while 0 < end < len(ordered) and ordered[end][0] == ordered[end - 1][0]:
                end += 1
            if end > start:
                chunk = ordered[start:end]
                edges.append(chunk[-1][0])
                means.append(sum(a for _, a in chunk) / len(chunk))
                counts.append(len(chunk))
                start = end
        return cls(tuple(edges), tuple(non_increasing(means, counts)))


def costs_between(by_length: tuple[tuple[int, StepCosts], ...], prompt_tokens: int) -> StepCosts:
    """The step costs at ``prompt_tokens``, piecewise-linear between the lengths they were measured at (sorted),
    the nearest measured ones outside them. The verify pass is read at the first length's pass sizes."""
    lengths = tuple(float(length) for length, _ in by_length)
    at = lambda values: interpolate(tuple(zip(lengths, values)), min(max(prompt_tokens, lengths[0]), lengths[-1]))  # noqa: E731
    sizes = [size for size, _ in by_length[0][1].verify_points] or [1]
    return StepCosts(at([costs.draft_per_token for _, costs in by_length]),
                     verify_points=tuple((size, at([costs.verify(size) for _, costs in by_length])) for size in sizes),
                     step_overhead=at([costs.step_overhead for _, costs in by_length]))


@dataclass(frozen=True)
class PacerCostModel:
    """What the cost rule knows about one pair on one kind of device: its step costs (and, measured at several
    prompt lengths, ``by_length``), and (measured at some temperature) the acceptance of sampled draft tokens by
    their entropy and on average."""
    costs: StepCosts = PRIOR_COSTS
    acceptance: AcceptanceByEntropy | None = None
    mean_acceptance: float | None = None
    source: str = "prior"
    by_length: tuple[tuple[int, StepCosts], ...] = ()

    def at_prompt_length(self, prompt_tokens: int) -> "PacerCostModel":
        """The model whose costs are those measured at this prompt length (interpolated); itself when the costs were
        measured at one length only."""
        if len(self.by_length) < 2:
            return self
        return replace(self, costs=costs_between(self.by_length, prompt_tokens))

    def token_acceptance(self, entropy: float, fallback: float) -> float:
        """A sampled token's acceptance estimate: the table's, else ``fallback`` (the pre-verifier's)."""
        return self.acceptance(entropy) if self.acceptance is not None else fallback

    @classmethod
    def from_record(cls, record: dict, source: str = "measured") -> "PacerCostModel":
        """From measured_defaults.json's ``pacer_costs`` entry for one kind of device (see ``to_record``)."""
        costs = step_costs(record)
        table = record.get("acceptance_by_entropy")
        acceptance = AcceptanceByEntropy(tuple(float(e) for e, _ in table), tuple(float(a) for _, a in table)) \
            if table else None
        mean = record.get("mean_acceptance")
        by_length = tuple(sorted((int(entry["prompt_tokens"]), step_costs(entry))
                                 for entry in record.get("by_prompt_length", ())))
        return cls(costs, acceptance, None if mean is None else float(mean), source, by_length)

    def to_record(self) -> dict:
        record = costs_record(self.costs)
        if self.acceptance is not None:
            record["acceptance_by_entropy"] = [[round(e, 4), round(a, 4)] for e, a in
                                               zip(self.acceptance.edges, self.acceptance.acceptance)]
        if self.mean_acceptance is not None:
            record["mean_acceptance"] = round(self.mean_acceptance, 4)
        if self.by_length:
            record["by_prompt_length"] = [{"prompt_tokens": length} | costs_record(costs) for length, costs in self.by_length]
        return record


# How many steps the stored costs count for at each of their two points on each of the run's lines.
PRIOR_PASSES = 2.0
RUN_COSTS_SPAN = 17   # the run's verify line is stored as its values at 1 and this many tokens
PRIOR_SPREAD = 4.0    # the prior's drafting line enters at the run's mean draft length ± this many tokens


@dataclass
class RunCosts:
    """A run's own step costs, read from its steps' seconds as it goes (the first step, which may include a
    prefill, left out by the caller): the host's and this prompt's prices, which a stored model measured elsewhere
    only approximates.

    ``costs(prior)`` gives StepCosts in units of the run's one-token target pass (about one AR step), with the
    ``prior`` (the stored model, in AR steps) counting as ``PRIOR_PASSES`` steps at each of two points of each line:

        v(n) = α + β (n − 1): the weighted least-squares line through the run's (n, seconds) passes and the prior's
               line at n = 1 and ``RUN_COSTS_SPAN`` at the run's scale s = Σ seconds / Σ prior.verify(n) over its
               passes, so one pass size cannot tilt it
        w(k) = o + c_draft · k: a step's seconds outside its verify pass (drafting and bookkeeping) by its draft
               length, ``per_step_and_per_token`` through the run's steps and the prior's o + c_draft · k at the
               run's level, ``PRIOR_SPREAD`` tokens either side of the run's mean length (``_outside_line``)
        unit = α (the line at one token).

    Worked example: prior c_draft 0.5, o 0.05, v(n) = 1 + 0.1 (n − 1); the run drafted 10 tokens in 0.1 s with
    0.001 s of bookkeeping and verified 11 tokens in 0.04 s, twice: s = 0.08 / 4 = 0.02 s, v = 0.02 + 0.002 (n − 1)
    s (the run's passes lie on the prior's line at that scale), w(10) = 0.101 s = 0.02 s times the prior's 0.05 + 0.5 ·
    10, so c_draft = 0.5 and o = 0.05 AR steps again."""
    passes: list[tuple[int, float]] = field(default_factory=list)    # (tokens verified incl. the bonus, seconds)
    outside: list[tuple[int, float]] = field(default_factory=list)   # (tokens drafted, seconds outside the pass)

    def observe(self, drafted: int, draft_seconds: float, verified_tokens: int, verify_seconds: float,
                other_seconds: float = 0.0) -> None:
        """One step: ``drafted`` tokens drafted in ``draft_seconds``, a target pass over ``verified_tokens`` tokens
        (drafted and sent, plus the target's own) in ``verify_seconds``, and ``other_seconds`` of the step's own
        bookkeeping."""
        if min(draft_seconds, verify_seconds, other_seconds) < 0 or verified_tokens < 1:
            raise ValueError("a step's seconds are at least 0 and a verify pass covers at least one token")
        self.passes.append((verified_tokens, verify_seconds))
        self.outside.append((drafted, draft_seconds + other_seconds))

    @property
    def steps(self) -> int:
        return len(self.passes)

    def costs(self, prior: StepCosts) -> StepCosts:
        """The step costs this run has measured so far, in units of its one-token pass; ``prior`` before any step."""
        prior_seconds = sum(prior.verify(tokens) for tokens, _ in self.passes)
        seconds = sum(spent for _, spent in self.passes)
        if not self.passes or prior_seconds <= 0 or seconds <= 0:
            return prior
        scale = seconds / prior_seconds
        one_token, slope = self._verify_line(prior, scale)
        overhead, per_token = self._outside_line(prior)
        return StepCosts(per_token / one_token,
                         verify_points=((1, 1.0), (RUN_COSTS_SPAN, 1.0 + slope * (RUN_COSTS_SPAN - 1) / one_token)),
                         step_overhead=overhead / one_token)

    def _outside_line(self, prior: StepCosts) -> tuple[float, float]:
        """(seconds a step pays whatever its length, seconds a drafted token adds) outside the verify pass: the run's
        steps with the prior's line at the run's level (the prior's o + c_draft · k times the run's mean seconds over
        the prior's cost at the run's mean length) ``PRIOR_SPREAD`` tokens either side of that mean, so the run sets
        the level and, as its lengths spread, the split; the prior's split at that level where the line cannot
        say."""
        lengths = [float(drafted) for drafted, _ in self.outside]
        spent = [spent for _, spent in self.outside]
        mean_length, mean_spent = sum(lengths) / len(lengths), sum(spent) / len(spent)
        prior_at_mean = prior.step_overhead + prior.draft_per_token * mean_length
        if prior_at_mean <= 0:
            return mean_spent, 0.0
        level = mean_spent / prior_at_mean
        ends = (max(mean_length - PRIOR_SPREAD, 0.0), mean_length + PRIOR_SPREAD)
        split = per_step_and_per_token(lengths + list(ends),
                                       spent + [level * (prior.step_overhead + prior.draft_per_token * k) for k in ends],
                                       [1.0] * len(lengths) + [PRIOR_PASSES, PRIOR_PASSES])
        return split or (level * prior.step_overhead, level * prior.draft_per_token)

    def _verify_line(self, prior: StepCosts, scale: float) -> tuple[float, float]:
        """(seconds of a one-token pass, seconds per further token): the run's passes with the prior's line."""
        sizes = [float(tokens) for tokens, _ in self.passes] + [1.0, float(RUN_COSTS_SPAN)]
        spent = [spent for _, spent in self.passes] + [scale * prior.verify(n) for n in (1, RUN_COSTS_SPAN)]
        intercept, slope = least_squares_line(sizes, spent, [1.0] * len(self.passes) + [PRIOR_PASSES, PRIOR_PASSES])
        one_token = intercept + slope
        if one_token <= 0 or slope < 0:       # noise outweighed the prior's shape: keep that shape at the run's scale
            return scale * prior.verify(1), scale * (prior.verify(2) - prior.verify(1))
        return one_token, slope


def step_costs(record: dict) -> StepCosts:
    """StepCosts from a stored record (``costs_record``'s keys)."""
    return StepCosts(float(record["draft_per_token"]),
                     verify_points=tuple((int(n), float(cost)) for n, cost in record["verify"]),
                     step_overhead=float(record.get("step_overhead", 0.0)))


def costs_record(costs: StepCosts) -> dict:
    return {"draft_per_token": round(costs.draft_per_token, 4),
            "verify": [[n, round(cost, 4)] for n, cost in costs.verify_points],
            "step_overhead": round(costs.step_overhead, 4)}
