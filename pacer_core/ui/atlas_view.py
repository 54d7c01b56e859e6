"""The Atlas tab's renderers, pure: an ``atlas.json`` dictionary (``pacer_core.atlas.report``) in, plotly
figures, pandas tables and escaped HTML out. No model, no Gradio.

With a comparison (``atlas["compare"]``) every figure shows both drafters side by side. Every table starts with
the column ``prompt #`` (1-based), the row's way back to its prompt in the Live demo (``atlas_tab``)."""
from __future__ import annotations

import plotly.graph_objects as go
import pandas as pd

from .escape import escape_text, hover_escape, plain_visible
from .plots_calibration import diagonal_figure
from .plots_style import ACCEPTED, REJECTED, empty_figure, styled

DRAFTER_COLOURS = ("#0072B2", "#E69F00")
PROMPT_COLUMN = "prompt #"


def drafter_atlases(atlas: dict | None) -> list[dict]:
    """The atlas of each drafter shown: the first, and the compared one if any."""
    if not atlas:
        return []
    return [atlas] + ([atlas["compare"]] if atlas.get("compare") else [])


def percent(value) -> str:
    return "–" if value is None else f"{value:.0%}"


def breakdown_figure(atlas: dict | None, field: str, key: str, title: str, x_title: str) -> go.Figure:
    """Bars of accepted / drafted (judged tokens) per value of ``key`` in ``atlas[field]``, one colour per drafter."""
    fig = go.Figure()
    for side, colour in zip(drafter_atlases(atlas), DRAFTER_COLOURS):
        rows = side[field]
        if not rows:
            continue
        fig.add_trace(go.Bar(x=[str(row[key]) for row in rows], y=[row["alpha"] for row in rows], name=side["drafter"],
                             marker_color=colour, hoverinfo="text",
                             hovertext=[hover_escape(f"{side['drafter']}, {row[key]}: {row['accepted']} of "
                                                     f"{row['drafted']} judged drafts accepted "
                                                     f"({percent(row['alpha'])})") for row in rows]))
    if not fig.data:
        return empty_figure(title, "Run the atlas to fill this plot.")
    return styled(fig, title, x_title, "accepted", layout={"barmode": "group", "xaxis": {"type": "category"},
                                                             "yaxis": {"range": [0, 1.05], "tickformat": ".0%"}})


def position_figure(atlas: dict | None) -> go.Figure:
    return breakdown_figure(atlas, "by_position", "position", "Acceptance by draft position (given the ones before)",
                            "position in the draft")


def kind_figure(atlas: dict | None) -> go.Figure:
    return breakdown_figure(atlas, "by_token_kind", "kind", "Acceptance by kind of drafted token", "")


def category_figure(atlas: dict | None) -> go.Figure:
    return breakdown_figure(atlas, "by_category", "category", "Acceptance by prompt category", "")


def binned_acceptance_figure(atlas: dict | None, field: str, estimate: str, title: str, empty: str,
                             diagonal: str, x_title: str, binned_as: str) -> go.Figure:
    """Per bin of an estimate of acceptance (``atlas[field]`` rows, mean estimate in ``estimate``), the fraction of
    those judged drafts accepted, one line per drafter against the diagonal of a calibrated estimate."""
    sides = [side for side in drafter_atlases(atlas) if side.get(field)]
    if not sides:
        return empty_figure(title, empty)
    fig = diagonal_figure(diagonal)
    for side, colour in zip(sides, DRAFTER_COLOURS):
        bins = side[field]
        fig.add_trace(go.Scatter(x=[b[estimate] for b in bins], y=[b["alpha"] for b in bins], mode="lines+markers",
                                 name=side["drafter"], line={"color": colour}, hoverinfo="text",
                                 marker={"size": [6 + min(14, b["drafted"] ** 0.5) for b in bins]},
                                 hovertext=[hover_escape(f"{side['drafter']}: {b['drafted']} drafts {binned_as} "
                                                         f"{b['low']:.1f}–{b['high']:.1f}, "
                                                         f"{percent(b['alpha'])} accepted") for b in bins]))
    return styled(fig, title, x_title, "accepted", layout={"xaxis": {"range": [0, 1.02]}, "yaxis": {"range": [0, 1.05]}})


