"""Pure renderers: step events → HTML strings for the three live columns, the legend, the model
status line and the step-through narration.

Token text is untrusted (a model can emit ``<script>``, ``<b>``, ``onerror=``, entities, zero-width
and right-to-left marks, control characters, or a lone U+FFFD from a byte-fallback piece). Every
string that reaches HTML goes through ``escape_text`` (element content) or ``escape_attr``
(attribute values): markup shows as characters, invisible characters show as visible markers.
Colours and cues follow ALGORITHMS.md section 6 (Okabe–Ito)."""
from __future__ import annotations

import html
import unicodedata

from ..events import Result, SMCCycleEvent, StepEvent, TokenRecord
from . import METHOD_LABELS

COLOURS = {
    "drafted": "#7f7f7f",
    "accepted": "#009E73",
    "rejected": "#D55E00",
    "stopped": "#E69F00",
    "corrected": "#0072B2",
    "bonus": "#0072B2",
    "duplicated": "#CC79A7",
}

# Characters that would break, hide or reorder text: drawn as a visible marker instead.
_CONTROL_PICTURES = {code: chr(0x2400 + code) for code in range(32)} | {0x7F: "\u2421"}
_VISIBLE_WHITESPACE = {"\n": "\u21b5", "\t": "\u2192", "\r": "\u240d"}
# Characters html.escape leaves alone but that some template engines interpret ($ { } `).
_EXTRA_ENTITIES = {"$": "&#36;", "{": "&#123;", "}": "&#125;", "`": "&#96;"}


def _hidden(char: str) -> bool:
    """True for characters a reader cannot see or that change how the text around them is shown:
    controls, format characters (zero-width, bidi marks and overrides), line/paragraph separators,
    surrogates, private-use and unassigned code points."""
    return unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn")


def _marker(char: str) -> str:
    code = ord(char)
    if code in _CONTROL_PICTURES:
        return _CONTROL_PICTURES[code]
    return f"\u27e8U+{code:04X}\u27e9"


def escape_text(text: str, newline_breaks: bool = True) -> str:
    """Escape untrusted text for HTML element content, making invisible characters visible.

    Newlines show as ↵ (followed by a real line break when ``newline_breaks``), tabs as →, other
    controls as Unicode control pictures (␀, ␛, …), zero-width/bidi/format characters as ⟨U+200B⟩
    style markers, a lone U+FFFD (an incomplete UTF-8 byte piece) as a marked �. Spaces are kept
    (the CSS uses ``white-space: pre-wrap``). The result contains no raw ``<``, ``>``, ``&`` from
    the input, no quote characters and no ``$ { } ` `` (so no template engine can act on it)."""
    if text is None:
        return ""
    text = str(text)
    if text.isascii() and text.isprintable():  # fast path, same result: nothing hidden or special here
        return _escape_template_chars(html.escape(text, quote=True))
    parts = []
    for char in text:
        if char in _VISIBLE_WHITESPACE:
            parts.append(f'<span class="ws">{_VISIBLE_WHITESPACE[char]}</span>')
            if char == "\n" and newline_breaks:
                parts.append("<br>")
        elif char == "\ufffd":
            parts.append('<span class="bytefrag" title="part of a multi-byte character (byte-fallback token)">'
                         "\ufffd</span>")
        elif _hidden(char):
            parts.append(f'<span class="cc">{_marker(char)}</span>')
        elif char in _EXTRA_ENTITIES:
            parts.append(_EXTRA_ENTITIES[char])
        else:
            parts.append(html.escape(char, quote=True))
    return "".join(parts)


def _escape_template_chars(escaped: str) -> str:
    """Replace $ { } ` (left alone by html.escape) with entities; entities themselves contain none."""
    for char, entity in _EXTRA_ENTITIES.items():
        escaped = escaped.replace(char, entity)
    return escaped


def plain_visible(text: str) -> str:
    """Untrusted text as plain characters with invisible ones replaced by markers (no HTML)."""
    text = str(text or "")
    if text.isascii() and text.isprintable():  # fast path: printable ASCII has nothing to mark
        return text
    out = []
    for char in text:
        if char in _VISIBLE_WHITESPACE:
            out.append(_VISIBLE_WHITESPACE[char])
        elif char != "\ufffd" and _hidden(char):
            out.append(_marker(char))
        else:
            out.append(char)
    return "".join(out)


