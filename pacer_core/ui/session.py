"""Per-browser-session run state: the three decoders' generators on the same prompt, seed and temperature,
the events they yielded (each with the method's own busy time when it arrived), their Results, and each
method's own busy time.

Run times each method alone, one after another (``timing_queue`` and ``advance_one``; the handler draws
nothing while a method's steps run), so a method's seconds are its decoder's own, as if it ran by itself; the
page then replays the columns side by side at the pace recorded in ``MethodRun.event_seconds``
(``ui/race.py``). Step advances every method by one event in turn (``advance_until_event``).

One ``RunSession`` lives in a ``gr.State`` per browser session (never a global). It holds no
HTML: the renderers turn its events into what is shown."""
from __future__ import annotations

import sys
import threading
import time
import traceback
from dataclasses import dataclass, field, replace

from ..analysis import oracle_lengths, output_logits, proposal_divergence, target_log_likelihood
from ..api import run_request
from ..compute_thread import on_compute_thread
from ..decoders.pacer import stop_rule_summary
from ..drafters import drafter_key
from ..events import Result
from ..models import ModelLoadError
from .. import method_table
from ..method_table import column_keys
from ..request import RunRequest, run_inputs
from ..settings import Limits, SettingsError
from ..trace import trace_header


def pacer_rule_note(request, drafters_own) -> str:
    """What stops PACER's drafting in this run, and why it is not the trained layer when it is not
    (``drafters_own``: the pre-verifier the drafter comes with)."""
    preverifier = request.preverifier
    note = f"Drafting stopped by {stop_rule_summary(preverifier, request.settings, request.settings.threshold)}"
    if getattr(preverifier, "kind", None) != "trained":
        note += (" (chosen in Settings; this drafter has a trained layer)" if getattr(drafters_own, "kind", None) == "trained"
                 else " (no trained layer for this drafter)")
    return note + "."


def user_message(error: BaseException) -> str:
    """A one-line message for the UI (never a stack trace)."""
    if isinstance(error, (SettingsError, ModelLoadError)):
        return str(error)
    if isinstance(error, ImportError):
        return f"This decoder is not available in this build ({error})."
    first = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


@dataclass
class MethodRun:
    """One method's generator and what it produced so far."""
    method: str
    request: RunRequest | None = None   # None when the method refused the settings (``error`` says why)
    generator: object = None
    events: list = field(default_factory=list)
    result: Result | None = None
    error: str | None = None
    busy_seconds: float = 0.0
    event_seconds: list = field(default_factory=list)   # busy_seconds when each event arrived (the race's clock)
    skipped: bool = False               # Stop came before this method's turn

    @property
    def done(self) -> bool:
        return self.result is not None or self.error is not None


def complete_rows(result: Result) -> None:
    """The drafter's rows a kept-rows run could not record while it decoded (``Result.complete_rows``: its last
    bonus token), fed on the compute thread once the run's clock has stopped; the run's caches go with it. On a
    failure the scoring computes the rows itself."""
    try:
        on_compute_thread(result.complete_rows)
    except Exception:  # noqa: BLE001 - the scoring's own pass covers it
        traceback.print_exc(file=sys.stderr)
    result.complete_rows = None


def recorded_log_likelihood(result) -> bool:
    """Whether a run recorded the target's log-probability of every token it emitted (sampling AR and SD)."""
    return bool(result.token_ids) and len(result.target_log_probs) == len(result.token_ids)


