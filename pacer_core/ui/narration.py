"""Plain sentences on what a step, a cycle or a whole run just did (the step-through narration box),
and the box itself. The sentences are plain text; ``narration_html`` escapes them."""
from __future__ import annotations

from ..events import Result, SMCCycleEvent, StepEvent, TokenRecord, TokenState
from ..method_table import label_of
from .columns import DRAFTED_STATES, pending_tokens
from .escape import escape_text, plain_visible


def _quote(text: str) -> str:
    """A token in quotes for the narration; a token of spaces only shows as ␣ (else it looks empty)."""
    shown = plain_visible(text)
    if shown and not shown.strip(" "):
        shown = "\u2423" * len(shown)
    return "\u201c" + shown + "\u201d"


def _quoted_list(tokens: list[TokenRecord], limit: int = 4) -> str:
    shown = ", ".join(_quote(token.text) for token in tokens[:limit])
    return shown + (f" and {len(tokens) - limit} more" if len(tokens) > limit else "")


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'s' if count != 1 else ''}"


def explain_cycle(event: SMCCycleEvent) -> str:
    """SMC-SD: who leads, the ESS against its threshold, and whether the particles were resampled."""
    n = len(event.weights)
    best = max(range(n), key=lambda i: event.weights[i]) if n else 0
    sentence = (f"Cycle {event.step + 1}: each of {_plural(n, 'particle')} drafted tokens and the target scored all of "
                f"them in one batched pass (plus one bonus token each); nothing is rejected, particles are "
                f"reweighted instead. Particle {best + 1} leads with weight {event.weights[best]:.2f}; "
                f"ESS {event.ess:.2f} ")
    limit = event.resample_line
    if not event.resampled:
        return sentence + f"≥ {limit:.2f}, so no resampling was needed."
    kept = sorted(set(event.ancestors))
    dropped = [i + 1 for i in range(n) if i not in kept]
    copied = [i + 1 for i in kept if event.ancestors.count(i) > 1]
    sentence += f"< {limit:.2f}, so the particles were resampled"
    if copied:
        sentence += f" (copied: {', '.join(map(str, copied))}"
        sentence += f"; dropped: {', '.join(map(str, dropped))})" if dropped else ")"
    return sentence + "."


def _pacer_draft_sentences(event: StepEvent, drafted: list[TokenRecord]) -> list[str]:
    parts = [f"Step {event.step + 1}: the draft proposed {_plural(len(drafted), 'token')} in "
             f"{_plural(len(event.blocks), 'block')}."]
    parts += [f"Block {block.index + 1} is a phrase: {block.phrase}." for block in event.blocks if block.phrase]
    failed = [block for block in event.blocks if not block.passed]
    if failed:
        verb = "dropped" if any(t.state is TokenState.DISCARDED for t in drafted) else "sent to the target anyway"
        parts.append(f"The pre-verifier scored block {failed[0].index + 1} at {failed[0].score:.2f} < "
                     f"{failed[0].threshold:.2f}, so drafting stopped (that block was {verb}).")
    elif event.stop_reason == "preverifier" and event.stop_note:
        parts.append(f"The pre-verifier's low estimate of the last tokens made another one not worth its cost "
                     f"(cost rule, {event.stop_note}).")
    elif event.stop_reason == "cost" and event.stop_note:
        parts.append(f"Cost rule, {event.stop_note}: the draft reached the length where drafting stops paying.")
    elif event.stop_reason == "max_len":
        parts.append("Every block passed the pre-verifier; drafting stopped at the maximum draft length.")
    elif event.stop_reason in ("eos", "budget"):
        parts.append(f"Drafting stopped early ({'end of text' if event.stop_reason == 'eos' else 'token limit'}).")
    return parts


def _verdict_sentence(event: StepEvent, drafted: list[TokenRecord]) -> str:
    accepted = [t for t in drafted if t.state is TokenState.ACCEPTED]
    rejected = [t for t in drafted if t.state is TokenState.REJECTED]
    last = _quote(event.tokens[-1].text if event.tokens else "")
    if not drafted:
        return f"The target produced {last} itself." if event.tokens else ""
    if not rejected:
        return f"The target accepted all {len(accepted)} and added the bonus token {last}."
    listed = f" ({_quoted_list(accepted)})" if accepted else ""
    return (f"The target accepted {len(accepted)} of {event.n_drafted}{listed}, rejected "
            f"{_quote(rejected[0].text)} and put {last} in its place.")


