"""Pure renderers for the three live columns: step events → escaped HTML (header, counters, coloured
tokens, notes). Every piece of token or error text goes through ``escape`` (see that module). Colours
and cues: docs/algorithms.md#token-states-and-colours (Okabe–Ito)."""
from __future__ import annotations

from ..events import Result, SMCCycleEvent, StepEvent, TokenRecord, TokenState
from .. import method_table
from ..method_table import label_of
from .escape import escape_attr, escape_text, plain_visible
from .smc_panel import smc_body_html

PLACEHOLDER = '<span class="placeholder">Press Run or Step to start.</span>'
DRAFTED_STATES = (TokenState.ACCEPTED, TokenState.REJECTED, TokenState.DISCARDED)   # verdicts on drafts

STATE_LABELS = {
    TokenState.ACCEPTED: "accepted by the target",
    TokenState.REJECTED: "rejected by the target",
    TokenState.DISCARDED: "dropped by the pre-verifier (never sent to the target)",
    TokenState.CORRECTED: "corrected: the target's own token after a rejection",
    TokenState.BONUS: "bonus: the target's extra token after all drafts were accepted",
    TokenState.TARGET: "produced by the target alone",
    TokenState.DRAFTED: "drafted, waiting for the target",
}


def fmt(value, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def block_line(block: int, score: tuple[float, float] | None) -> str:
    """PACER block ``block`` (0-based) and its score against the threshold, in words."""
    return f"PACER block {block + 1}" + (f": score {fmt(score[0])} vs threshold {fmt(score[1])}" if score else "")


def token_tooltip(token: TokenRecord, block_scores: dict | None = None, step: int | None = None) -> str:
    """Plain-text hover details for one token (escaped later by ``escape_attr``)."""
    lines = [f"token {token.token_id}: {plain_visible(repr(token.text))}", STATE_LABELS[token.state]]
    if step is not None:
        lines.append(f"step {step + 1}")
    for label, value in (("q (draft)", token.draft_prob), ("p (target)", token.target_prob),
                         ("acceptance prob min(1, p/q)", token.accept_prob)):
        if value is not None:
            lines.append(f"{label} = {fmt(value)}")
    if token.block is not None:
        lines.append(block_line(token.block, (block_scores or {}).get(token.block)))
    if token.preverifier_prob is not None:
        lines.append(f"pre-verifier estimate = {fmt(token.preverifier_prob)}")
    if token.stopped:
        lines.append("in the block the pre-verifier failed: drafting stopped here")
    if token.phrase:
        lines.append("phrase: copied from an earlier occurrence (q = 1, no draft model call)")
    return "\n".join(lines)


def token_span(token: TokenRecord, block_scores: dict | None = None, step: int | None = None) -> str:
    """One token as a coloured span; data-state carries the state for tests and CSS."""
    state = escape_attr(token.state)
    classes = ["tok", f"tok-{state}"] + (["tok-stopped"] if token.stopped else []) + (["tok-phrase"] if token.phrase else [])
    text = escape_text(token.text) if token.text != "" else '<span class="cc">\u2205</span>'
    title = escape_attr(token_tooltip(token, block_scores, step))
    stopped = ' data-stopped="1"' if token.stopped else ""
    return f'<span class="{" ".join(classes)}" data-state="{state}"{stopped} title="{title}">{text}</span>'


def pending_tokens(event: StepEvent) -> list[TokenRecord]:
    """The step as it looks before the target has verified it: only the drafted tokens, all in the
    drafted state (PACER's pre-verifier decision is already known, so ``stopped`` stays)."""
    return [TokenRecord(token.token_id, token.text, TokenState.DRAFTED, draft_prob=token.draft_prob,
                        block=token.block, preverifier_prob=token.preverifier_prob, stopped=token.stopped,
                        phrase=token.phrase)
            for token in event.tokens if token.state in DRAFTED_STATES]


def step_html(event: StepEvent, pending: bool = False) -> str:
    """All tokens of one step (drafted ones with their verdicts, then the corrected/bonus token).
    ``pending``: the drafted tokens only, grey, as before the target's verdict."""
    scores = {block.index: (block.score, block.threshold) for block in event.blocks}
    parts, previous_block = [], None
    for token in (pending_tokens(event) if pending else event.tokens):
        if token.block is not None and previous_block is not None and token.block != previous_block:
            hint = block_line(token.block, scores.get(token.block))
            parts.append(f'<span class="block-sep" title="{escape_attr(hint)}"></span>')
        previous_block = token.block if token.block is not None else previous_block
        parts.append(token_span(token, scores, event.step))
    return (f'<span class="step" data-step="{event.step + 1}">'
            f'<span class="step-sep" title="step {event.step + 1}: one target forward pass"></span>'
            f'{"".join(parts)}</span>')


def _counter(label: str, value: str, hint: str) -> str:
    return (f'<span class="counter" title="{escape_attr(hint)}"><span class="counter-label">{label}</span> '
            f'<b>{value}</b></span>')


def live_numbers(events: list) -> dict:
    """Steps, new tokens, tau and alpha from the events seen so far (same definitions as Metrics)."""
    steps = len(events)
    tokens = events[-1].total_new_tokens if events else 0
    drafted = sum(getattr(event, "n_drafted", 0) for event in events)
    accepted = sum(getattr(event, "n_accepted", 0) for event in events)
    return {"steps": steps, "tokens": tokens, "tau": tokens / steps if steps else 0.0,
            "alpha": accepted / drafted if drafted else None}


def counters_html(events: list, result: Result | None = None) -> str:
    numbers = live_numbers(events)
    tau, alpha = numbers["tau"], numbers["alpha"]
    if result is not None:
        tau, alpha = result.metrics.tau, result.metrics.alpha
    parts = [_counter("steps", str(numbers["steps"]), "target forward passes so far"),
             _counter("tokens", str(result.metrics.new_tokens if result else numbers["tokens"]), "new tokens so far"),
             _counter("τ", fmt(tau, 2), "tau: tokens per target forward pass")]
    if events and isinstance(events[0], SMCCycleEvent):
        parts.append(_counter("ESS", fmt(events[-1].ess, 2), "effective sample size of the last cycle"))
    else:
        parts.append(_counter("α", fmt(alpha, 2), "alpha: accepted / drafted tokens"))
    return '<div class="counters">' + "".join(parts) + "</div>"


def status_badge(result: Result | None, error: str | None, running: bool, skipped: bool = False) -> str:
    if skipped:
        return '<span class="badge badge-done">stopped before its turn</span>'
    if error:
        return '<span class="badge badge-error">error</span>'
    if result is not None:
        reason = {"eos": "finished (end of text)", "length": "finished (token limit)",
                  "cancelled": "stopped"}.get(result.finish_reason, escape_text(result.finish_reason))
        return f'<span class="badge badge-done">{reason}</span>'
    if running:
        return '<span class="badge badge-running">running…</span>'
    return '<span class="badge">waiting</span>'


def error_html(message: str) -> str:
    """An error box; the message is escaped like any other untrusted text."""
    return f'<div class="pacer-error" role="alert">\u26a0 {escape_text(message)}</div>'


def tokens_body_html(events: list, pending: bool) -> str:
    """Fixed SD / PACER / AR: every step's tokens; ``pending`` shows the newest step as drafted only."""
    steps = [event for event in events if isinstance(event, StepEvent)]
    body = "".join(step_html(event, pending=pending and index == len(steps) - 1) for index, event in enumerate(steps))
    return f'<div class="tokens">{body or PLACEHOLDER}</div>'


def answer_text(events: list, result: Result | None = None, pending: bool = False) -> str:
    """The clean text a method returned (its Result), or so far: the emitted text of its verified steps
    (SMC-SD: the leading particle's continuation). Plain text; escape before showing."""
    if result is not None:
        return result.text
    if events and isinstance(events[-1], SMCCycleEvent):
        return events[-1].leader_text
    steps = [event for event in events if isinstance(event, StepEvent)]
    return "".join(event.emitted_text for event in (steps[:-1] if pending else steps))


def answer_html(method: str, events: list, result: Result | None = None, pending: bool = False) -> str:
    """The answer block above the step trace: the clean text, no colours, readable at any acceptance."""
    text = answer_text(events, result, pending)
    if result is not None:
        label = "Answer" + (" (the particle chosen at the end)" if method == "smc" else "")
    else:
        label = "Leading particle so far" if method == "smc" else "Answer so far"
    body = escape_text(text) if text else '<span class="placeholder">nothing yet</span>'
    return (f'<div class="answer" data-role="answer"><div class="part-label">{label}</div>'
            f'<div class="answer-text">{body}</div></div>')


def trace_label(by_pass: bool) -> str:
    """The trace's heading: a bar per target pass (step methods) or per cycle (SMC-SD's particles)."""
    if by_pass:
        return "Step trace · a bar per target pass · hover a token"
    return "Trace · a bar per cycle, then every particle"


def column_html(method: str, events: list, result: Result | None = None, error: str | None = None,
                running: bool = False, note: str | None = None, pending: bool = False,
                placeholder: str | None = None, skipped: bool = False) -> str:
    """The whole live column for one method: header and counters, the clean answer, the step trace
    (coloured tokens), notes. ``pending``: step-through's draft phase, the newest step shown as drafted
    but not yet verified (SMC: the newest cycle is not shown yet). ``placeholder``: plain text shown
    instead of the trace while the column has no events to show (Run's timing phase). ``skipped``: Stop came
    before this method's turn (``placeholder`` then says so)."""
    by_pass = method_table.steps_by_pass(method)
    if pending and not by_pass and events:          # a cycle's verdict is its weights: not shown before them
        events, pending = events[:-1], False
    title = escape_text(label_of(method))
    head = (f'<div class="col-head"><span class="col-title">{title}</span>'
            f'{status_badge(result, error, running, skipped)}</div>')
    extra = (f'<div class="col-note">{escape_text(note)}</div>' if note else "") + (error_html(error) if error else "")
    counters = counters_html(events[:-1] if pending else events, result)
    sticky = (f'<div class="pacer-col" data-method="{escape_attr(method)}"><div class="col-sticky">{head}{counters}'
              "</div>")
    if not events:
        empty = f'<span class="placeholder">{escape_text(placeholder)}</span>' if placeholder else PLACEHOLDER
        return f'{sticky}<div class="tokens">{empty}</div>{extra}</div>'
    body = tokens_body_html(events, pending) if by_pass else smc_body_html(events, result)
    label = trace_label(by_pass)
    trace = f'<div class="trace" data-role="trace"><div class="part-label">{label}</div>{body}</div>'
    return f"{sticky}{answer_html(method, events, result, pending)}{trace}{extra}</div>"