def escape_attr(text: str) -> str:
    """Escape untrusted text for a double-quoted attribute value (title tooltips)."""
    lines = []
    for line in str(text or "").split("\n"):
        lines.append(_escape_template_chars(html.escape(plain_visible(line), quote=True)))
    return "&#10;".join(lines)


def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


STATE_LABELS = {
    "accepted": "accepted by the target",
    "rejected": "rejected by the target",
    "discarded": "dropped by the pre-verifier (never sent to the target)",
    "corrected": "corrected: the target's own token after a rejection",
    "bonus": "bonus: the target's extra token after all drafts were accepted",
    "target": "produced by the target alone",
    "drafted": "drafted, waiting for the target",
}


def token_tooltip(token: TokenRecord, block_scores: dict | None = None, step: int | None = None) -> str:
    """Plain-text hover details for one token (escaped later by ``escape_attr``)."""
    lines = [f"token {token.token_id}: {plain_visible(repr(token.text))}",
             STATE_LABELS.get(token.state, token.state)]
    if step is not None:
        lines.append(f"step {step + 1}")
    if token.draft_prob is not None:
        lines.append(f"q (draft) = {_fmt(token.draft_prob)}")
    if token.target_prob is not None:
        lines.append(f"p (target) = {_fmt(token.target_prob)}")
    if token.accept_prob is not None:
        lines.append(f"acceptance prob min(1, p/q) = {_fmt(token.accept_prob)}")
    if token.block is not None:
        score = (block_scores or {}).get(token.block)
        block_line = f"PACER block {token.block + 1}"
        if score is not None:
            block_line += f": score {_fmt(score[0])} vs threshold {_fmt(score[1])}"
        lines.append(block_line)
    if token.preverifier_prob is not None:
        lines.append(f"pre-verifier estimate = {_fmt(token.preverifier_prob)}")
    if token.stopped:
        lines.append("in the block the pre-verifier failed: drafting stopped here")
    return "\n".join(lines)


def token_span(token: TokenRecord, block_scores: dict | None = None, step: int | None = None) -> str:
    """One token as a coloured span; data-state carries the state for tests and CSS."""
    state = escape_attr(token.state)
    classes = ["tok", f"tok-{state}"]
    if token.stopped:
        classes.append("tok-stopped")
    text = escape_text(token.text) if token.text != "" else '<span class="cc">\u2205</span>'
    title = escape_attr(token_tooltip(token, block_scores, step))
    stopped = ' data-stopped="1"' if token.stopped else ""
    return (f'<span class="{" ".join(classes)}" data-state="{state}"'
            f'{stopped} title="{title}">{text}</span>')


def pending_tokens(event: StepEvent) -> list[TokenRecord]:
    """The step as it looks before the target has verified it: only the drafted tokens, all in the
    "drafted" state (PACER's pre-verifier decision is already known, so ``stopped`` stays)."""
    return [TokenRecord(token.token_id, token.text, "drafted", draft_prob=token.draft_prob, block=token.block,
                        preverifier_prob=token.preverifier_prob, stopped=token.stopped)
            for token in event.tokens if token.state in ("accepted", "rejected", "discarded")]


def step_html(event: StepEvent, pending: bool = False) -> str:
    """All tokens of one step (drafted ones with their verdicts, then the corrected/bonus token).
    ``pending``: the drafted tokens only, grey, as before the target's verdict."""
    scores = {block.index: (block.score, block.threshold) for block in event.blocks}
    parts, previous_block = [], None
    for token in (pending_tokens(event) if pending else event.tokens):
        if token.block is not None and previous_block is not None and token.block != previous_block:
            score = scores.get(token.block)
            hint = f"PACER block {token.block + 1}" + (f": score {score[0]:.3f} vs threshold {score[1]:.3f}"
                                                       if score else "")
            parts.append(f'<span class="block-sep" title="{escape_attr(hint)}"></span>')
        previous_block = token.block if token.block is not None else previous_block
        parts.append(token_span(token, scores, event.step))
    tokens = "".join(parts)
    return (f'<span class="step" data-step="{event.step + 1}">'
            f'<span class="step-sep" title="step {event.step + 1}: one target forward pass"></span>{tokens}</span>')


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
             _counter("τ", _fmt(tau, 2), "tau: tokens per target forward pass")]
    if events and isinstance(events[0], SMCCycleEvent):
        parts.append(_counter("ESS", _fmt(events[-1].ess, 2), "effective sample size of the last cycle"))
    else:
        parts.append(_counter("α", _fmt(alpha, 2), "alpha: accepted / drafted tokens"))
    return '<div class="counters">' + "".join(parts) + "</div>"


