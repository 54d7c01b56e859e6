"""The race: how Run shows speed honestly. Pure: no Gradio, no clock (the handler passes elapsed seconds).

A page that decodes three or four methods interleaved while it draws them measures its own load: the
browser, Gradio's per-update work and the methods' caches taking turns share the cores the decoders use, so
each column took 1.2-2.5x its decoder's own time and the printed speedups moved with the machine
(docs/measurements.md, "What the page shows"). So Run times each method alone, one after another: a method's
turn is one frame, its decoding starts once the page has drawn it (``ui/frames.py``) and nothing is sent until it
ends (a fixed wait for the browser holds on one host and fails on a faster one), recording when each event
arrived on the method's own clock (``MethodRun.event_seconds``). Then the columns are replayed side by side at the pace
each ran, fast-forwarded by ``REPLAY_SPEED``: a race whose finishing order, gaps and clock are the measured
ones, AR included as a lane.

``Lane`` is one method's recorded clock; ``shown`` says how many of its events the replay shows after
``elapsed`` seconds; ``race_line`` and ``timing_line`` are the status lines of the two phases."""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from ..method_table import label_of, short_label_of
from .columns import live_numbers

RACE_FRAME_S = 0.3           # one replay frame at most this often (the oracle and likelihoods share the cores)
REPLAY_SPEED = 3.0           # the race plays 3x faster than the methods ran: order, proportions and the clock
                             # (in the methods' own seconds) are the measured ones, and a Run waits for the timing
                             # plus a third of the slowest method instead of all of it, while the scoring (which the
                             # kept rows make short) runs beside it (a whole Run within 1.5x the four decoders' own
                             # seconds; benchmarks/results/replay-speed-ab-kept-rows/)
CLIENT_CHECK_S = 0.5         # while a method is timed, whether its client is still there is checked this often
                             # (nothing is sent to a page; an API client gets an empty update, where Gradio ends a
                             # Run whose client left); Stop needs none
STARTING = "Starting: its first pass is on the way…"   # a lane before its first event in the replay
HOW_TIMED = "each method timed alone"      # the finished status line: "Done in 12.3 s, each method timed alone."


@dataclass(frozen=True)
class Lane:
    """One method's run on its own clock: when each event arrived, the running token count, the end."""
    method: str
    event_seconds: tuple[float, ...]
    tokens: tuple[int, ...]
    total_seconds: float


def lane_of(run) -> Lane:
    """The lane of a ``MethodRun`` that has been timed alone."""
    return Lane(run.method, tuple(run.event_seconds), tuple(event.total_new_tokens for event in run.events),
                float(run.busy_seconds))


def lanes_of(session) -> list[Lane]:
    """Every method that decoded, in the columns' order, the AR baseline last."""
    return [lane_of(run) for run in session.all_runs() if run.events or run.result is not None]


def shown(lane: Lane, elapsed: float) -> int:
    """How many of the lane's events had arrived ``elapsed`` seconds into its run."""
    return bisect_right(lane.event_seconds, elapsed)


def finished(lane: Lane, elapsed: float) -> bool:
    return elapsed >= lane.total_seconds


def duration(lanes: list[Lane]) -> float:
    """The race lasts as long as its slowest lane."""
    return max((lane.total_seconds for lane in lanes), default=0.0)


def lane_word(lane: Lane, elapsed: float) -> str:
    name = short_label_of(lane.method)
    if finished(lane, elapsed):
        return f"{name} ✓ {lane.total_seconds:.2f} s"
    count = shown(lane, elapsed)
    return f"{name} {lane.tokens[count - 1] if count else 0} tokens"


def race_line(lanes: list[Lane], elapsed: float) -> str:
    """The replay's status: the clock and every lane's progress or finishing time."""
    clock = min(elapsed, duration(lanes))
    return (f"Replay of the race at {REPLAY_SPEED:g}× speed, on each method's own clock: {clock:.1f} s · "
            + " · ".join(lane_word(lane, elapsed) for lane in lanes))


def turn_place(method: str, position: int, count: int, previous: str | None = None) -> str:
    """Where a turn stands in its pass: "2 of 4: PACER; fixed SD took 0.80 s for 48 tokens"."""
    return f"{position} of {count}: {label_of(method)}" + (f"; {previous}" if previous else "")


def timing_line(method: str, position: int, count: int, previous: str | None = None) -> str:
    """The timing phase's status at a method's turn: which method runs alone now (and what the last one took)."""
    return (f"Timing each method alone, one after another ({turn_place(method, position, count, previous)}). Nothing "
            f"on the page moves while a method decodes, so its seconds are its own. Then the columns replay side by "
            f"side at the pace each ran ({REPLAY_SPEED:g}× speed).")


def timing_again_line(method: str, position: int, count: int, pass_number: int, passes: int,
                      previous: str | None = None) -> str:
    """A later pass's status at a method's turn (``timing_turn.timing_passes``): why a short Run times again."""
    why = (f"A short Run is timed {passes} times and each method keeps its fastest pass, so one busy moment of the "
           "machine does not decide its speed.")
    return (f"Timing each method alone again, pass {pass_number} of {passes} "
            f"({turn_place(method, position, count, previous)}). {why} Nothing on the page moves while a method "
            f"decodes.")


def how_timed(passes: int) -> str:
    """How the finished Run was timed, for its status line: "each method timed alone (best of 2)": a short Run
    timed each method in more than one pass and kept its fastest."""
    return HOW_TIMED + (f" (best of {passes})" if passes > 1 else "")


def took_line(run) -> str:
    """What a method timed alone took: "PACER took 1.92 s for 48 tokens"."""
    return (f"{short_label_of(run.method)} took {run.busy_seconds:.2f} s for "
            f"{live_numbers(run.events)['tokens']} tokens")


def waiting_text(run, current: bool, again: str | None = None) -> str:
    """What a column shows while the methods are timed: its own progress, its time, or its turn to come
    (``again``: the later pass that times it, "pass 2 of 2")."""
    tokens = live_numbers(run.events)["tokens"]
    if current:
        return f"⏱ Timing alone again ({again}): nothing is drawn until it ends…" if again else \
            "⏱ Timing alone now: nothing is drawn until it ends…"
    if run.done:
        return f"Timed alone: {tokens} tokens in {run.busy_seconds:.2f} s. The replay shows it next."
    return "Waits its turn: the methods are timed one after another."
