"""PACER's pre-verification: per-token features the draft already computed, and the layer (or the
confidence rule standing in for it) that scores a drafted block."""
from .features import TokenFeatures, token_features
from .heuristic import ConfidencePreVerifier

__all__ = ["TokenFeatures", "token_features", "ConfidencePreVerifier", "default_preverifier", "own_threshold"]


def default_preverifier(pair):
    """The trained layer shipped for this pair when one exists, else the confidence rule."""
    from .model import load_for_pair

    trained = load_for_pair(pair)
    return trained if trained is not None else ConfidencePreVerifier()


def own_threshold(preverifier, temperature: float) -> float:
    """The threshold a pre-verifier brings for this temperature: a trained layer's tuned one (greedy or
    sampling), else its fixed default."""
    if hasattr(preverifier, "threshold_for"):
        return float(preverifier.threshold_for(temperature))
    return float(preverifier.default_threshold)