def status_badge(result: Result | None, error: str | None, running: bool) -> str:
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


def column_html(method: str, events: list, result: Result | None = None, error: str | None = None,
                running: bool = False, note: str | None = None, smc_texts: list | None = None,
                pending: bool = False) -> str:
    """The whole live column for one method: header, counters, coloured text, notes.
    ``pending``: step-through's draft phase, the newest step shown as drafted but not yet verified
    (SMC: the newest cycle is not shown yet)."""
    if pending and method == "smc" and events:
        events, smc_texts = events[:-1], (smc_texts or [])[: len(events) - 1]
        pending = False
    title = escape_text(METHOD_LABELS.get(method, method))
    head = (f'<div class="col-head"><span class="col-title">{title}</span>'
            f'{status_badge(result, error, running)}</div>')
    if method == "smc":
        body = smc_body_html(events, smc_texts or [], result)
    else:
        steps = [event for event in events if isinstance(event, StepEvent)]
        body = "".join(step_html(event, pending=pending and index == len(steps) - 1)
                       for index, event in enumerate(steps))
        body = f'<div class="tokens">{body or PLACEHOLDER}</div>'
    extra = ""
    if note:
        extra += f'<div class="col-note">{escape_text(note)}</div>'
    if error:
        extra += error_html(error)
    counters = counters_html(events[:-1] if pending and method != "smc" else events, result)
    return (f'<div class="pacer-col" data-method="{escape_attr(method)}"><div class="col-sticky">{head}'
            f"{counters}</div>{body}{extra}</div>")


PLACEHOLDER = '<span class="placeholder">Press Run or Step to start.</span>'


# ---------------------------------------------------------------- SMC-SD

def _cycle_pieces(event: SMCCycleEvent, texts: list, row: int, cycle: int) -> list[tuple[str, str, int]]:
    """Particle ``row``'s new tokens of one cycle as (text, kind, cycle): kind "smc" for drafted
    tokens, "bonus" for the target's token (the last one, when the particle grew by the full K+1)."""
    pieces = texts[row] if row < len(texts) else []
    full = max((len(ids) for ids in event.particle_token_ids), default=0)
    out = []
    for index, piece in enumerate(pieces):
        kind = "bonus" if full > 1 and len(pieces) == full and index == full - 1 else "smc"
        out.append((piece, kind, cycle))
    return out


def _texts_for(events: list, token_texts: list, cycle: int) -> list:
    if cycle < len(token_texts) and token_texts[cycle] is not None:
        return token_texts[cycle]
    return [[text] for text in events[cycle].particle_texts]


def smc_histories(events: list, token_texts: list, resample_last: bool = True) -> list[list[tuple[str, str, int]]]:
    """Each particle's continuation as (text, kind, cycle) pieces, following the genealogy.

    ``token_texts[c][i]`` lists particle i's new token texts in cycle c (K drafted + 1 bonus, fewer
    once finished). After a resampling row i continues old row ``ancestors[i]``. With
    ``resample_last=False`` the last cycle's resampling is not applied (rows as the weights saw them)."""
    histories: list[list[tuple[str, str, int]]] = []
    for cycle, event in enumerate(events):
        n = len(event.weights)
        while len(histories) < n:
            histories.append([])
        texts = _texts_for(events, token_texts, cycle)
        for row in range(n):
            histories[row].extend(_cycle_pieces(event, texts, row, cycle))
        if event.resampled and (resample_last or cycle < len(events) - 1):
            histories = [list(histories[a]) for a in event.ancestors]
    return histories


