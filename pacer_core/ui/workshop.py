"""The workshop: one file of exercises (``assets/workshop.json``) that the guide ``docs/workshop.md`` is
rendered from and that ``tests/test_workshop.py`` replays through the app's handlers, so the guide, the
page's example list (``assets/examples.json``) and what the class sees cannot drift apart.

An exercise names one or two runs; a run names an entry of the page's example list by its label, the
settings to change (names from ``settings.FIELDS``; everything else stays where the page starts it), the
drafter when it matters, and how many times to press Step instead of Run.

    python -m pacer_core.ui.workshop            # rewrite docs/workshop.md from assets/workshop.json
    python -m pacer_core.ui.workshop --check    # exit 1 when docs/workshop.md is out of date

Nothing in ``pacer_core`` imports this module; it reads settings and the page's starting values only."""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from ..settings import FIELD_BY_NAME, FIELDS, Limits

ROOT = Path(__file__).resolve().parent.parent.parent
WORKSHOP_PATH = ROOT / "assets" / "workshop.json"
EXAMPLES_PATH = ROOT / "assets" / "examples.json"
GUIDE_PATH = ROOT / "docs" / "workshop.md"
TRACES_DIR = ROOT / "assets" / "traces"     # the recorded runs the Replay tab offers (scripts/record_traces.py)
SETUP_MINUTES, WRAP_UP_MINUTES = 10, 5
# The controls of the page's Settings accordion (pacer_core/ui/layout.py, settings_panel).
PAGE_CONTROLS = ("temperature", "seed", "max_new_tokens", "top_k", "top_p", "gamma", "block_size", "max_draft_len",
                 "threshold", "on_fail", "stop_rule", "phrase_len", "n_particles", "draft_len", "ess_threshold")


@dataclass(frozen=True)
class ExerciseRun:
    """One click sequence of an exercise: an example of the page's list, the settings to change, the drafter."""
    example: str                 # its label in assets/examples.json
    prompt: str
    settings: dict               # setting name → value, only those the class changes
    drafter: str | None = None   # None: the pair's default drafter
    step_clicks: int = 0         # 0: press Run; n: press Step n times

    def describe(self) -> str:
        """The run in the guide's words: example, drafter, settings, which button."""
        parts = [f"example **{self.example}**"]
        if self.drafter:
            parts.append(f"Drafter `{self.drafter}`")
        parts.append(settings_text(self.settings))
        clicks = {1: "once", 2: "twice"}.get(self.step_clicks, f"{self.step_clicks} times")
        button = f"press **Step ▸** {clicks}" if self.step_clicks else "press **▶ Run**"
        return ", ".join(parts) + f"; {button}"


@dataclass(frozen=True)
class Exercise:
    id: str
    title: str
    minutes: int
    runs: tuple[ExerciseRun, ...]
    look_at: str
    question: str
    answer: str
    check: str                   # what tests/test_workshop.py asserts, in words


@dataclass(frozen=True)
class Workshop:
    title: str
    intro: tuple[str, ...]
    setup: tuple[str, ...]
    exercises: tuple[Exercise, ...]
    wrap_up: tuple[str, ...]

    @property
    def minutes(self) -> int:
        return SETUP_MINUTES + sum(exercise.minutes for exercise in self.exercises) + WRAP_UP_MINUTES

    def exercise(self, exercise_id: str) -> Exercise:
        return next(exercise for exercise in self.exercises if exercise.id == exercise_id)


def load_examples(path: Path = EXAMPLES_PATH) -> dict[str, str]:
    """The page's example list as {label: prompt}, in order."""
    return {item["label"]: item["prompt"] for item in json.loads(path.read_text(encoding="utf-8"))}


def load_workshop(path: Path = WORKSHOP_PATH, examples_path: Path = EXAMPLES_PATH) -> Workshop:
    """The exercises, each run's prompt looked up in the page's example list. ValueError for a label that is
    not in the list or a setting that is not one of the page's controls."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    examples = load_examples(examples_path)
    exercises = []
    for item in raw["exercises"]:
        runs = []
        for run in item["runs"]:
            if run["example"] not in examples:
                raise ValueError(f"exercise {item['id']!r}: {run['example']!r} is not a label in {examples_path.name}")
            unknown = sorted(set(run["settings"]) - set(PAGE_CONTROLS))
            if unknown:
                raise ValueError(f"exercise {item['id']!r}: {', '.join(unknown)} not among the page's settings")
            runs.append(ExerciseRun(run["example"], examples[run["example"]], dict(run["settings"]),
                                    run.get("drafter"), int(run.get("step_clicks", 0))))
        exercises.append(Exercise(item["id"], item["title"], int(item["minutes"]), tuple(runs), item["look_at"],
                                  item["question"], item["answer"], item["check"]))
    return Workshop(raw["title"], tuple(raw["intro"]), tuple(raw["setup"]), tuple(exercises), tuple(raw["wrap_up"]))


def settings_text(settings: dict) -> str:
    """'Temperature (0 = greedy) 0, Max new tokens 32': the page's own labels, in the page's order."""
    return ", ".join(f"{FIELD_BY_NAME[name].label} {format_value(settings[name])}"
                     for name in PAGE_CONTROLS if name in settings)


def format_value(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def starting_settings(target, drafter, preverifier=None, limits: Limits | None = None) -> dict:
    """The Settings accordion's values before anyone touches it, as the page sends them (layout.settings_panel):
    each control at its app value, then the drafter-dependent ones where the page starts them for the Drafter
    chosen in the page (``drafter``; ``starts.drafter_starts``), the threshold None while the "use the
    pre-verifier's own threshold" switch starts on."""
    from ..drafters import drafter_key
    from .starts import DRAFTER_STARTS, drafter_starts

    limits = limits or Limits.from_env()
    values = {field.name: field.default if field.app_value is None else field.app_value
              for field in FIELDS if field.name in PAGE_CONTROLS}
    values["max_new_tokens"] = min(values["max_new_tokens"], limits.max_new_tokens)
    starts = drafter_starts(target, drafter, preverifier, drafter_key(drafter))
    values |= {name: starts[name] for name in DRAFTER_STARTS}
    values["threshold"] = None if starts["own_threshold"] else starts["threshold"]
    return values


