"""SMC-SD's column body: the leading (or, once finished, the chosen) particle's text, then a panel of
the latest cycle's particles with weight bars — resampled-away rows faded, duplicated rows purple.

SMC-SD never rejects: a drafted token is kept and its particle reweighted, so drafted tokens show in
the accepted colour and the target's bonus token in blue (docs/algorithms.md#token-states-and-colours).
Each token's kind comes from the decoder's event (``SMCCycleEvent.particle_tokens``)."""
from __future__ import annotations

from ..events import Result, SMCCycleEvent, TokenState
from .escape import escape_attr, escape_text, plain_visible
from .genealogy import Fate, HistoryPiece, lineage, particle_histories

PANEL_TAIL_TOKENS = 12        # a particle row in the panel shows its last this many tokens
_KEPT_LABEL = "drafted by the draft, kept (SMC reweights instead of rejecting)"
_BONUS_LABEL = "bonus: sampled from the target"


def piece_span(piece: HistoryPiece) -> str:
    """One token of a particle's history as a coloured span."""
    bonus = piece.token.state is TokenState.BONUS
    state = TokenState.BONUS if bonus else TokenState.ACCEPTED
    title = escape_attr(f"{plain_visible(repr(piece.token.text))}\ncycle {piece.cycle + 1}\n"
                        f"{_BONUS_LABEL if bonus else _KEPT_LABEL}")
    return (f'<span class="tok tok-{state}" data-state="{state}" title="{title}">'
            f"{escape_text(piece.token.text) or '&#8709;'}</span>")


def history_html(history: list[HistoryPiece]) -> str:
    """A particle's whole continuation, a thin bar before each cycle."""
    spans, previous_cycle = [], None
    for piece in history:
        if piece.cycle != previous_cycle:
            spans.append(f'<span class="step-sep" title="cycle {piece.cycle + 1}"></span>')
            previous_cycle = piece.cycle
        spans.append(piece_span(piece))
    return f'<div class="tokens">{"".join(spans)}</div>'


def chosen_particle(events: list, result: Result | None) -> tuple[list[HistoryPiece], str] | None:
    """A finished run: the particle the decoder output and a note on how it was chosen; else None."""
    info = (result.info or {}) if result is not None else {}
    chosen = info.get("chosen_particle")
    final_rows = particle_histories(events, resample_last=True) if isinstance(chosen, int) else []
    if not 0 <= (chosen if isinstance(chosen, int) else -1) < len(final_rows):
        return None
    how = "drawn at random from" if info.get("final", "sample") == "sample" else "the heaviest by"
    number = "" if events[-1].resampled else f" (#{chosen + 1})"
    return final_rows[chosen], f'<div class="col-note">Output: the particle {how} the final weights{number}.</div>'


def particle_row_html(event: SMCCycleEvent, row: int, fate: Fate, copies: int, history: list[HistoryPiece],
                      leader: int) -> str:
    """One particle of the latest cycle: number, weight bar, the tail of its text, its fate."""
    weight = event.weights[row] if row < len(event.weights) else 0.0
    log_weight = event.log_weights[row] if row < len(event.log_weights) else 0.0
    finished = row < len(event.finished) and event.finished[row]
    note = {Fate.KEPT: "", Fate.RESAMPLED_AWAY: "resampled away", Fate.DUPLICATED: f"duplicated ×{copies}"}[fate]
    title = escape_attr(f"particle {row + 1}: weight {weight:.3f}, log-weight {log_weight:.3f}"
                        f"{', finished' if finished else ''}{', ' + note if note else ''}")
    tail = "".join(escape_text(piece.token.text, newline_breaks=False) for piece in history[-PANEL_TAIL_TOKENS:])
    leader_mark = " \u2605" if row == leader else ""
    note_html = f'<span class="pnote">{note}</span>' if note else ""
    return (f'<div class="particle particle-{fate}" data-particle-state="{fate}" title="{title}">'
            f'<span class="pid">#{row + 1}{leader_mark}</span>'
            f'<span class="wbar"><span style="width:{max(0.0, min(1.0, weight)) * 100:.1f}%"></span></span>'
            f'<span class="wval">{weight:.2f}</span><span class="ptext">…{tail}</span>{note_html}</div>')


def ess_line(event: SMCCycleEvent) -> str:
    n = len(event.weights)
    limit = event.resample_line
    return (f'cycle {event.step + 1}: ESS {event.ess:.2f} of {n} '
            f'({"below" if event.ess < limit else "above"} the threshold {limit:.2f}'
            f'{", resampled" if event.resampled else ""})')


def smc_body_html(events: list, result: Result | None = None) -> str:
    """The SMC column's body for a non-empty list of cycle events."""
    last_line = lineage(events)[-1]
    last = last_line.event
    n = len(last.weights)
    rows = particle_histories(events, resample_last=False)
    rows += [[] for _ in range(n - len(rows))]
    leader = max(range(n), key=lambda row: last.weights[row]) if n else 0
    shown, output_note = chosen_particle(events, result) or (rows[leader], "")
    panel = "".join(particle_row_html(last, row, last_line.fates[row], last_line.copies[row], rows[row], leader)
                    for row in range(n))
    return (history_html(shown) + output_note
            + f'<div class="particles"><div class="particles-head">{escape_text(ess_line(last))}</div>{panel}</div>')
