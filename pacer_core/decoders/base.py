"""What every decoder shares: the decoding state, the draft → verify → accept → commit loop of
speculative decoding (docs/algorithms.md#speculative-sampling), and the final Result.

Fixed-length SD and PACER differ only in how they *propose* a draft (``propose``); the target's verdict on
it is ``verify.judge``, the lossless rule of Leviathan et al. 2023 / Chen et al. 2023.

Device rule (every decoder, SMC-SD included): a run computes on ONE device, the target cache's
(``ModelCache.device``: where the target's input ids go and its logits come back). The sampling
generator is created on that device, every probability row the decoder builds lives there, and a row
that comes from another device (the draft on another GPU, or the target's last layer elsewhere under
``device_map="auto"``) is moved there before it is combined with anything. Random draws come from that
generator, so a seeded run is reproducible on the same device (and dtype, and library versions); CPU and
CUDA generators are different streams, so the same seed gives different samples on different devices.

Settings: a decoder reads ONE ``DecodeSettings``, the run's. Settings given to a decoder's constructor
(``FixedSpeculative(4)``, ``Pacer(2, 8, 0.3)``) are pinned: ``run`` puts them into the run's settings once,
before anything reads them (tests build one decoder per configuration this way); ``api.make_decoder``
pins nothing, so there a run request's settings are the only source."""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, Generator, Iterator, Protocol, TypeVar

import torch

from .. import sampling
from ..drafters import Drafter, new_caches
from ..drafters.caches import run_target_cache
from ..events import Metrics, Result, StepEvent, TokenRecord
from ..kvcache import ModelCache, RowRecorder, first_pass_in_prefill, prefill_prompt, records_rows
from ..settings import DecodeSettings
from .verify import judge


class PrefillOnce:
    """A run's state whose ``prefill_seconds`` (fresh caches and the prompt's prefill) its first event reports."""
    prefill_seconds: float

    def take_prefill_seconds(self) -> float:
        """What the run spent before its first pass or cycle, once: the first event reports it, the later ones 0."""
        seconds, self.prefill_seconds = self.prefill_seconds, 0.0
        return seconds


@dataclass
class DecodeState(PrefillOnce):
    """The growing sequence (prompt + output) and both models' caches over it, and the run's drafter."""
    prompt_len: int
    sequence: list[int]
    target: ModelCache
    draft: ModelCache | None
    generator: torch.Generator
    eos_ids: set[int]
    drafter: Drafter | None = None             # what the run drafts with (None: AR)
    finish_reason: str | None = None
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    first_verified: int = 0                    # steps whose first drafted token the target judged
    first_accepted: int = 0                    # of those, steps that accepted it
    last_first_accepted: bool | None = None    # the latest such step's verdict
    started: float = field(default_factory=time.perf_counter)
    prefill_seconds: float = 0.0     # fresh caches and the prompt's prefill (``make_state``), until the first event
    target_log_probs: list[float] = field(default_factory=list)   # log p(token) at T = 1 of each emitted token
    target_rows: list | None = None   # the logits rows that judged the emitted tokens, when the run keeps them
    first_target_row: torch.Tensor | None = None   # the last prompt token's logits from the prefill (AR's, where the
                                                   # engine gives them: ``kvcache.first_pass_in_prefill``), until used

    def take_first_target_row(self) -> torch.Tensor | None:
        """The prefill's logits row for the first token, once (None: the first step feeds the last prompt token)."""
        row, self.first_target_row = self.first_target_row, None
        return row

    def record_log_probs(self, target_logits_rows: torch.Tensor, emitted: list[int], settings: DecodeSettings) -> None:
        """When sampling, the target's log-probability (temperature 1) of each token just emitted, read from
        the rows that judged them (row i scores emitted[i]): the run's own log-likelihood, which the page
        would otherwise compute with another target pass (greedy runs show none); and, when the run keeps them
        (``target_rows``), those rows themselves."""
        if not settings.greedy:
            self.target_log_probs += sampling.chosen_log_probs(target_logits_rows, emitted)
        if self.target_rows is not None and emitted:
            self.target_rows.append(target_logits_rows[: len(emitted)])

    def record_verdict(self, verified: int, accepted: int) -> None:
        """Count one verify pass: ``verified`` drafted tokens judged, the first ``accepted`` of them kept."""
        self.drafted_tokens += verified
        self.accepted_tokens += accepted
        if verified:
            self.first_verified += 1
            self.first_accepted += int(accepted > 0)
            self.last_first_accepted = accepted > 0

    @property
    def device(self) -> torch.device:
        """Where this run samples and combines probabilities: the target cache's device."""
        return self.target.device

    @property
    def new_tokens(self) -> int:
        return len(self.sequence) - self.prompt_len

    @property
    def output_ids(self) -> list[int]:
        return self.sequence[self.prompt_len:]


