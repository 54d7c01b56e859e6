"""The page's two reading tabs: Explain (the legend and explain.md) and the pre-verifier's calibration (how well
the trained layer for the page's drafter predicts acceptance on held-out tokens, beside the confidence rule)."""
from __future__ import annotations

import html

import gradio as gr

from . import page
from .plots_calibration import reliability_figure, roc_figure


def other_tabs(preverifier, explain_text: str) -> None:
    with gr.Tab("Explain", id="explain"):
        gr.HTML(page.legend_html())
        gr.Markdown(explain_text or "See the README.", elem_id="explain-text")
    with gr.Tab("Pre-verifier calibration", id="calibration"):
        config = getattr(preverifier, "config", {}) if preverifier else {}
        heldout, sampled = config.get("heldout_metrics"), config.get("sampling_heldout_metrics")
        gr.Markdown(calibration_text(config), elem_id="calibration-text")
        with gr.Row():
            gr.Plot(reliability_figure(heldout), elem_id="plot-reliability", show_label=False)
            gr.Plot(roc_figure(heldout), elem_id="plot-roc", show_label=False)
        if sampled:
            gr.Plot(reliability_figure(sampled, f"Sampled tokens (T = {sampled.get('temperature', 0.7)}): "
                                                      "estimate against acceptance probability", "mean acceptance"),
                    elem_id="plot-reliability-sampled", show_label=False)


def calibration_text(config: dict) -> str:
    """What the calibration tab shows, in words: whose layer, on which tokens, and how it compares."""
    heldout = config.get("heldout_metrics")
    if not heldout:
        return ("No trained pre-verification layer for the page's drafter: PACER uses the confidence rule "
                "(Settings → Pre-verifier), so there is nothing to calibrate here.")
    text = (f"How well PACER's trained pre-verification layer for **{html.escape(str(config.get('draft_id', '')))}** "
            f"predicts whether the target accepts a drafted token, on {heldout.get('heldout_tokens', 0):,} held-out "
            f"tokens from prompts never trained on. Greedy: ROC-AUC {heldout.get('roc_auc_greedy', 0):.3f} "
            f"(confidence rule {heldout.get('roc_auc_confidence_rule', 0):.3f}), Brier "
            f"{heldout.get('brier', 0):.4f} ({heldout.get('brier_confidence_rule', 0):.4f}).")
    sampled = config.get("sampling_heldout_metrics")
    if sampled:
        text += (f" Sampled tokens (T = {sampled.get('temperature')}): Brier {sampled['brier']:.5f} against "
                 f"{sampled['brier_constant_mean']:.5f} for the mean acceptance "
                 f"({sampled['heldout_mean_acceptance']:.3f}) and {sampled['brier_confidence_rule']:.5f} for the "
                 f"confidence rule: a drafter this close to its target leaves little to predict.")
    return text