class RunSession:
    """The three methods on one prompt and one set of settings, advanced together.

    ``advance()`` moves every unfinished method forward by one step (one target forward pass) and
    returns the methods that moved. This is the UI's front door: the constructor validates the settings
    and encodes the prompt once (a bad value raises ``SettingsError`` before any model runs) and builds
    one run request per method; a method that refuses the settings (SMC-SD when greedy) starts with
    its error instead."""

    def __init__(self, target, drafter, prompt: str, settings: dict, chat: bool | None = None,
                 methods=None, preverifier=None, measure_ar: bool = False, limits: Limits | None = None,
                 menu_key: str | None = None):
        """``drafter``: what every method's run drafts with; ``methods``: the columns (None: the method table's
        ``column_keys()``); ``menu_key``: the page's drafter key this session was started with (None: the page's own
        drafter)."""
        self.target = target
        self.drafter = drafter
        self.menu_key = menu_key
        self.limits = limits if limits is not None else Limits.from_env()
        self.inputs = run_inputs(target, prompt, settings, chat=chat, limits=self.limits)   # SettingsError here
        self.prompt, self.settings = self.inputs.prompt, self.inputs.settings.to_dict()
        self.prompt_ids, self.prompt_note = list(self.inputs.encoded.ids), self.inputs.encoded.note
        self.raw_settings = dict(settings)
        self.chat = chat
        self.preverifier = preverifier
        self.cancel = threading.Event()
        self.runs = {method: self.new_run(method) for method in (methods or column_keys())}
        self.pacer_rule = pacer_rule_note(self.runs["pacer"].request, self.preverifier) \
            if "pacer" in self.runs and self.runs["pacer"].request is not None else None
        # The AR baseline is a hidden fourth method: timed alone after the columns' methods (Run), or advanced
        # one step per click beside them (Step) and finished alone at the end.
        self.ar: MethodRun | None = self.new_run("ar") if measure_ar else None
        self.oracle: list | None = None
        self.oracle_steps: list | None = None
        self.oracle_note: str | None = None
        self.oracle_greedy = True
        self.logliks: dict[str, float] = {}        # sampling runs: target log-prob per output token, by method
        self.proposal_kl: float | None = None      # sampling runs: KL(p_T || q_Td) per token along SMC-SD's output
        self.pending_verdict: dict | None = None   # step-through: events drafted but not yet shown verified
        self.analysed = False
        self.phase_seconds: dict[str, float] = {}  # Run's wall time timing the methods alone ("timing"; of it,
                                                   # waiting for the page to draw ("drawing") and for quiet cores
                                                   # ("settling"), ui/timing_turn.py), scoring
        self.pass_seconds: dict[str, list[float]] = {}   # Run: each method's seconds in every pass it was timed
        self.created = time.time()

    def new_run(self, method: str) -> MethodRun:
        """A method's run with its request, or with the message that refuses it."""
        try:
            request = self.inputs.request(self.target, self.drafter, method, self.preverifier)
        except SettingsError as error:
            return MethodRun(method, error=str(error))
        scored = method in method_table.scored_keys() and not request.settings.greedy   # keeps the rows that judged
        return MethodRun(method, replace(request, keep_rows=True) if scored else request)

    def key(self) -> tuple:
        return (self.prompt, tuple(sorted(self.raw_settings.items())), self.chat, self.menu_key)

    # ------------------------------------------------------------ stepping

    def _start(self, run: MethodRun) -> None:
        run.generator = run_request(self.target, run.request, cancel=self.cancel)

    def advance_one(self, run: MethodRun) -> bool:
        """Pull one item from a method's generator; record events, the Result or an error."""
        if run.done:
            return False
        started = time.perf_counter()
        try:
            if run.generator is None:
                self._start(run)
            item = on_compute_thread(next, run.generator)    # every decoder steps on the one compute thread
        except StopIteration:
            run.error, run.generator = run.error or "The decoder ended without a result.", None
            return True
        except Exception as error:  # noqa: BLE001 - shown in the column; the app keeps serving
            run.error, run.generator = user_message(error), None
            if not isinstance(error, (SettingsError, ImportError)):
                traceback.print_exc(file=sys.stderr)
            return True
        finally:
            run.busy_seconds += time.perf_counter() - started
        if isinstance(item, Result):
            run.result = item
            run.generator = None          # frees the decoder's KV caches now, not when the session ends
            if item.complete_rows is not None:      # off the method's clock
                complete_rows(item)
        else:
            run.events.append(item)
            run.event_seconds.append(run.busy_seconds)
        return True

    def advance(self) -> list[str]:
        """One step of every unfinished method, in column order (then the AR baseline's, if measured)."""
        moved = []
        for run in self.runs.values():
            if self.advance_one(run):
                moved.append(run.method)
        if self.ar is not None and self.advance_one(self.ar):
            moved.append("ar")
        return moved

    def advance_until_event(self) -> dict:
        """Step-through: every unfinished method moves until it yields one event (or finishes).
        Returns {method: the new event or None}."""
        new = {}
        for run in self.runs.values():
            before = len(run.events)
            while not run.done and len(run.events) == before:
                self.advance_one(run)
            # Pull the Result right away when the generator has nothing more to show.
            new[run.method] = run.events[-1] if len(run.events) > before else None
        if self.ar is not None:
            self.advance_one(self.ar)
        return new

    def timing_queue(self) -> list[MethodRun]:
        """Run's order of timing: the columns' unfinished methods in column order, then the AR baseline."""
        queue = [run for run in self.runs.values() if not run.done]
        return queue + ([self.ar] if self.ar is not None and not self.ar.done else [])

    def keep_faster(self, again: MethodRun) -> None:
        """Another pass of a method has ended: its seconds join the method's passes, and it replaces the method's
        run (events, clock, result) if it finished faster with the same tokens. A pass that was stopped or failed,
        or that decoded other tokens (a seeded run repeats token for token), changes nothing but the record."""
        kept = self.ar if again.method == "ar" else self.runs[again.method]
        self.pass_seconds.setdefault(again.method, [kept.busy_seconds]).append(again.busy_seconds)
        same = (again.result is not None and kept.result is not None and again.error is None
                and again.result.finish_reason != "cancelled" and again.result.token_ids == kept.result.token_ids)
        if not same or again.busy_seconds >= kept.busy_seconds:
            return
        if again.method == "ar":
            self.ar = again
        else:
            self.runs[again.method] = again

    def timing_pass_count(self) -> int:
        """How many passes Run timed its methods in (1 unless a short Run timed them again)."""
        return max((len(seconds) for seconds in self.pass_seconds.values()), default=1)

    def skip_unstarted(self) -> None:
        """After Stop: the methods whose turn never came end with a note instead of a result (the AR
        baseline stays unfinished, so the table shows it waiting)."""
        for run in self.runs.values():
            if not run.done:
                run.error, run.skipped = "Stopped before its turn (Run times the methods one after another).", True

    def all_runs(self) -> list[MethodRun]:
        """The columns' methods in column order, then the AR baseline when it is measured."""
        return list(self.runs.values()) + ([self.ar] if self.ar is not None else [])

    @property
    def stopped(self) -> bool:
        """Did Stop end or skip any decoding (rather than only the replay after it)?"""
        return self.cancel.is_set() and any(run.skipped or not run.done or run.result is not None
                                            and run.result.finish_reason == "cancelled" for run in self.all_runs())

    def analyse(self) -> None:
        """After the decoding: oracle γ* and the target log-likelihoods, once (Run starts it during the replay), on
        the compute thread like the decoding."""
        if self.analysed:
            return
        on_compute_thread(self._analyse)

    def _analyse(self) -> None:
        target_logits, draft_logits = self.teacher_force()
        self.compute_likelihoods(target_logits, draft_logits.get("smc"))
        self.compute_oracle(target_logits.get("pacer"), draft_logits.get("pacer"))
        self.analysed = True
        for result in self.results().values():
            result.target_rows = result.draft_rows = None   # scored: not needed again (megabytes a run)

    def teacher_force(self) -> tuple[dict, dict]:
        """Sampling runs: the target's logits along PACER's output and SMC-SD's (and any other whose run did not
        record its own log-likelihood) and the drafter's along PACER's (its q, for the oracle) and SMC-SD's (full
        support, for the proposal divergence), from one target pass over the prompt (``analysis.output_logits``);
        both come from the rows each scored run kept (``method_table.scored_keys``) where it kept them, so a Run
        usually needs neither pass; ({}, {}) when greedy or when it fails (each figure then computes its own or is
        left out)."""
        if self.settings["temperature"] == 0:
            return {}, {}
        outputs = {method: list(result.token_ids) for method, result in self.results().items()
                   if result.token_ids and (method in method_table.scored_keys() or not recorded_log_likelihood(result))}
        drafted = {method: method_table.entry(method).output_drafted for method in method_table.scored_keys()
                   if method in outputs}
        kept = {method: result.target_rows.float().cpu() for method, result in self.results().items()
                if method in outputs and result.target_rows is not None}
        kept_drafted = {method: result.draft_rows.float().cpu() for method, result in self.results().items()
                        if method in drafted and result.draft_rows is not None}
        try:
            return output_logits(self.target, self.drafter, self.prompt_ids, outputs, drafted, kept, kept_drafted)
        except Exception:  # noqa: BLE001
            traceback.print_exc(file=sys.stderr)
            return {}, {}

    @property
    def finished(self) -> bool:
        return all(run.done for run in self.runs.values())

    def stop(self) -> None:
        self.cancel.set()

    # ------------------------------------------------------------ after the run

    def ar_steps(self):
        """Generator: finish the AR baseline step by step (so Stop works); yields after every step."""
        if self.ar is None:
            self.ar = self.new_run("ar")
        while not self.ar.done:
            self.advance_one(self.ar)
            yield self.ar

    def compute_oracle(self, target_logits=None, draft_logits=None) -> None:
        """γ* per PACER step (pacer_core.analysis.oracle_lengths): the accepted length of a forced long
        draft (greedy), or its expectation along the emitted path (sampling). If it fails, the plot
        leaves the oracle out and ``oracle_note`` says why. ``target_logits``, ``draft_logits``: along PACER's
        output, when already computed (``teacher_force``)."""
        pacer = self.runs.get("pacer")
        if pacer is None or pacer.result is None or not pacer.events:
            return
        step_starts = [event.total_new_tokens - len(event.emitted_ids) for event in pacer.events]
        settings = self.settings
        max_len = max(16, int(settings.get("max_draft_len", 16)))
        try:
            lengths = oracle_lengths(self.target, self.drafter, self.prompt_ids, pacer.result.token_ids, step_starts,
                                     temperature=settings["temperature"], top_k=settings["top_k"],
                                     top_p=settings["top_p"], max_len=max_len,
                                     target_logits=target_logits, draft_logits=draft_logits)
            self.oracle = [round(float(value), 3) for value in lengths]
            self.oracle_steps = [event.step + 1 for event in pacer.events][: len(self.oracle)]
            self.oracle_greedy = settings["temperature"] == 0
        except Exception as error:  # noqa: BLE001
            self.oracle_note = f"Oracle γ* could not be computed: {user_message(error)}"
            traceback.print_exc(file=sys.stderr)

    def compute_likelihoods(self, target_logits: dict | None = None, smc_draft_logits=None) -> None:
        """Sampling runs: the target's mean log-probability (temperature 1) per generated token of every
        finished method's output: as its run recorded it (AR, fixed SD and PACER read it from the rows that
        judged each token), else with the prompt fed once and each output after it. Exact samplers agree up to
        noise; SMC-SD's distance from them is its approximation error on this prompt. Greedy runs skip it.
        ``target_logits``: {method: logits along its output}, ``smc_draft_logits``: the drafter's along SMC-SD's
        (full support), when already computed (``teacher_force``)."""
        if self.settings["temperature"] == 0:
            return
        for method, result in self.results().items():
            if method not in self.logliks and recorded_log_likelihood(result):
                self.logliks[method] = sum(result.target_log_probs) / len(result.target_log_probs)
        outputs = {method: list(result.token_ids) for method, result in self.results().items()
                   if method not in self.logliks and result.token_ids}
        try:
            known = target_logits or {}
            missing = {method: ids for method, ids in outputs.items() if method not in known}
            logits = known | (output_logits(self.target, self.drafter, self.prompt_ids, missing)[0] if missing else {})
        except Exception:  # noqa: BLE001 - the column simply stays empty
            traceback.print_exc(file=sys.stderr)
            return
        for method, output_ids in outputs.items():
            total, count = target_log_likelihood(self.target, self.drafter, self.prompt_ids, output_ids, logits[method])
            self.logliks[method] = total / count
        self.compute_proposal_divergence(logits.get("smc"), smc_draft_logits)

    def compute_proposal_divergence(self, target_logits=None, draft_logits=None) -> None:
        """KL(p_T || q_Td) per token along SMC-SD's output: how far apart the distributions are that its
        importance weights must reconcile (the note under its column turns it into a particle count)."""
        smc = self.results().get("smc")
        if self.proposal_kl is not None or smc is None or not smc.token_ids:   # greedy: SMC-SD never ran
            return
        settings = self.settings
        try:
            total, count = proposal_divergence(self.target, self.drafter, self.prompt_ids, smc.token_ids,
                                               settings["temperature"], settings.get("draft_temperature"),
                                               settings.get("top_k", 0), settings.get("top_p", 1.0),
                                               target_logits=target_logits, draft_logits=draft_logits)
        except Exception:  # noqa: BLE001 - the note simply leaves the figure out
            traceback.print_exc(file=sys.stderr)
            return
        self.proposal_kl = total / count

    def results(self) -> dict:
        out = {method: run.result for method, run in self.runs.items() if run.result is not None}
        if self.ar is not None and self.ar.result is not None:
            out["ar"] = self.ar.result
        return out

    def busy_seconds(self) -> dict:
        out = {method: run.busy_seconds for method, run in self.runs.items()}
        if self.ar is not None:
            out["ar"] = self.ar.busy_seconds
        return out

    def statuses(self) -> dict:
        out = {}
        for run in self.all_runs():
            method = run.method
            if run.skipped:
                out[method] = "not run"
            elif run.error:
                out[method] = "error"
            elif run.result is None:
                out[method] = "running" if run.events else "waiting"
        return out

    def trace(self) -> dict:
        """Everything needed to replay the run offline (the Replay tab; schema: docs/trace-format.md): format
        and version, settings, pair, drafter, each Result (events included) and what the page computed after
        the run (oracle γ*, log-likelihoods)."""
        results = self.results()
        return trace_header() | {
            "prompt": self.prompt, "chat_template": self.chat, "settings": self.settings,
            "pair": self.target.describe(self.drafter), "drafter": self.menu_key or drafter_key(self.drafter),
            "preverifier_kind": getattr(self.preverifier, "kind", None) or "heuristic",
            "prompt_tokens": len(self.prompt_ids), "prompt_note": self.prompt_note,
            "stopped": self.stopped, "logliks": self.logliks, "proposal_kl": self.proposal_kl,
            "oracle_note": self.oracle_note, "pacer_rule": self.pacer_rule, "busy_seconds": self.busy_seconds(),
            "phase_seconds": dict(getattr(self, "phase_seconds", {})),
            "pass_seconds": {method: list(seconds) for method, seconds in getattr(self, "pass_seconds", {}).items()},
            "timing_note": ("Run times each method alone, one after another, with nothing drawn while it decodes "
                            "(Step: one step of each in turn, between clicks). busy_seconds is the time spent in "
                            "each method's own steps (its fastest pass when a short Run timed each method more "
                            "than once: pass_seconds) and is what the metrics table's seconds, tokens_per_s and "
                            "speedup use."),
            "oracle_lengths": self.oracle, "oracle_steps": self.oracle_steps,
            "errors": {m: r.error for m, r in self.runs.items() if r.error},
            "results": {method: result.to_dict() for method, result in results.items()},
        }