def calibration_figure(atlas: dict | None) -> go.Figure:
    """The drafter's calibration: its mean confidence q per bin against the fraction of those drafts accepted."""
    return binned_acceptance_figure(atlas, "calibration", "mean_q", "Drafter calibration: confidence q against acceptance",
                                    "Run the atlas to fill this plot.", "accepted as often as q says",
                                    "drafter's q (mean in bin)", "with q in")


def preverifier_figure(atlas: dict | None) -> go.Figure:
    """PACER's pre-verifier: its mean acceptance estimate per bin against the fraction of those drafts accepted."""
    return binned_acceptance_figure(atlas, "by_preverifier_score", "mean_score",
                                    "Acceptance by the pre-verifier's estimate (PACER)",
                                    "Run the atlas with PACER to fill this plot.", "accepted as often as estimated",
                                    "pre-verifier's estimate (mean in bin)", "scored")


def prompts_figure(atlas: dict | None) -> go.Figure:
    """τ against α, one point per prompt and drafter (hover: the prompt and its numbers)."""
    title = "Per prompt: tokens per target pass (τ) against acceptance (α)"
    sides = [side for side in drafter_atlases(atlas) if side["per_prompt"]]
    if not sides:
        return empty_figure(title, "Run the atlas to fill this plot.")
    fig = go.Figure()
    for side, colour in zip(sides, DRAFTER_COLOURS):
        rows = side["per_prompt"]
        fig.add_trace(go.Scatter(x=[row["alpha"] for row in rows], y=[row["tau"] for row in rows], mode="markers",
                                 name=side["drafter"], marker={"color": colour, "size": 9}, hoverinfo="text",
                                 hovertext=[hover_escape(f"#{row['index'] + 1} {row['category']}: {row['prompt'][:60]}"
                                                         f" · τ {row['tau']:.2f} · α {percent(row['alpha'])}")
                                            for row in rows]))
    return styled(fig, title, "α (accepted / drafted)", "τ", layout={"xaxis": {"tickformat": ".0%"}})


def token_text(text) -> str:
    """A token as a table shows it: spaces as ␣, invisible characters as markers (plain text)."""
    return "–" if text is None else plain_visible(str(text)).replace(" ", "␣")


def rounded(value, digits: int = 3):
    return None if value is None else round(value, digits)


def prompts_frame(atlas: dict | None) -> pd.DataFrame:
    """One row per prompt: category, prompt, τ, α, tokens, seconds, speedup (and the compared drafter's τ, α)."""
    columns = [PROMPT_COLUMN, "category", "prompt", "tau", "alpha", "tokens", "seconds", "speedup"]
    if not atlas:
        return pd.DataFrame([], columns=columns)
    rows = [{PROMPT_COLUMN: row["index"] + 1, "category": row["category"], "prompt": plain_visible(row["prompt"]),
             "tau": rounded(row["tau"]), "alpha": rounded(row["alpha"]), "tokens": row["tokens"],
             "seconds": rounded(row["seconds"], 2), "speedup": rounded(row["speedup"], 2)}
            for row in atlas["per_prompt"]]
    other = atlas.get("compare")
    if other:
        for row, second in zip(rows, other["per_prompt"]):
            row |= {f"tau ({other['drafter']})": rounded(second["tau"]), f"alpha ({other['drafter']})":
                    rounded(second["alpha"]), f"speedup ({other['drafter']})": rounded(second["speedup"], 2)}
    return pd.DataFrame(rows)