def explain_step(event) -> str:
    """One or two plain sentences on what a step just did (plain text; escape before showing)."""
    if isinstance(event, SMCCycleEvent):
        return explain_cycle(event)
    if not isinstance(event, StepEvent):
        return ""
    if event.method == "ar":
        return f"Step {event.step + 1}: the target alone produced {_quote(event.emitted_text)}."
    drafted = [t for t in event.tokens if t.state in DRAFTED_STATES]
    if event.method == "pacer" and event.blocks:
        parts = _pacer_draft_sentences(event, drafted)
    else:
        parts = [f"Step {event.step + 1}: the draft proposed {_plural(len(drafted), 'token')}."]
    return " ".join(parts + [part for part in [_verdict_sentence(event, drafted)] if part])


def drafted_per_particle(event: SMCCycleEvent) -> int:
    """K of one cycle: the drafted tokens of its longest particle (the decoder marks which were drafted)."""
    if event.particle_tokens:
        return max((sum(t.state is TokenState.DRAFTED for t in row) for row in event.particle_tokens), default=0)
    return max((len(ids) for ids in event.particle_token_ids), default=1) - 1


def explain_draft(event) -> str:
    """Step-through's first half: what was drafted, before the target looks (plain text)."""
    if isinstance(event, SMCCycleEvent):
        return (f"Cycle {event.step + 1}: each of {_plural(len(event.weights), 'particle')} drafted "
                f"{_plural(max(drafted_per_particle(event), 1), 'token')}. Next (press Step): the target scores all "
                "particles in one batched pass, adds one token to each and reweights them.")
    if not isinstance(event, StepEvent) or event.method == "ar":
        return ""
    drafted = pending_tokens(event)
    sentence = f"Step {event.step + 1}: the draft proposed {_plural(len(drafted), 'token')}"
    sentence += f" ({_quoted_list(drafted, 6)})." if drafted else "."
    if event.method == "pacer" and event.blocks:
        scores = ", ".join(f"{block.score:.2f}" for block in event.blocks)
        failed = [block for block in event.blocks if not block.passed]
        sentence += f" Pre-verifier block scores: {scores} (threshold {event.blocks[0].threshold:.2f})"
        sentence += (f"; block {failed[0].index + 1} failed, so drafting stopped there." if failed
                     else "; every block passed.")
    return sentence + " Next (press Step): the target checks them all in one forward pass."


def summarize_run(result: Result, events: list) -> str:
    """One sentence on a finished method (plain text; escape before showing)."""
    metrics = result.metrics
    reason = {"eos": "reached the end of its answer", "length": "reached the token limit",
              "cancelled": "was stopped"}.get(result.finish_reason, str(result.finish_reason))
    passes = "target forward pass" + ("es" if metrics.target_calls != 1 else "")
    text = (f"{reason.capitalize()}: {_plural(metrics.new_tokens, 'token')} in {metrics.target_calls} {passes} "
            f"(τ = {metrics.tau:.2f}")
    text += f", α = {metrics.alpha:.2f})." if metrics.alpha is not None else ")."
    steps = [event for event in events if isinstance(event, StepEvent)]
    if steps:
        text += f" It drafted {sum(event.n_drafted for event in steps) / len(steps):.1f} tokens per step on average"
        stopped = sum(1 for event in steps if event.stop_reason in ("preverifier", "cost"))
        rule = result.info.get("stopped_by") or "the pre-verifier"
        text += (f"; {rule} cut the draft short in {stopped} of {len(steps)} steps"
                 if any(event.blocks for event in steps) else ".")
        if any(event.blocks for event in steps):
            text += _stop_split(steps, rule) + "."
    cycles = [event for event in events if isinstance(event, SMCCycleEvent)]
    if cycles:
        resampled = sum(1 for event in cycles if event.resampled)
        text += f" The particles were resampled in {resampled} of {len(cycles)} cycles."
        text += _dead_particle_sentence(result.info.get("dead_particles"))
    return text + _prefill_sentence(result, events)