@dataclass
class Proposal:
    """What a proposer drafted this step: ids, their draft distributions, the q(x) shown, the time it took. A
    decoder with more to say about its tokens adds it in a subclass (PACER: ``pacer_state.PacerProposal``)
    through ``verified``, ``token_fields`` and ``event_fields``."""
    drafted_ids: list[int]
    draft_probs: torch.Tensor          # [G, V] the distribution each token was drawn from
    draft_display_probs: list[float]   # q(x) shown in the UI (temperature-1 softmax when greedy)
    seconds: float = 0.0

    @property
    def verified(self) -> int:
        """The drafted tokens sent to the target: all of them."""
        return len(self.drafted_ids)

    def token_fields(self, index: int) -> dict:
        """More of drafted token ``index``'s TokenRecord fields (none)."""
        return {}

    def event_fields(self) -> dict:
        """More of the step's StepEvent fields (none)."""
        return {}


Event = TypeVar("Event")


class CancelFlag(Protocol):
    """What stops a run between two target calls (a ``threading.Event``: the page's Stop button)."""

    def is_set(self) -> bool: ...


def steps_until_done(finished: Callable[[], bool], step: Callable[[int], Event], events: list,
                     cancel: CancelFlag | None) -> Generator[Event, None, bool]:
    """The run/cancel loop of every decoder (AR, the speculative decoders, SMC-SD): append and yield
    ``step(len(events))`` until ``finished()``; returns True when ``cancel`` was set first (checked before each
    step, so a step under way completes)."""
    while not finished():
        if cancel is not None and cancel.is_set():
            return True
        event = step(len(events))
        events.append(event)
        yield event
    return False


def pinned_values(**values) -> dict:
    """The settings a decoder was built with: every one given, None meaning "not pinned"."""
    return {name: value for name, value in values.items() if value is not None}


def with_pinned(settings: DecodeSettings, pinned: dict) -> DecodeSettings:
    return replace(settings, **pinned) if pinned else settings


def new_generator(seed: int, device="cpu") -> torch.Generator:
    """A seeded generator on ``device``, the device of the probabilities it will sample from."""
    generator = torch.Generator(device=torch.device(device))
    generator.manual_seed(int(seed))
    return generator


def make_state(target, drafter, prompt_ids: list[int], settings: DecodeSettings, with_draft: bool,
               state_type: type[DecodeState] = DecodeState, keep_rows: bool = False) -> DecodeState:
    """Fresh caches for one run with ``drafter`` (AR, ``with_draft`` False, only runs its target on the engine runs
    with that drafter get, ``llama.engine.active_engine``; None: no drafter). A drafter that reads the target's
    hidden states needs them for the prompt before it can draft, and a draft cache that adopts the target's prompt
    (the gguf drafter beside the llama.cpp target) takes the target's keys and values instead of computing its own:
    for both the target first runs once over prompt[:-1] (counted as a target call, like SMC-SD's prefill; the
    verify passes then feed the rest). On the llama.cpp target every run, AR's included, starts with that prefill
    (``kvcache.prefill_prompt``), so a prompt's cells are the same bits in every run of it (llama/target.py); a
    run that needs it only for that counts it as the first half of its first pass, not as a call of its own. AR's
    first pass on a short prompt is that prefill with the last token in the same call, the same bits
    (``kvcache.first_pass_in_prefill``; ``first_target_row`` holds its row until AR's first step reads it).
    ``keep_rows``: the state keeps the rows that judge its tokens, and the drafter's rows along them where they
    depend on the tokens alone (a drafter reading the target's features drafts from states no teacher-forced pass
    repeats) and recording them changes no bit of the run (``kvcache.records_rows``)."""
    started = time.perf_counter()           # the run's clock starts before any prefill below
    if not with_draft:
        target_cache, draft = run_target_cache(target, drafter), None
    else:
        target_cache, draft = new_caches(target, drafter)
    adopts = getattr(draft, "adopts_target_prompt", False)
    first_row = first_pass_in_prefill(target_cache, prompt_ids) if not with_draft and len(prompt_ids) > 1 else None
    if first_row is None and len(prompt_ids) > 1 and (adopts or hasattr(target_cache, "prefill")):
        prefill_prompt(target_cache, prompt_ids, counted=adopts)
        if adopts:
            draft.adopt(target_cache)
    elif len(prompt_ids) > 1 and with_draft and drafter.reads_target_features:
        target_cache.forward(list(prompt_ids[:-1]))
    if keep_rows and draft is not None and not drafter.reads_target_features and records_rows(draft):
        draft = RowRecorder(draft)
    return state_type(prompt_len=len(prompt_ids), sequence=list(prompt_ids), target=target_cache, draft=draft,
                      generator=new_generator(settings.seed, target_cache.device), eos_ids=target.eos_token_ids,
                      drafter=drafter if with_draft else None, started=started,
                      prefill_seconds=time.perf_counter() - started, target_rows=[] if keep_rows else None,
                      first_target_row=first_row)