def smc_body_html(events: list, token_texts: list, result: Result | None = None) -> str:
    """Leading particle's text (drafted tokens green — SMC never rejects — the target's bonus token
    blue), then a panel of the particles of the latest cycle with weight bars: resampled-away rows
    faded, duplicated rows purple."""
    if not events:
        return '<div class="tokens"><span class="placeholder">Press Run or Step to start.</span></div>'
    last = events[-1]
    n = len(last.weights)
    rows = smc_histories(events, token_texts, resample_last=False)
    while len(rows) < n:
        rows.append([])
    leader = max(range(n), key=lambda i: last.weights[i]) if n else 0
    shown, output_note = rows[leader], ""
    chosen = (result.info or {}).get("chosen_particle") if result is not None else None
    if isinstance(chosen, int):
        final_rows = smc_histories(events, token_texts, resample_last=True)
        if 0 <= chosen < len(final_rows):
            shown = final_rows[chosen]
            how = "drawn at random from" if (result.info or {}).get("final", "sample") == "sample" else "the heaviest by"
            output_note = (f'<div class="col-note">Output: the particle {how} the final weights'
                           f'{"" if last.resampled else f" (#{chosen + 1})"}.</div>')
    spans = []
    previous_cycle = None
    for piece, kind, cycle in shown:
        if cycle != previous_cycle:
            spans.append(f'<span class="step-sep" title="cycle {cycle + 1}"></span>')
            previous_cycle = cycle
        state = "accepted" if kind == "smc" else "bonus"
        label = ("drafted by the draft, kept (SMC reweights instead of rejecting)" if kind == "smc"
                 else "bonus: sampled from the target")
        title = escape_attr(f"{plain_visible(repr(piece))}\ncycle {cycle + 1}\n{label}")
        spans.append(f'<span class="tok tok-{state}" data-state="{state}" title="{title}">'
                     f"{escape_text(piece) or '&#8709;'}</span>")
    leader_html = f'<div class="tokens">{"".join(spans)}</div>'
    counts = [last.ancestors.count(i) for i in range(n)] if last.resampled else [1] * n
    panel = []
    for row in range(n):
        weight = last.weights[row] if row < len(last.weights) else 0.0
        kind = "kept"
        if last.resampled and counts[row] == 0:
            kind = "resampled-away"
        elif last.resampled and counts[row] > 1:
            kind = "duplicated"
        finished = row < len(last.finished) and last.finished[row]
        tail = "".join(escape_text(piece, newline_breaks=False) for piece, _, _ in rows[row][-12:])
        note = {"kept": "", "resampled-away": "resampled away",
                "duplicated": f"duplicated ×{counts[row]}"}[kind]
        title = escape_attr(f"particle {row + 1}: weight {weight:.3f}, log-weight "
                            f"{last.log_weights[row] if row < len(last.log_weights) else 0.0:.3f}"
                            f"{', finished' if finished else ''}{', ' + note if note else ''}")
        leader_mark = " \u2605" if row == leader else ""
        pnote = f'<span class="pnote">{note}</span>' if note else ""
        panel.append(
            f'<div class="particle particle-{kind}" data-particle-state="{kind}" title="{title}">'
            f'<span class="pid">#{row + 1}{leader_mark}</span>'
            f'<span class="wbar"><span style="width:{max(0.0, min(1.0, weight)) * 100:.1f}%"></span></span>'
            f'<span class="wval">{weight:.2f}</span><span class="ptext">…{tail}</span>'
            f'{pnote}</div>')
    ess_line = (f'cycle {last.step + 1}: ESS {last.ess:.2f} of {n} '
                f'({"below" if last.ess < last.ess_threshold * n else "above"} the threshold '
                f'{last.ess_threshold * n:.2f}{", resampled" if last.resampled else ""})')
    return (leader_html + output_note
            + f'<div class="particles"><div class="particles-head">{escape_text(ess_line)}</div>'
            + "".join(panel) + "</div>")


# ---------------------------------------------------------------- legend, status, narration

def legend_html() -> str:
    items = [
        ("tok tok-drafted", "drafted", "drafted, not yet verified"),
        ("tok tok-accepted", "accepted", "accepted by the target"),
        ("tok tok-rejected", "rejected", "rejected by the target"),
        ("tok tok-accepted tok-stopped", "pre-verifier stop", "in the block PACER's pre-verifier failed"),
        ("tok tok-corrected", "corrected / bonus", "the target's own token"),
        ("particle-chip particle-resampled-away", "resampled away", "SMC particle dropped"),
        ("particle-chip particle-duplicated", "duplicated", "SMC particle copied"),
    ]
    spans = "".join(f'<span class="legend-item" title="{escape_attr(hint)}"><span class="{cls}">{escape_text(label)}'
                    "</span></span>" for cls, label, hint in items)
    return (f'<div class="pacer-legend">{spans}<span class="legend-hint">Hover a token for q, p, '
            "acceptance probability and block score. Thin bars separate target forward passes.</span></div>")