@dataclass(frozen=True)
class RecordedRun:
    """A shipped recording of one exercise run: its file in assets/traces and its title in the Replay tab."""
    exercise: Exercise
    run: ExerciseRun
    path: Path
    title: str


def recorded_runs(workshop: Workshop) -> list[RecordedRun]:
    """One recording per run of every exercise about a phenomenon (those pressing Run; the step-through
    exercise is about the buttons): ``<exercise id>.json``, or ``<exercise id>-<n>.json`` for the n-th of two."""
    recorded = []
    for number, exercise in enumerate(workshop.exercises, 1):
        if any(run.step_clicks for run in exercise.runs):
            continue
        for index, run in enumerate(exercise.runs, 1):
            name = exercise.id if len(exercise.runs) == 1 else f"{exercise.id}-{index}"
            drafter = f", Drafter {run.drafter}" if run.drafter else ""
            title = f"{number}. {run.example} ({settings_text(run.settings)}{drafter})"
            recorded.append(RecordedRun(exercise, run, TRACES_DIR / f"{name}.json", title))
    return recorded


def recorded_line(recorded: list[RecordedRun]) -> str:
    """The guide's pointer to an exercise's recordings (the Replay tab; ``app.py --replay-only``)."""
    names = ", ".join(f"*{item.title}*" for item in recorded)
    files = ", ".join(f"`{item.path.relative_to(ROOT)}`" for item in recorded)
    return f"**Recorded**: the **Replay** tab has {'this run' if len(recorded) == 1 else 'these runs'}: {names} ({files})."


def render_guide(workshop: Workshop) -> str:
    """docs/workshop.md."""
    lines = [f"# {workshop.title}", "",
             "<!-- Generated from assets/workshop.json by `python -m pacer_core.ui.workshop`; edit that file. "
             "tests/test_workshop.py replays every exercise and checks this file is up to date. -->", ""]
    for paragraph in workshop.intro:
        lines += [paragraph, ""]
    lines += ["| part | minutes |", "| --- | --- |", f"| Setup | {SETUP_MINUTES} |"]
    lines += [f"| {number}. {exercise.title} | {exercise.minutes} |"
              for number, exercise in enumerate(workshop.exercises, 1)]
    lines += [f"| Wrap-up | {WRAP_UP_MINUTES} |", f"| **Total** | **{workshop.minutes}** |", ""]
    lines += [f"## Setup ({SETUP_MINUTES} minutes)", ""]
    for paragraph in workshop.setup:
        lines += [paragraph, ""]
    for number, exercise in enumerate(workshop.exercises, 1):
        lines += [f"## {number}. {exercise.title} ({exercise.minutes} minutes)", ""]
        if len(exercise.runs) == 1:
            lines += [f"**Do**: {exercise.runs[0].describe()}.", ""]
        else:
            lines += ["**Do**:", ""] + [f"{step}. {run.describe()}." for step, run in enumerate(exercise.runs, 1)]
            lines += [""]
        recorded = [item for item in recorded_runs(workshop) if item.exercise is exercise]
        if recorded:
            lines += [recorded_line(recorded), ""]
        lines += [f"**Look at**: {exercise.look_at}", "", f"**Ask the class**: {exercise.question}", "",
                  f"**Answer**: {exercise.answer}", "",
                  f"*What the replay test checks* (`tests/test_workshop.py`): {exercise.check}", ""]
    lines += [f"## Wrap-up ({WRAP_UP_MINUTES} minutes)", ""]
    for paragraph in workshop.wrap_up:
        lines += [paragraph, ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Render docs/workshop.md from assets/workshop.json.")
    parser.add_argument("--check", action="store_true", help="exit 1 when the guide differs from the rendering")
    args = parser.parse_args(argv)
    rendered = render_guide(load_workshop())
    current = GUIDE_PATH.read_text(encoding="utf-8") if GUIDE_PATH.exists() else ""
    if args.check:
        if current != rendered:
            print(f"{GUIDE_PATH} is out of date: run python -m pacer_core.ui.workshop", file=sys.stderr)
            return 1
        return 0
    GUIDE_PATH.write_text(rendered, encoding="utf-8")
    print(f"wrote {GUIDE_PATH} ({rendered.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
