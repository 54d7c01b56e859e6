"""PACER's pre-verification: per-token features the draft already computed, and the layer (or the
confidence rule standing in for it) that scores a drafted block."""
from .features import TokenFeatures, token_features
from .heuristic import ConfidencePreVerifier

__all__ = ["TokenFeatures", "token_features", "ConfidencePreVerifier", "chosen_preverifier", "confidence_rule",
           "default_preverifier", "own_threshold"]


def confidence_rule(target, drafter) -> ConfidencePreVerifier:
    """The confidence rule with the threshold measured for ``drafter`` on this pair (its measured_defaults.json
    entry's ``confidence_threshold``), else the rule's own."""
    from ..drafters import drafter_key, measured_drafter

    try:
        measured = measured_drafter(target, drafter, drafter_key(drafter)).get("confidence_threshold")
    except AttributeError:      # a drafter without a key (a test's stand-in)
        measured = None
    return ConfidencePreVerifier(float(measured)) if isinstance(measured, (int, float)) else ConfidencePreVerifier()


def default_preverifier(target, drafter):
    """The trained layer shipped for this pair's target and ``drafter`` when one exists, else the confidence rule."""
    from .model import load_for_pair

    trained = load_for_pair(target, drafter)
    return trained if trained is not None else confidence_rule(target, drafter)


def chosen_preverifier(target, drafter, available, choice: str):
    """The pre-verifier a run drafting with ``drafter`` uses: ``available`` (the drafter's default, or one given)
    unless the run chose the confidence rule (setting ``preverifier_choice``) while a trained layer is available."""
    if choice == "confidence" and getattr(available, "kind", None) == "trained":
        return confidence_rule(target, drafter)
    return available


def own_threshold(preverifier, temperature: float) -> float:
    """The threshold a pre-verifier brings for this temperature: a trained layer's tuned one (greedy or
    sampling), else its fixed default."""
    if hasattr(preverifier, "threshold_for"):
        return float(preverifier.threshold_for(temperature))
    return float(preverifier.default_threshold)