def drafter_text(describe: dict) -> str:
    """Which drafter runs, in words: a small model of its own, or a head that reads the target."""
    drafter = describe.get("drafter") or {}
    if drafter.get("kind") == "feature-head":
        return (f"{describe.get('draft', '?')}: a 1-layer head that reads the target's hidden state "
                f"(proposes {drafter.get('kept_ids', 0):,} most frequent ids)")
    if drafter.get("kind") == "independent":
        return f"{describe.get('draft', '?')}: a separate small model"
    return str(describe.get("draft", "?"))


def pair_status_html(describe: dict, preverifier_kind: str, smc_available: bool, note: str | None = None) -> str:
    """Model-pair status: names, device, dtype, which pre-verifier PACER uses, SMC availability."""
    trained = preverifier_kind == "trained"
    pv = ("trained pre-verifier layer" if trained else
          "heuristic confidence rule (no trained pre-verifier for this pair)")
    items = [("Target", describe.get("target", "?")), ("Drafter", drafter_text(describe)),
             ("Device", describe.get("device", "?")), ("dtype", describe.get("dtype", "?")),
             ("PACER pre-verifier", pv)]
    if not smc_available:
        items.append(("SMC-SD", "decoder not available in this build"))
    parts = "".join(f'<span class="pair-item"><span class="pair-key">{escape_text(key)}</span> '
                    f'{escape_text(str(value))}</span>' for key, value in items)
    extra = f'<div class="col-note">{escape_text(note)}</div>' if note else ""
    cls = "pv-trained" if trained else "pv-heuristic"
    return f'<div class="pair-status {cls}">{parts}{extra}</div>'


def _quote(text: str) -> str:
    """A token in quotes for the narration; a token of spaces only shows as ␣ (else it looks empty)."""
    shown = plain_visible(text)
    if shown and not shown.strip(" "):
        shown = "\u2423" * len(shown)
    return "\u201c" + shown + "\u201d"


def _quoted_list(tokens: list[TokenRecord], limit: int = 4) -> str:
    shown = ", ".join(_quote(token.text) for token in tokens[:limit])
    return shown + (f" and {len(tokens) - limit} more" if len(tokens) > limit else "")


def explain_step(event) -> str:
    """One or two plain sentences on what a step just did (plain text; escape before showing)."""
    if isinstance(event, SMCCycleEvent):
        n = len(event.weights)
        best = max(range(n), key=lambda i: event.weights[i]) if n else 0
        sentence = (f"Cycle {event.step + 1}: each of {n} particles drafted tokens and the target scored all of "
                    f"them in one batched pass (plus one bonus token each); nothing is rejected, particles are "
                    f"reweighted instead. Particle {best + 1} leads with weight {event.weights[best]:.2f}; "
                    f"ESS {event.ess:.2f} ")
        limit = event.ess_threshold * n
        if event.resampled:
            kept = sorted(set(event.ancestors))
            dropped = [i + 1 for i in range(n) if i not in kept]
            dup = [i + 1 for i in kept if event.ancestors.count(i) > 1]
            sentence += f"< {limit:.2f}, so the particles were resampled"
            if dup:
                sentence += f" (copied: {', '.join(map(str, dup))}"
                sentence += f"; dropped: {', '.join(map(str, dropped))})" if dropped else ")"
            sentence += "."
        else:
            sentence += f"≥ {limit:.2f}, so no resampling was needed."
        return sentence
    if not isinstance(event, StepEvent):
        return ""
    if event.method == "ar":
        return f"Step {event.step + 1}: the target alone produced {_quote(event.emitted_text)}."
    drafted = [t for t in event.tokens if t.state in ("accepted", "rejected", "discarded")]
    accepted = [t for t in drafted if t.state == "accepted"]
    rejected = [t for t in drafted if t.state == "rejected"]
    last = event.tokens[-1] if event.tokens else None
    parts = []
    if event.method == "pacer" and event.blocks:
        failed = [b for b in event.blocks if not b.passed]
        parts.append(f"Step {event.step + 1}: the draft proposed {len(drafted)} tokens in "
                     f"{len(event.blocks)} block{'s' if len(event.blocks) != 1 else ''}.")
        if failed:
            block = failed[0]
            verb = "dropped" if any(t.state == "discarded" for t in drafted) else "sent to the target anyway"
            parts.append(f"The pre-verifier scored block {block.index + 1} at {block.score:.2f} < "
                         f"{block.threshold:.2f}, so drafting stopped (that block was {verb}).")
        elif event.stop_reason == "max_len":
            parts.append("Every block passed the pre-verifier; drafting stopped at the maximum draft length.")
        elif event.stop_reason in ("eos", "budget"):
            parts.append(f"Drafting stopped early ({'end of text' if event.stop_reason == 'eos' else 'token limit'}).")
    else:
        parts.append(f"Step {event.step + 1}: the draft proposed {len(drafted)} token{'s' if len(drafted) != 1 else ''}.")
    if drafted:
        if rejected:
            parts.append(f"The target accepted {len(accepted)} of {event.n_drafted}"
                         f"{' (' + _quoted_list(accepted) + ')' if accepted else ''}, rejected "
                         f"{_quote(rejected[0].text)} and put {_quote(last.text if last else '')} in its place.")
        else:
            parts.append(f"The target accepted all {len(accepted)} and added the bonus token "
                         f"{_quote(last.text if last else '')}.")
    elif last is not None:
        parts.append(f"The target produced {_quote(last.text)} itself.")
    return " ".join(parts)