def rejected_tokens_frame(atlas: dict | None) -> pd.DataFrame:
    """The tokens most often rejected, one row per context kept with each: how often, where, and the target's."""
    columns = [PROMPT_COLUMN, "drafted", "rejected", "of judged", "left context", "target's token"]
    rows = [{PROMPT_COLUMN: context["prompt_index"] + 1, "drafted": token_text(row["drafted"]),
             "rejected": row["rejected"], "of judged": row["drafted_total"],
             "left context": "…" + plain_visible(context["context"]), "target's token": token_text(context["target"])}
            for row in (atlas or {}).get("most_rejected", []) for context in row["contexts"]]
    return pd.DataFrame(rows, columns=columns)


def confidently_wrong_frame(atlas: dict | None) -> pd.DataFrame:
    """The rejections the drafter was surest of."""
    columns = [PROMPT_COLUMN, "q", "left context", "drafted", "target's token", "position"]
    rows = [{PROMPT_COLUMN: row["prompt_index"] + 1, "q": rounded(row["draft_prob"]),
             "left context": "…" + plain_visible(row["context"]), "drafted": token_text(row["drafted"]),
             "target's token": token_text(row["target"]), "position": row["position"]}
            for row in (atlas or {}).get("confidently_wrong", [])]
    return pd.DataFrame(rows, columns=columns)


def disagreements_frame(atlas: dict | None) -> pd.DataFrame:
    """Two drafters: where one's draft was accepted and the other's not, for the same prefix."""
    other = (atlas or {}).get("compare")
    if not other:
        return pd.DataFrame([], columns=[PROMPT_COLUMN, "left context", "first", "second"])
    first, second = atlas["drafter"], other["drafter"]
    mark = {True: "✓ accepted", False: "✗ rejected"}
    rows = [{PROMPT_COLUMN: row["prompt_index"] + 1, "left context": "…" + plain_visible(row["context"]),
             first: f"{token_text(row['first'])} {mark[row['first_accepted']]}",
             second: f"{token_text(row['second'])} {mark[row['second_accepted']]}"}
            for row in other["agreement"]["examples"]]
    return pd.DataFrame(rows, columns=[PROMPT_COLUMN, "left context", first, second])


def summary_html(atlas: dict | None) -> str:
    """One line per drafter: α, τ, speedup, prompts; with a comparison, how their verdicts agree."""
    if not atlas:
        return '<div class="atlas-summary">No atlas yet.</div>'
    lines = [f"<b>{escape_text(side['method'])} drafted by {escape_text(side['drafter'])}</b>: α "
             f"{percent(side['alpha'])} ({side['accepted']} of {side['drafted']} drafted tokens accepted), τ "
             f"{_number(side['tau'])}, speedup over AR {_number(side['speedup'], 'x')} · {side['prompts']} of "
             f"{side['prompt_total']} prompts" for side in drafter_atlases(atlas)]
    if atlas.get("compare"):
        agreement, second = atlas["compare"]["agreement"], atlas["compare"]["drafter"]
        lines.append(f"Same prefix, both drafted: {agreement['compared']} places; both accepted {agreement['both']}, "
                     f"only {escape_text(atlas['drafter'])} {agreement['only_first']}, only {escape_text(second)} "
                     f"{agreement['only_second']}, neither {agreement['neither']}.")
    return '<div class="atlas-summary">' + "<br>".join(lines) + "</div>"


def _number(value, unit: str = "") -> str:
    return "not measured" if value is None else f"{value:.2f}{unit}"


def progress_html(done: int, total: int, message: str, state: str = "busy") -> str:
    """A progress bar with its line: ``state`` busy, done, stopped or error."""
    bar = f'<progress value="{int(done)}" max="{max(1, int(total))}" style="width: 100%; height: 10px;"></progress>'
    return f'<div class="run-status run-{escape_text(state)}">{bar}<div>{escape_text(message)}</div></div>'


def rejection_legend() -> str:
    marks = (f'<span style="color: {ACCEPTED}">✓ accepted</span> · '
             f'<span style="color: {REJECTED}">✗ rejected</span>.')
    return marks + " Choose a row to open its prompt in the Live demo with the atlas's settings."