def commit(state: DecodeState, emitted_ids: list[int], settings: DecodeSettings) -> list[int]:
    """Append tokens, truncating at EOS and at the token budget; sets finish_reason."""
    room = settings.max_new_tokens - state.new_tokens
    kept = []
    for token_id in emitted_ids[:room]:
        kept.append(token_id)
        if token_id in state.eos_ids:
            state.finish_reason = "eos"
            break
    state.sequence.extend(kept)
    if state.finish_reason is None and state.new_tokens >= settings.max_new_tokens:
        state.finish_reason = "length"
    return kept


def pick_next(target_logits_row: torch.Tensor, settings: DecodeSettings, generator) -> tuple[int, float]:
    """The target's own next token (argmax or a sample) and its probability for display."""
    if settings.greedy:
        token_id = int(torch.argmax(target_logits_row))
        return token_id, float(sampling.display_probs(target_logits_row)[token_id])
    target_probs = sampling.logits_to_probs(target_logits_row, settings.temperature, settings.top_k, settings.top_p)
    token_id = sampling.sample_token(target_probs, generator)
    return token_id, float(target_probs[token_id])


def draft_distribution(draft_logits_row: torch.Tensor, settings: DecodeSettings) -> torch.Tensor:
    """q at the decoding temperature, with the same top-k/top-p as p (one-hot argmax when greedy)."""
    if settings.greedy:
        return sampling.one_hot(int(torch.argmax(draft_logits_row)), draft_logits_row)
    return sampling.logits_to_probs(draft_logits_row, settings.temperature, settings.top_k, settings.top_p)


