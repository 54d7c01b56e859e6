"""The pre-verification layer: shapes, save/load, automatic loading for a pair, and exactness of PACER
with a trained layer in the loop (greedy identity). Under sampling, in submit mode, a pre-verifier only
decides where drafting stops, from the draft's own state: a stopping rule that reads only the drafted tokens
leaves speculative sampling exact, so PACER's sampling chi-square test (tests/test_exactness.py, heuristic
rule) covers a trained layer too and no second one runs here."""
import torch

from pacer_core import Autoregressive, Pacer, generate, validate_settings
from pacer_core.preverifier import ConfidencePreVerifier, default_preverifier, token_features
from pacer_core.preverifier import model as preverifier_model
from pacer_core.preverifier.model import PreVerifierLayer, TrainedPreVerifier, load, pair_slug, save
from pacer_core.training.preverifier import reliability, roc_auc
from pacer_core.testing.tiny import tiny_pair


def random_trained(hidden_size: int, seed: int = 0, threshold: float = 0.5) -> TrainedPreVerifier:
    torch.manual_seed(seed)
    layer = PreVerifierLayer(hidden_size)
    config = {"hidden_size": hidden_size, "projection": layer.projection, "width": layer.width,
              "threshold_greedy": threshold, "threshold_sampling": threshold}
    return TrainedPreVerifier(layer, config)


def test_layer_scores_a_block():
    features = [token_features(torch.randn(50), torch.randn(16), 3, position) for position in range(3)]
    trained = random_trained(16)
    score, token_probs = trained.score_block(features)
    assert len(token_probs) == 3 and all(0 < p < 1 for p in token_probs)
    assert abs(score - token_probs[0] * token_probs[1] * token_probs[2]) < 1e-9


def test_save_load_roundtrip_and_automatic_loading(tmp_path, monkeypatch):
    pair = tiny_pair(scale=6.0)
    trained = random_trained(pair.draft.config.hidden_size, threshold=0.42)
    directory = tmp_path / pair_slug(pair.target_id, pair.draft_id)
    save(directory, trained.layer, trained.config)
    loaded = load(directory)
    hidden, scalars = torch.randn(4, 32), torch.rand(4, 5)
    assert torch.allclose(loaded.layer(hidden, scalars), trained.layer(hidden, scalars))
    monkeypatch.setattr(preverifier_model, "search_dirs", lambda: [tmp_path])
    chosen = default_preverifier(pair)
    assert chosen.kind == "trained" and chosen.threshold_for(0.0) == 0.42
    result = generate(pair, "pacer", "t1 t2", max_new_tokens=8)
    assert result.info["preverifier"] == "trained"


def test_without_a_trained_layer_pacer_says_heuristic(tmp_path, monkeypatch):
    monkeypatch.setattr(preverifier_model, "search_dirs", lambda: [tmp_path])
    pair = tiny_pair(scale=6.0)
    assert isinstance(default_preverifier(pair), ConfidencePreVerifier)
    assert generate(pair, "pacer", "t1 t2", max_new_tokens=8).info["preverifier"] == "heuristic"


def test_greedy_pacer_with_trained_layer_equals_ar():
    pair = tiny_pair(scale=6.0, draft_noise=0.2)
    for seed, threshold in ((0, 0.1), (1, 0.5), (2, 0.9)):
        trained = random_trained(pair.draft.config.hidden_size, seed, threshold)
        for prompt in ([1, 2, 3], [9, 8], list(range(12))):
            settings = validate_settings(max_new_tokens=30)
            *_, reference = Autoregressive().run(pair, prompt, settings)
            *_, ours = Pacer(2, 10, None, trained).run(pair, prompt, settings)
            assert ours.token_ids == reference.token_ids


def test_roc_auc_and_reliability_helpers():
    labels = torch.tensor([0.0, 0.0, 1.0, 1.0])
    assert roc_auc(torch.tensor([0.1, 0.2, 0.8, 0.9]), labels) == 1.0
    assert roc_auc(torch.tensor([0.9, 0.8, 0.2, 0.1]), labels) == 0.0
    assert roc_auc(torch.tensor([0.5, 0.5, 0.5, 0.5]), labels) == 0.5
    table = reliability(torch.tensor([0.05, 0.15, 0.95, 0.99]), labels)
    assert sum(row["count"] for row in table) == 4


def test_shipped_block_size_applies_unless_chosen():
    pair = tiny_pair(scale=6.0)
    trained = random_trained(pair.draft.config.hidden_size)
    trained.config["block_size"] = 1
    result = generate(pair, "pacer", "t1 t2", preverifier=trained, max_new_tokens=12)
    assert result.settings["block_size"] == 1
    chosen = generate(pair, "pacer", "t1 t2", preverifier=trained, max_new_tokens=12, block_size=3)
    assert chosen.settings["block_size"] == 3 and chosen.token_ids == result.token_ids  # greedy: both exact