def summarize_run(result: Result, events: list) -> str:
    """One sentence on a finished method (plain text; escape before showing)."""
    metrics = result.metrics
    reason = {"eos": "reached the end of its answer", "length": "reached the token limit",
              "cancelled": "was stopped"}.get(result.finish_reason, str(result.finish_reason))
    text = (f"{reason.capitalize()}: {metrics.new_tokens} tokens in {metrics.target_calls} target forward passes "
            f"(τ = {metrics.tau:.2f}")
    text += f", α = {metrics.alpha:.2f})." if metrics.alpha is not None else ")."
    steps = [event for event in events if isinstance(event, StepEvent)]
    if steps:
        mean_draft = sum(event.n_drafted for event in steps) / len(steps)
        text += f" It drafted {mean_draft:.1f} tokens per step on average"
        stopped = sum(1 for event in steps if event.stop_reason == "preverifier")
        text += f"; the pre-verifier cut the draft short in {stopped} of {len(steps)} steps." if any(
            event.blocks for event in steps) else "."
    cycles = [event for event in events if isinstance(event, SMCCycleEvent)]
    if cycles:
        resampled = sum(1 for event in cycles if event.resampled)
        text += f" The particles were resampled in {resampled} of {len(cycles)} cycles."
    return text


def explain_draft(event) -> str:
    """Step-through's first half: what was drafted, before the target looks (plain text)."""
    if isinstance(event, SMCCycleEvent):
        n = len(event.weights)
        k = max((len(ids) for ids in event.particle_token_ids), default=1) - 1
        return (f"Cycle {event.step + 1}: each of {n} particles drafted {max(k, 1)} tokens. Next (press Step): the "
                "target scores all particles in one batched pass, adds one token to each and reweights them.")
    if not isinstance(event, StepEvent) or event.method == "ar":
        return ""
    drafted = pending_tokens(event)
    sentence = f"Step {event.step + 1}: the draft proposed {len(drafted)} token{'s' if len(drafted) != 1 else ''}"
    sentence += f" ({_quoted_list(drafted, 6)})." if drafted else "."
    if event.method == "pacer" and event.blocks:
        scores = ", ".join(f"{block.score:.2f}" for block in event.blocks)
        failed = [block for block in event.blocks if not block.passed]
        sentence += (f" Pre-verifier block scores: {scores} (threshold {event.blocks[0].threshold:.2f})")
        if failed:
            sentence += f"; block {failed[0].index + 1} failed, so drafting stopped there."
        else:
            sentence += "; every block passed."
    return sentence + " Next (press Step): the target checks them all in one forward pass."


def narration_html(lines: dict[str, str]) -> str:
    """The step-through narration box: one escaped paragraph per method."""
    if not lines:
        return ('<div class="narration"><span class="placeholder">Press <b>Step</b> to walk through one target '
                "forward pass at a time: first what each draft proposed, then the target's verdict.</span></div>")
    rows = "".join(f'<p><span class="narr-method">{escape_text(METHOD_LABELS.get(method, method))}</span> '
                   f"{escape_text(text, newline_breaks=False)}</p>" for method, text in lines.items())
    return f'<div class="narration">{rows}</div>'


def run_status_html(message: str, kind: str = "info") -> str:
    return f'<div class="run-status run-{escape_attr(kind)}">{escape_text(message)}</div>'