class SpeculativeDecoder:
    """Shared loop; subclasses implement ``propose`` and set ``name``."""

    name = "speculative"
    state_type: type[DecodeState] = DecodeState     # a decoder that keeps more per run subclasses it

    def __init__(self, **pinned):
        self.pinned = pinned_values(**pinned)

    def propose(self, target, state: DecodeState, settings: DecodeSettings, budget: int) -> Proposal:
        raise NotImplementedError

    def info(self, settings: DecodeSettings | None = None) -> dict:
        """What the Result's info says about this decoder; without settings, its pinned ones over the defaults."""
        return self.describe(with_pinned(settings or DecodeSettings(), self.pinned))

    def describe(self, settings: DecodeSettings) -> dict:
        return {}

    def run(self, target, drafter, prompt_ids: list[int], settings: DecodeSettings,
            cancel: CancelFlag | None = None, keep_rows: bool = False) -> Iterator:
        """Yield a StepEvent per target call, then the Result (with ``Result.target_rows`` when
        ``keep_rows``), drafting with ``drafter``."""
        settings = with_pinned(settings, self.pinned)
        state = make_state(target, drafter, prompt_ids, settings, with_draft=True, state_type=self.state_type,
                           keep_rows=keep_rows)
        events = []
        if (yield from steps_until_done(lambda: state.finish_reason is not None,
                                        lambda step: self.step(target, state, settings, step), events, cancel)):
            state.finish_reason = "cancelled"
        yield finish(self.name, target, state, events, settings, self.info(settings))

    def step(self, target, state: DecodeState, settings: DecodeSettings, step: int) -> StepEvent:
        budget = settings.max_new_tokens - state.new_tokens
        proposal = self.propose(target, state, settings, budget)
        verified_ids = proposal.drafted_ids[: proposal.verified]
        started = time.perf_counter()
        target_logits = self.verify(state, verified_ids)
        verdict = judge(verified_ids, proposal.draft_probs[: len(verified_ids)], target_logits,
                        settings, state.generator)
        verify_seconds = time.perf_counter() - started
        old_length = len(state.sequence)
        emitted = commit(state, verified_ids[: verdict.n_accepted] + [verdict.next_token], settings)
        state.record_log_probs(target_logits, emitted, settings)
        state.target.crop(old_length + verdict.n_accepted)
        state.draft.crop(min(state.draft.length, old_length + verdict.n_accepted))
        state.record_verdict(len(verified_ids), verdict.n_accepted)
        return self.make_event(target, state, step, proposal, verdict, emitted, verify_seconds)

    def verify(self, state: DecodeState, verified_ids: list[int]) -> torch.Tensor:
        """ONE target forward over [uncached committed tokens, drafted tokens]; rows [G+1, V]."""
        rows = len(verified_ids) + 1
        return state.target.feed_sequence(state.sequence, verified_ids, keep=rows)[-rows:]

    def make_event(self, target, state, step, proposal, verdict, emitted, verify_seconds) -> StepEvent:
        texts = target.token_texts(proposal.drafted_ids + [verdict.next_token])
        tokens = []
        verified = proposal.verified
        for index, token_id in enumerate(proposal.drafted_ids):
            if index >= verified:
                state_name, target_prob, accept_prob = "discarded", None, None
            else:
                state_name = "accepted" if index < verdict.n_accepted else "rejected"
                target_prob, accept_prob = verdict.target_token_probs[index], verdict.accept_probs[index]
            tokens.append(TokenRecord(
                token_id=token_id, text=texts[index], state=state_name,
                draft_prob=proposal.draft_display_probs[index], target_prob=target_prob, accept_prob=accept_prob,
                **proposal.token_fields(index)))
        tokens.append(TokenRecord(token_id=verdict.next_token, text=texts[-1], state=verdict.next_kind,
                                  target_prob=verdict.next_prob))
        return StepEvent(method=self.name, step=step, tokens=tokens, emitted_ids=emitted,
                         emitted_text=target.decode(emitted), n_drafted=verified, n_accepted=verdict.n_accepted,
                         draft_seconds=proposal.seconds, verify_seconds=verify_seconds,
                         total_new_tokens=state.new_tokens, prefill_seconds=state.take_prefill_seconds(),
                         **proposal.event_fields())


def draft_one(target, state: DecodeState, draft_sequence: list[int], settings: DecodeSettings,
              with_hidden: bool = False):
    """One draft forward over what the draft cache lacks of ``draft_sequence``; returns the chosen id,
    its sampling distribution [V], the raw logits row [V] and (optionally) the hidden row [H]. The logits
    row is moved to the run's device (the generator's) before anything is drawn from it."""
    if with_hidden:
        logits, hidden = state.draft.feed_sequence(draft_sequence, output_hidden_states=True, keep=1)
        logits_row, hidden_row = logits[-1], hidden[-1]
    else:
        logits_row, hidden_row = state.draft.feed_sequence(draft_sequence, keep=1)[-1], None
    logits_row = logits_row.to(state.device)
    if settings.greedy:      # one pass for the argmax; q is its one-hot
        token_id = int(torch.argmax(logits_row))
        return token_id, sampling.one_hot(token_id, logits_row), logits_row, hidden_row
    draft_probs = draft_distribution(logits_row, settings)
    return sampling.sample_token(draft_probs, state.generator), draft_probs, logits_row, hidden_row


def shown_draft_prob(draft_probs: torch.Tensor, logits_row: torch.Tensor, token_id: int, settings) -> float:
    """q(x) as the UI shows it: the temperature-1 softmax's when greedy (without building the whole row), else the
    probability x was drawn with."""
    if settings.greedy:
        return sampling.display_prob(logits_row, token_id)
    return float(draft_probs[token_id])


def finish(method: str, target, state: DecodeState, events: list, settings: DecodeSettings, info: dict) -> Result:
    metrics = Metrics.of_run(state.new_tokens, time.perf_counter() - state.started, state.target.calls,
                             state.draft.calls if state.draft else 0, state.drafted_tokens, state.accepted_tokens)
    result = Result(method=method, text=target.decode(state.output_ids), token_ids=state.output_ids, events=events,
                    metrics=metrics, settings=settings.to_dict(), info=info,
                    finish_reason=state.finish_reason or "length", target_log_probs=list(state.target_log_probs),
                    target_rows=stacked_rows(state.target_rows))
    if isinstance(state.draft, RowRecorder):
        attach_draft_rows(result, state.draft, list(state.sequence), state.prompt_len)
    return result


