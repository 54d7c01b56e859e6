"""Cost-aware stopping for PACER: draft another block only when it raises the step's expected tokens
per unit of time (docs/algorithms.md#cost-aware-stopping).

A step that drafts k tokens, each accepted with probability a_i given that the ones before it were,
yields E(k) = 1 + A_1 + … + A_k tokens (A_i = a_1 ⋯ a_i: the first i all accepted; the 1 is the target's
corrected or bonus token) and costs C(k) = o + k · c_draft + v(k + 1), with v(n) the time of one target pass
over n tokens and o the step's time outside both models. On a GPU v is nearly flat in n; on a CPU it is not,
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


def least_squares_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through the points; slope 0 when every x is the same."""
    if not xs or len(xs) != len(ys):
        raise ValueError("need one y per x, and at least one point")
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    variance = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / variance if variance > 0 else 0.0
    return mean_y - slope * mean_x, slope


@dataclass(frozen=True)
class StepCosts:
    """Costs in AR steps: per drafted token, a target pass over n tokens (``verify_points``, measured (n, cost)
    pairs, else 1 + ``verify_slope`` · (n − 1)), and the step's time outside both models."""
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


# How many verify passes and drafted tokens the stored costs count for once a run's own steps come in.
PRIOR_PASSES = 2.0
PRIOR_DRAFT_TOKENS = 4.0
RUN_COSTS_SPAN = 17   # the run's verify line is stored as its values at 1 and this many tokens


@dataclass
class RunCosts:
    """A run's own step costs, read from its steps' draft and verify seconds as it goes (the first step, which may
    include a prefill, left out by the caller): the host's and this prompt's prices, which a stored model measured
    elsewhere only approximates.

    ``costs(prior)`` gives StepCosts in units of the run's one-token target pass (about one AR step), with the
    ``prior`` (the stored model, in AR steps) counting as ``PRIOR_PASSES`` verify passes and ``PRIOR_DRAFT_TOKENS``
    drafted tokens at the run's scale s = Σ seconds / Σ prior.verify(n) over the run's passes:

        c_draft = (Σ draft seconds + m_d · s · prior.c_draft) / (Σ drafted + m_d)
        v(n) = α + β (n − 1): the weighted least-squares line through the run's (n, seconds) passes and the prior's
               line at n = 1 and ``RUN_COSTS_SPAN`` scaled by s (weight m_v each), so one pass size cannot tilt it
        unit = α (the line at one token); the step's time outside both models stays the prior's, scaled.

    Worked example: prior c_draft 0.5, v(n) = 1 + 0.1 (n − 1); the run drafted 20 tokens in 0.2 s and verified
    passes of 5 tokens at 0.028 s twice: s = 0.056 / 2.8 = 0.02 s, the line is 0.02 + 0.002 (n − 1) s (the prior's
    points at that scale, and the run's lie on it), c_draft = (0.2 + 4 · 0.02 · 0.5) / 24 = 0.01 s = 0.5 AR steps,
    v(17) = 2.6 AR steps."""
    drafted: int = 0
    draft_seconds: float = 0.0
    passes: list[tuple[int, float]] = field(default_factory=list)    # (tokens verified incl. the bonus, seconds)

    def observe(self, drafted: int, draft_seconds: float, verified_tokens: int, verify_seconds: float) -> None:
        """One step: ``drafted`` tokens drafted in ``draft_seconds``, a target pass over ``verified_tokens`` tokens
        (drafted and sent, plus the target's own) in ``verify_seconds``."""
        if draft_seconds < 0 or verify_seconds < 0 or verified_tokens < 1:
            raise ValueError("a step's seconds are at least 0 and a verify pass covers at least one token")
        self.drafted += drafted
        self.draft_seconds += draft_seconds
        self.passes.append((verified_tokens, verify_seconds))

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
        points = [(float(tokens), spent, 1.0) for tokens, spent in self.passes] + \
                 [(float(n), scale * prior.verify(n), PRIOR_PASSES) for n in (1, RUN_COSTS_SPAN)]
        weight = sum(w for _, _, w in points)
        mean_n = sum(w * n for n, _, w in points) / weight
        mean_s = sum(w * spent for _, spent, w in points) / weight
        spread = sum(w * (n - mean_n) ** 2 for n, _, w in points)
        slope = sum(w * (n - mean_n) * (spent - mean_s) for n, spent, w in points) / spread
        one_token = mean_s + slope * (1.0 - mean_n)
        if one_token <= 0 or slope < 0:       # noise outweighed the prior's shape: keep that shape at the run's scale
            one_token, slope = scale * prior.verify(1), scale * (prior.verify(2) - prior.verify(1))
        draft = (self.draft_seconds + PRIOR_DRAFT_TOKENS * scale * prior.draft_per_token) / \
            (self.drafted + PRIOR_DRAFT_TOKENS)
        return StepCosts(draft / one_token,
                         verify_points=((1, 1.0), (RUN_COSTS_SPAN, 1.0 + slope * (RUN_COSTS_SPAN - 1) / one_token)),
                         step_overhead=prior.step_overhead * scale / one_token)


def step_costs(record: dict) -> StepCosts:
    """StepCosts from a stored record (``costs_record``'s keys)."""
    return StepCosts(float(record["draft_per_token"]),
                     verify_points=tuple((int(n), float(cost)) for n, cost in record["verify"]),
                     step_overhead=float(record.get("step_overhead", 0.0)))


def costs_record(costs: StepCosts) -> dict:
    return {"draft_per_token": round(costs.draft_per_token, 4),
            "verify": [[n, round(cost, 4)] for n, cost in costs.verify_points],
            "step_overhead": round(costs.step_overhead, 4)}
