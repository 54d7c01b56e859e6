"""The columns of a running page, kept up to date as events arrive: each update costs what the new events
cost, not what the whole run so far costs, and what goes to the browser is what changed.

A column's full HTML (``columns.column_html``) grows with the run: a 512-token run's PACER trace is a few
hundred coloured spans, each with its tooltip, and SMC-SD's leading particle is re-derived from the whole
genealogy. Rendering and sending all of it after every step made the page's overhead grow with the answer
(benchmarks/ui_overhead.py; docs/measurements.md, "Long answers and long prompts"). Here every step's spans
are rendered once and kept, SMC-SD's particle histories are extended by one cycle each (sharing the
ancestors' pieces), and a running column is a value in parts::

    {"head": str, "answer": [str, ...], "mid": str, "trace": [str, ...], "tail": str}

whose concatenation (``column_markup``) is exactly ``column_html`` of the same events
(tests/test_ui_live.py checks this after every event of real runs). ``answer`` and ``trace`` only grow
(SMC-SD: the leading particle's per-cycle pieces; a change of leader replaces the pieces after the last
common ancestor). Gradio streams a generator's outputs as diffs against the previous value (a list grows by
"add" edits, unchanged items send nothing), so an update sends the counters, one new step and SMC-SD's
particle panel; the column's HTML component joins the parts (``COLUMN_TEMPLATE``). A finished, failed or
step-through column is a plain HTML string, as before.

No Gradio here."""
from __future__ import annotations

from ..events import SMCCycleEvent, StepEvent
from .. import method_table
from ..method_table import label_of
from .columns import column_html, counters_html, status_badge, step_html, trace_label
from .escape import escape_attr, escape_text
from .genealogy import HistoryPiece, _fate, cycle_tokens
from .smc_panel import PANEL_TAIL_TOKENS, ess_line, particle_row_html, piece_span

# The column component's html_template (a JS template string): a plain string is the HTML itself, a dict
# is a running column in parts. "${...}" is Gradio's template syntax, not Python's.
COLUMN_TEMPLATE = ("${value == null ? '' : typeof value === 'string' ? value : "
                   "value.head + value.answer.join('') + value.mid + value.trace.join('') + value.tail}")