PREFILL_SHARE_TOLD = 0.2     # a prefill of at least this share of a run's seconds gets its own sentence


def _prefill_sentence(result: Result, events: list) -> str:
    """On a long prompt, what the prompt's prefill (reported by the first event) took of the run: the same for every
    method, so it dilutes any speedup (an old trace, which did not report it, says nothing)."""
    prefill, seconds = (events[0].prefill_seconds if events else 0.0), result.metrics.seconds
    if seconds <= 0 or prefill < PREFILL_SHARE_TOLD * seconds:
        return ""
    return (f" The prompt's prefill took {prefill:.2f} of its {seconds:.2f} s ({prefill / seconds:.0%}), the same "
            "for every method: drafting speeds up writing, not reading, so a long prompt pulls the speedup over AR "
            "toward 1x.")


def _stop_split(steps: list, rule: str) -> str:
    """Under the cost rule, which of the two stopped the drafts: the pre-verifier's estimates of the tokens drafted
    (a typical draft would have gone on) or the costs (the length where drafting stops paying)."""
    if not rule.startswith("the cost rule"):
        return ""
    by_preverifier = sum(1 for event in steps if event.stop_reason == "preverifier")
    by_cost = sum(1 for event in steps if event.stop_reason == "cost")
    return f" ({by_preverifier} by the pre-verifier's estimates, {by_cost} at the length where drafting stops paying)"


def _dead_particle_sentence(dead: dict | None) -> str:
    """What drafting and verifying particles that carried (almost) no weight cost: the rows resampling would
    have given to particles that still count (the SMC decoder's ``dead_particles`` report)."""
    if not dead or not dead.get("all_rows"):
        return ""
    floor = f"{dead['weight_floor']:.0%}"
    if not dead["cycles"]:
        return f" No cycle ran with a particle below {floor} of the weight."
    share = dead["rows"] / dead["all_rows"]
    return (f" {_plural(dead['cycles'], 'cycle')} ran with a particle below {floor} of the weight: "
            f"{dead['rows']} of {dead['all_rows']} particle rows ({share:.0%} of the drafting and verifying) went "
            f"on particles that could no longer count; resampling in time would have spent them on live ones.")


DRAFTER_LESSONS = {
    "small": "cheap guesses (a tenth of a torch target step each, a third of a llama.cpp one) that the target "
             "often rejects",
    "head": "cheap guesses read off the target's own hidden state, still often rejected",
    "self-int8": "the target's own weights in 8 bits: guesses almost always accepted, but each costs about half "
                 "a torch target step on a CPU, and more than a step of the target run by llama.cpp",
    "self-int4": "the target's own weights in 4 bits: guesses usually accepted, each costing about half a torch "
                 "target step on a CPU, and more than a step of the target run by llama.cpp",
    "gguf": "the target's own 4-bit GGUF run by llama.cpp, an engine made for CPUs: guesses almost always "
            "accepted and each costs only a fraction of a target step, so long drafts pay",
}


def drafter_sentence(method: str, drafter: str) -> str:
    """What the drafter choice means for a finished column (plain text): its cost against its acceptance,
    and for SMC-SD why the proposal must be close to the target (its weights are p/q)."""
    lesson = DRAFTER_LESSONS.get(drafter, "the pair's own drafter")
    if method == "smc":
        return (f" Drafter {drafter}: {lesson}. SMC-SD weighs each particle by p/q, so the closer the drafter's q "
                "is to the target's p, the more even the weights and the closer its text to what the target writes. "
                "Its speed: every particle is a row of work, which a CPU pays for row by row (on a 2-core CPU it gains "
                "little or nothing over AR: compare its speedup in the table) and a GPU almost not at all.")
    return f" Drafter {drafter}: {lesson}."


def narration_html(lines: dict[str, str]) -> str:
    """The step-through narration box: one escaped paragraph per method."""
    if not lines:
        return ('<div class="narration"><span class="placeholder">Press <b>Step</b> to walk through one target '
                "forward pass at a time: first what each draft proposed, then the target's verdict.</span></div>")
    rows = "".join(f'<p><span class="narr-method">{escape_text(label_of(method))}</span> '
                   f"{escape_text(text, newline_breaks=False)}</p>" for method, text in lines.items())
    return f'<div class="narration">{rows}</div>'
