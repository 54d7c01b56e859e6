"""The page's fixed pieces: the colour legend, the model-pair status line and the run status line.
Model names, notes and messages are escaped like token text (a hub id or an error can hold markup)."""
from __future__ import annotations

from .escape import escape_attr, escape_text

LEGEND_ITEMS = (   # (CSS classes, label, hover hint); docs/algorithms.md#token-states-and-colours
    ("tok tok-drafted", "drafted", "drafted, not yet verified"),
    ("tok tok-accepted", "accepted", "accepted by the target"),
    ("tok tok-rejected", "rejected", "rejected by the target"),
    ("tok tok-accepted tok-stopped", "pre-verifier stop", "in the block PACER's pre-verifier failed"),
    ("tok tok-accepted tok-phrase", "phrase", "PACER: copied from the prompt or the output, no draft model call"),
    ("tok tok-corrected", "corrected / bonus", "the target's own token"),
    ("particle-chip particle-resampled-away", "resampled away", "SMC particle dropped"),
    ("particle-chip particle-duplicated", "duplicated", "SMC particle copied"),
)


LEGEND_HINT = ("Hover a token for q, p, acceptance probability and block score. Thin bars separate target forward "
               "passes.")


def legend_html(hint: bool = True) -> str:
    """The token colours; ``hint=False`` (the live tab, where each trace says it) leaves the hover hint out
    of the line and puts it in the legend's tooltip."""
    spans = "".join(f'<span class="legend-item" title="{escape_attr(hint)}"><span class="{cls}">{escape_text(label)}'
                    "</span></span>" for cls, label, hint in LEGEND_ITEMS)
    if not hint:
        return f'<div class="pacer-legend" title="{escape_attr(LEGEND_HINT)}">{spans}</div>'
    return f'<div class="pacer-legend">{spans}<span class="legend-hint">{escape_text(LEGEND_HINT)}</span></div>'


def drafter_text(describe: dict) -> str:
    """Which drafter runs, in words: a small model of its own, a head that reads the target, or the target's own
    weights (quantized here, or its GGUF file run by llama.cpp)."""
    drafter = describe.get("drafter") or {}
    if drafter.get("kind") == "feature-head":
        return (f"{describe.get('draft', '?')}: a 1-layer head that reads the target's hidden state "
                f"(proposes {drafter.get('kept_ids', 0):,} most frequent ids)")
    if drafter.get("kind") == "independent" and drafter.get("kept_ids"):
        return (f"{describe.get('draft', '?')}: a separate small model "
                f"(proposes its {drafter['kept_ids']:,} most frequent ids)")
    if drafter.get("kind") == "independent":
        return f"{describe.get('draft', '?')}: a separate small model"
    if drafter.get("kind") == "self-quantized":
        kept = f", proposes its {drafter['kept_ids']:,} most frequent ids" if drafter.get("kept_ids") else ""
        return (f"{describe.get('draft', '?')}: the target's own weights, int{drafter.get('bits', '?')} weight-only "
                f"({drafter.get('quantized_megabytes', 0):.0f} MB{kept})")
    if drafter.get("kind") == "gguf":
        kept = f", proposes its {drafter['kept_ids']:,} most frequent ids" if drafter.get("kept_ids") else ""
        return (f"gguf: the target's own GGUF run by llama.cpp ({str(drafter.get('dtype', '?')).split()[-1]}, "
                f"{drafter.get('file_megabytes', 0):.0f} MB, {drafter.get('threads', '?')} threads{kept})")
    return str(describe.get("draft", "?"))


def pair_status_html(describe: dict, preverifier_kind: str, note: str | None = None) -> str:
    """Model-pair status: names, device, dtype and which pre-verifier PACER uses."""
    trained = preverifier_kind == "trained"
    preverifier = ("trained pre-verifier layer" if trained else
                   "heuristic confidence rule (no trained pre-verifier for this pair)")
    items = [("Target", describe.get("target", "?")), ("Drafter", drafter_text(describe)),
             ("Device", describe.get("device", "?")), ("dtype", describe.get("dtype", "?")),
             ("PACER pre-verifier", preverifier)]
    on_llama = describe.get("target_engine", "torch").startswith("llama.cpp")
    if describe.get("linear_kernels", "default") != "default" and not on_llama:
        items.insert(4, ("Linear layers", describe["linear_kernels"]))
    if describe.get("target_engine"):
        items.insert(1, ("Target engine", describe["target_engine"]))
    parts = "".join(f'<span class="pair-item"><span class="pair-key">{escape_text(key)}</span> '
                    f'{escape_text(str(value))}</span>' for key, value in items)
    extra = f'<div class="col-note">{escape_text(note)}</div>' if note else ""
    return f'<div class="pair-status {"pv-trained" if trained else "pv-heuristic"}">{parts}{extra}</div>'


def run_status_html(message: str, kind: str = "info", drawn: str | None = None, charts_pending: bool = False) -> str:
    """The line under the legend: kind is info, busy, done or error (a CSS class run-<kind>). ``drawn``: a token the
    page acknowledges once it has drawn this frame (``ui/frames.py``); ``charts_pending``: a finished Run whose
    charts come in the next frame (style.css hides the last Run's charts until then)."""
    token = f' data-drawn="{escape_attr(drawn)}"' if drawn else ""
    token += ' data-charts="pending"' if charts_pending else ""
    return f'<div class="run-status run-{escape_attr(kind)}"{token}>{escape_text(message)}</div>'
