"""PACER's pre-verification: per-token features the draft already computed, and the layer (or the
confidence rule standing in for it) that scores a drafted block."""
from .features import TokenFeatures, token_features
from .heuristic import ConfidencePreVerifier

__all__ = ["TokenFeatures", "token_features", "ConfidencePreVerifier", "default_preverifier"]


def default_preverifier(pair):
    """The trained layer shipped for this pair when one exists, else the confidence rule."""
    from .model import load_for_pair

    trained = load_for_pair(pair)
    return trained if trained is not None else ConfidencePreVerifier()
