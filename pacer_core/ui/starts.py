"""Where the page's drafter-dependent controls start for a drafter: its measured fixed length, PACER and SMC-SD
settings (the draft folder's ``measured_defaults.json``), else the pre-verifier's block size and threshold and the
app's defaults. One function for the page (``layout``: the Settings accordion and the Drafter choice) and the
workshop guide (``workshop.starting_settings``, which replays the page); no gradio here."""
from __future__ import annotations

from ..drafters import method_starts
from ..preverifier import ConfidencePreVerifier, own_threshold
from ..settings import FIELD_BY_NAME


def default_threshold(preverifier, temperature: float) -> float:
    """Where the threshold slider starts: the pre-verifier's own (the confidence rule's without one)."""
    return own_threshold(preverifier if preverifier is not None else ConfidencePreVerifier(), temperature)


DRAFTER_STARTS = ("gamma", "threshold", "block_size", "max_draft_len", "stop_rule", "phrase_len", "n_particles",
                  "draft_len")   # the controls a drafter choice resets to that drafter's measured starting values


def drafter_starts(target, drafter, preverifier, key: str) -> dict:
    """Where the drafter-dependent controls start for ``key``: its measured fixed length, PACER and SMC-SD
    settings (``measured_defaults.json``), else the pre-verifier's block size and the app's defaults."""
    fixed, pacer, smc = (method_starts(target, drafter, method, key) for method in ("fixed", "pacer", "smc"))
    field_start = lambda name: FIELD_BY_NAME[name].app_value or FIELD_BY_NAME[name].default  # noqa: E731
    return {"gamma": fixed.get("gamma") or field_start("gamma"),
            "threshold": pacer.get("threshold", round(default_threshold(preverifier, 0.7), 2)),
            "block_size": (pacer.get("block_size") or getattr(preverifier, "config", {}).get("block_size")
                           or field_start("block_size")),
            "max_draft_len": pacer.get("max_draft_len", field_start("max_draft_len")),
            "stop_rule": pacer.get("stop_rule", field_start("stop_rule")),
            "phrase_len": pacer.get("phrase_len", field_start("phrase_len")),
            "n_particles": smc.get("n_particles", field_start("n_particles")),
            "draft_len": smc.get("draft_len", field_start("draft_len")),
            "own_threshold": "threshold" not in pacer}     # a measured threshold is used, not the rule's own