def column_markup(value) -> str:
    """The HTML a column value shows: the string itself, or the parts joined as COLUMN_TEMPLATE joins them."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return value["head"] + "".join(value["answer"]) + value["mid"] + "".join(value["trace"]) + value["tail"]


def _sticky(method: str, events: list, running: bool) -> str:
    title = escape_text(label_of(method))
    head = f'<div class="col-head"><span class="col-title">{title}</span>{status_badge(None, None, running)}</div>'
    return (f'<div class="pacer-col" data-method="{escape_attr(method)}"><div class="col-sticky">{head}'
            f"{counters_html(events)}</div>")


def _answer_open(method: str) -> str:
    label = "Leading particle so far" if method == "smc" else "Answer so far"
    return f'<div class="answer" data-role="answer"><div class="part-label">{label}</div><div class="answer-text">'


def _trace_open(method: str) -> str:
    label = trace_label(method_table.steps_by_pass(method))
    return f'</div></div><div class="trace" data-role="trace"><div class="part-label">{label}</div><div class="tokens">'


def _extra(note: str | None) -> str:
    return f'<div class="col-note">{escape_text(note)}</div>' if note else ""


class EscapedText:
    """A growing text and its escaped HTML, extended by the new characters only (escape_text works
    character by character, so escaping a + b is escaping a, then b)."""

    def __init__(self):
        self.text, self.html = "", ""

    def update(self, text: str) -> str:
        if text.startswith(self.text):
            self.html += escape_text(text[len(self.text):])
        else:
            self.html = escape_text(text)
        self.text = text
        return self.html


class StepColumn:
    """Fixed SD and PACER: each step's spans rendered once; the answer grows by each step's escaped text."""

    def __init__(self, method: str):
        self.method = method
        self.steps: list[str] = []          # step_html of each StepEvent so far
        self.answer: list[str] = []         # escape_text of each step's emitted text
        self.seen = 0                       # events consumed

    def value(self, events: list, note: str | None) -> dict:
        for event in events[self.seen:]:
            if isinstance(event, StepEvent):
                self.steps.append(step_html(event))
                self.answer.append(escape_text(event.emitted_text))
        self.seen = len(events)
        answer = self.answer if any(self.answer) else ['<span class="placeholder">nothing yet</span>']
        return {"head": _sticky(self.method, events, True) + _answer_open(self.method), "answer": list(answer),
                "mid": _trace_open(self.method), "trace": list(self.steps),
                "tail": "</div></div>" + _extra(note) + "</div>"}


class SMCColumn:
    """SMC-SD: every particle's history as per-cycle pieces, extended by one cycle per event along the
    genealogy (``genealogy.lineage`` / ``particle_histories``, one cycle at a time); the trace shows the
    leading particle's pieces, the panel the latest cycle's particles."""

    def __init__(self):
        self.chunks: list[tuple[str, ...]] = []       # per row: its history's HTML, one piece per cycle
        self.tails: list[tuple[HistoryPiece, ...]] = []   # per row: its last PANEL_TAIL_TOKENS pieces
        self.previous: SMCCycleEvent | None = None
        self.cycles = 0
        self.seen = 0
        self.leader_text = EscapedText()

    def add(self, event: SMCCycleEvent) -> None:
        n = len(event.weights)
        previous = self.previous
        parents = list(previous.ancestors[:n]) if previous is not None and previous.resampled else list(range(n))
        chunks, tails = [], []
        for row, parent in enumerate(parents):
            pieces = tuple(HistoryPiece(token, self.cycles) for token in cycle_tokens(event, row))
            spans = "".join(piece_span(piece) for piece in pieces)
            piece_html = f'<span class="step-sep" title="cycle {self.cycles + 1}"></span>{spans}' if pieces else ""
            known = parent < len(self.chunks)
            chunks.append((self.chunks[parent] if known else ()) + (piece_html,))
            tails.append(((self.tails[parent] if known else ()) + pieces)[-PANEL_TAIL_TOKENS:])
        self.chunks, self.tails, self.previous, self.cycles = chunks, tails, event, self.cycles + 1

    def value(self, events: list, note: str | None) -> dict:
        for event in events[self.seen:]:
            if isinstance(event, SMCCycleEvent):
                self.add(event)
        self.seen = len(events)
        last = self.previous
        n = len(last.weights)
        leader = max(range(n), key=lambda row: last.weights[row]) if n else 0
        copies = [last.ancestors.count(row) for row in range(n)] if last.resampled else [1] * n
        panel = "".join(particle_row_html(last, row, _fate(copies[row]), copies[row],
                                          list(self.tails[row]) if row < len(self.tails) else [], leader)
                        for row in range(n))
        leader_html = self.leader_text.update(last.leader_text)
        trace = list(self.chunks[leader]) if leader < len(self.chunks) else []
        return {"head": _sticky("smc", events, True) + _answer_open("smc"),
                "answer": [leader_html or '<span class="placeholder">nothing yet</span>'],
                "mid": _trace_open("smc"), "trace": trace,
                "tail": ('</div><div class="particles"><div class="particles-head">' + escape_text(ess_line(last))
                         + f"</div>{panel}</div></div>" + _extra(note) + "</div>")}


class LiveColumns:
    """The three columns of one run: ``value`` gives a column's page value for its events so far.

    Running columns come in parts from the kept state (``StepColumn``, ``SMCColumn``). A finished or failed
    column, or one before its first event, is ``column_html``; a finished or failed one is rendered once and
    the same string returned after that (Gradio sends nothing for an unchanged value). ``note`` is called
    once per column and state (running, then done): a note changes only when its column finishes."""

    def __init__(self):
        self.columns: dict[str, StepColumn | SMCColumn] = {}
        self.finished: dict[str, str] = {}
        self.notes: dict[tuple[str, bool], str | None] = {}

    def value(self, method: str, events: list, result=None, error: str | None = None, note=lambda: None,
              placeholder: str | None = None):
        """``placeholder``: what a running column with no events yet says (default: how to start a run)."""
        done = result is not None or bool(error)
        if (method, done) not in self.notes:
            self.notes[method, done] = note()
        if done:
            if method not in self.finished:
                self.finished[method] = column_html(method, events, result, error, note=self.notes[method, done])
            return self.finished[method]
        if not events:
            return column_html(method, events, running=True, note=self.notes[method, done], placeholder=placeholder)
        column = self.columns.get(method)
        if column is None:
            column = self.columns[method] = SMCColumn() if isinstance(events[0], SMCCycleEvent) else StepColumn(method)
        return column.value(events, self.notes[method, done])