def attach_draft_rows(result: Result, recorder: RowRecorder, sequence: list[int], prompt_len: int) -> None:
    """``result.draft_rows`` from what the run's draft calls fed; where the last tokens were never fed (a bonus
    token ends the output), ``result.complete_rows`` feeds them later, off the run's clock."""
    span = (prompt_len, len(sequence))
    result.draft_rows = recorder.rows_along(*span)
    if result.draft_rows is not None or len(sequence) <= prompt_len:
        return

    def complete() -> None:
        recorder.complete(sequence)
        result.draft_rows, result.complete_rows = recorder.rows_along(*span), None

    result.complete_rows = complete


def stacked_rows(rows: list | None):
    """A run's kept logits rows as one [tokens, V] tensor (None when it kept none)."""
    return torch.cat(rows) if rows else None


class DraftBuilder:
    """Draws draft tokens one at a time after the committed sequence and keeps what a Proposal needs
    (ids, the distribution each was drawn from, q(x) for display, elapsed time)."""

    def __init__(self, target, state: DecodeState, settings: DecodeSettings):
        self.target, self.state, self.settings = target, state, settings
        self.sequence = list(state.sequence)
        self.drafted_ids: list[int] = []
        self.rows: list[torch.Tensor] = []
        self.shown: list[float] = []
        self.phrase_flags: list[bool] = []
        self.started = time.perf_counter()

    def draw(self, with_hidden: bool = False):
        """Draft one more token; returns (id, raw logits row [V], hidden row [H] or None)."""
        token_id, draft_probs, logits_row, hidden_row = draft_one(self.target, self.state, self.sequence,
                                                                  self.settings, with_hidden)
        self._append(token_id, draft_probs, shown_draft_prob(draft_probs, logits_row, token_id, self.settings))
        return token_id, logits_row, hidden_row

    def draw_described(self, describe):
        """Draft one more token with its hidden row and describe it: ``describe(raw logits row [V], hidden row [H],
        id)`` returns what a pre-verifier reads, whose ``draft_prob`` is q(x) at temperature 1. Greedy, that is the
        q(x) shown, so the row's softmax is taken once. Returns (id, the description)."""
        token_id, draft_probs, logits_row, hidden_row = draft_one(self.target, self.state, self.sequence,
                                                                  self.settings, with_hidden=True)
        described = describe(logits_row, hidden_row, token_id)
        shown = described.draft_prob if self.settings.greedy else float(draft_probs[token_id])
        self._append(token_id, draft_probs, shown)
        return token_id, described

    def _append(self, token_id: int, draft_probs: torch.Tensor, shown: float) -> None:
        self.drafted_ids.append(token_id)
        self.rows.append(draft_probs)
        self.shown.append(shown)
        self.phrase_flags.append(False)
        self.sequence.append(token_id)

    def add_phrase(self, token_ids) -> list[tuple[int, torch.Tensor, torch.Tensor]]:
        """Append copied tokens as a deterministic proposal (q one-hot on each: exact, see
        docs/algorithms.md#phrase-drafts). ONE draft forward over them gives the draft's logits and hidden
        rows at each (what the pre-verifier reads). Returns (id, logits row [V], hidden row [H]) per token."""
        token_ids = [int(token_id) for token_id in token_ids]
        logits, hidden = self.state.draft.feed_sequence(self.sequence + token_ids[:-1], output_hidden_states=True,
                                                        keep=len(token_ids))
        logits, hidden = logits[-len(token_ids):].to(self.state.device), hidden[-len(token_ids):]
        rows = []
        for token_id, logits_row, hidden_row in zip(token_ids, logits, hidden):
            one_hot = torch.zeros(logits_row.shape[-1], dtype=torch.float32, device=self.state.device)
            one_hot[token_id] = 1.0
            self.drafted_ids.append(token_id)
            self.rows.append(one_hot)
            self.shown.append(1.0)
            self.phrase_flags.append(True)
            self.sequence.append(token_id)
            rows.append((token_id, logits_row, hidden_row))
        return rows

    def proposal(self, proposal_type: type[Proposal] = Proposal, **extra) -> Proposal:
        """What was drafted, as ``proposal_type`` (``extra``: its own fields)."""
        draft_probs = (torch.stack(self.rows) if self.rows
                       else torch.zeros(0, self.target.vocab_size, device=self.state.device))
        return proposal_type(self.drafted_ids, draft_probs, self.shown, seconds=time.perf_counter() - self.started,
                             **extra)
