"""The pre-verification layer: shapes, save/load, automatic loading for a pair, and exactness of PACER
with a trained layer in the loop (greedy identity). Under sampling, in submit mode, a pre-verifier only
decides where drafting stops, from the draft's own state: a stopping rule that reads only the drafted tokens
leaves speculative sampling exact; tests/test_exactness.py runs PACER's sampling chi-square test with the
confidence rule and with a trained layer for sampled tokens."""
import itertools
import math

import pytest
import torch

from pacer_core import Autoregressive, Pacer, generate, validate_settings
from pacer_core.preverifier import ConfidencePreVerifier, default_preverifier, token_features
from pacer_core.preverifier.features import DraftContext, history_context
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
    target, drafter = tiny_pair(scale=6.0)
    trained = random_trained(drafter.model.config.hidden_size, threshold=0.42)
    directory = tmp_path / pair_slug(target.name, drafter.name)
    save(directory, trained.layer, trained.config)
    loaded = load(directory)
    hidden, scalars = torch.randn(4, 32), torch.rand(4, 5)
    assert torch.allclose(loaded.layer(hidden, scalars), trained.layer(hidden, scalars))
    monkeypatch.setattr(preverifier_model, "search_dirs", lambda: [tmp_path])
    chosen = default_preverifier(target, drafter)
    assert chosen.kind == "trained" and chosen.threshold_for(0.0) == 0.42
    result = generate(target, drafter, "pacer", "t1 t2", max_new_tokens=8)
    assert result.info["preverifier"] == "trained"


def test_without_a_trained_layer_pacer_says_heuristic(tmp_path, monkeypatch):
    monkeypatch.setattr(preverifier_model, "search_dirs", lambda: [tmp_path])
    target, drafter = tiny_pair(scale=6.0)
    assert isinstance(default_preverifier(target, drafter), ConfidencePreVerifier)
    assert generate(target, drafter, "pacer", "t1 t2", max_new_tokens=8).info["preverifier"] == "heuristic"


def test_greedy_pacer_with_trained_layer_equals_ar():
    target, drafter = tiny_pair(scale=6.0, draft_noise=0.2)
    for seed, threshold in ((0, 0.1), (1, 0.5), (2, 0.9)):
        trained = random_trained(drafter.model.config.hidden_size, seed, threshold)
        for prompt in ([1, 2, 3], [9, 8], list(range(12))):
            settings = validate_settings(max_new_tokens=30)
            *_, reference = Autoregressive().run(target, drafter, prompt, settings)
            *_, ours = Pacer(2, 10, None, trained).run(target, drafter, prompt, settings)
            assert ours.token_ids == reference.token_ids


def test_roc_auc_and_reliability_helpers():
    labels = torch.tensor([0.0, 0.0, 1.0, 1.0])
    assert roc_auc(torch.tensor([0.1, 0.2, 0.8, 0.9]), labels) == 1.0
    assert roc_auc(torch.tensor([0.9, 0.8, 0.2, 0.1]), labels) == 0.0
    assert roc_auc(torch.tensor([0.5, 0.5, 0.5, 0.5]), labels) == 0.5
    table = reliability(torch.tensor([0.05, 0.15, 0.95, 0.99]), labels)
    assert sum(row["count"] for row in table) == 4


def test_shipped_block_size_applies_unless_chosen():
    target, drafter = tiny_pair(scale=6.0)
    trained = random_trained(drafter.model.config.hidden_size)
    trained.config["block_size"] = 1
    result = generate(target, drafter, "pacer", "t1 t2", preverifier=trained, max_new_tokens=12)
    assert result.settings["block_size"] == 1
    chosen = generate(target, drafter, "pacer", "t1 t2", preverifier=trained, max_new_tokens=12, block_size=3)
    assert chosen.settings["block_size"] == 3 and chosen.token_ids == result.token_ids  # greedy: both exact


def history_trained(hidden_size: int, seed: int = 0, threshold: float = 0.5) -> TrainedPreVerifier:
    torch.manual_seed(seed)
    layer = PreVerifierLayer(hidden_size, scalar_count=8)
    config = {"hidden_size": hidden_size, "projection": layer.projection, "width": layer.width,
              "scalar_count": 8, "threshold_greedy": threshold, "threshold_sampling": threshold}
    return TrainedPreVerifier(layer, config)


def test_draft_context_counts_the_generations_first_tokens():
    assert history_context(0, 0, None) == DraftContext(0.5, 0.5, 0.0)
    context = history_context(4, 3, False)
    assert context.history_rate == (3 + 1) / (4 + 2) and context.last_accepted == 0.0
    following = context.after(0.5).after(0.25)
    assert abs(following.prefix_log_prob - math.log(0.125)) < 1e-9
    assert following.history_rate == context.history_rate and following.last_accepted == 0.0


def test_history_inputs_change_the_score_and_survive_save_load(tmp_path):
    trained = history_trained(16, seed=3)
    hidden, logits = torch.randn(16), torch.randn(50)
    early = token_features(logits, hidden, 3, 0, history_context(0, 0, None))
    late = token_features(logits, hidden, 3, 0, history_context(20, 2, False))
    assert trained.token_probs([early]) != trained.token_probs([late])
    save(tmp_path, trained.layer, trained.config)
    assert load(tmp_path).token_probs([late]) == trained.token_probs([late])


class RecordingContexts(ConfidencePreVerifier):
    """The confidence rule, keeping the context PACER gave each block's first token."""

    def __init__(self):
        self.seen = []

    def score_block(self, block):
        self.seen.append((block[0].position, block[0].context))
        return super().score_block(block)


def test_pacer_gives_the_preverifier_this_generations_history():
    target, drafter = tiny_pair(scale=6.0, draft_noise=0.4)
    recorder = RecordingContexts()
    *events, result = Pacer(1, 6, 0.05, recorder).run(target, drafter, [1, 2, 3], validate_settings(max_new_tokens=40))
    firsts = [context for position, context in recorder.seen if position == 0]
    assert len(firsts) == len(events)
    verified = accepted = 0
    last = None
    for event, context in zip(events, firsts):
        assert context == history_context(verified, accepted, last)
        verified, accepted, last = verified + 1, accepted + int(event.n_accepted > 0), event.n_accepted > 0
    assert 0 < accepted < verified   # the run saw both verdicts, so the history moved both ways
    later = [context for position, context in recorder.seen if position > 0]
    assert later and all(context.prefix_log_prob < 0 for context in later)


def test_greedy_pacer_with_history_layer_equals_ar():
    target, drafter = tiny_pair(scale=6.0, draft_noise=0.2)
    for seed, threshold in ((0, 0.2), (1, 0.6)):
        trained = history_trained(drafter.model.config.hidden_size, seed, threshold)
        for prompt in ([1, 2, 3], list(range(12))):
            settings = validate_settings(max_new_tokens=30)
            *_, reference = Autoregressive().run(target, drafter, prompt, settings)
            *_, ours = Pacer(1, 10, None, trained).run(target, drafter, prompt, settings)
            assert ours.token_ids == reference.token_ids


def test_fit_compares_both_inputs_with_the_confidence_rule(tmp_path):
    from argparse import Namespace

    from pacer_core.training.preverifier import fit

    generator = torch.Generator().manual_seed(0)
    rows = []
    for prompt_index in range(30):
        rate = 0.2 + 0.6 * (prompt_index % 2)              # half the prompts accept far more often
        for step in range(12):
            draft_prob = float(torch.rand((), generator=generator))
            label = int(float(torch.rand((), generator=generator)) < 0.5 * draft_prob + 0.5 * rate)
            rows.append({"hidden": torch.randn(8, generator=generator).half(), "draft_prob": draft_prob,
                         "entropy": 1.0, "margin": draft_prob / 2, "position": 0, "label": label,
                         "prefix_ok": True, "soft": float(label), "history_rate": (rate * step + 1) / (step + 2),
                         "last_accepted": 0.5, "prefix_log_prob": 0.0, "prompt_index": prompt_index})
    torch.save({"prompts": [f"p{i}" for i in range(30)], "rows": rows}, tmp_path / "data.pt")
    metrics = fit(None, Namespace(work=str(tmp_path), seed=0, epochs=8, features="history"))["metrics"]
    assert metrics["features"] == "history" and set(metrics["compared_inputs"]) == {"basic", "history"}
    assert 0.0 <= metrics["roc_auc_confidence_rule"] <= 1.0
    assert all(0.0 <= figures["brier"] <= 1.0 for figures in metrics["compared_inputs"].values())
    assert (tmp_path / "layer.pt").exists()


@pytest.mark.pure
def test_the_confidence_rule_scores_sampled_tokens_by_the_generations_acceptance():
    from pacer_core.preverifier.features import DraftContext, TokenFeatures
    context = DraftContext(history_rate=0.9)
    greedy = TokenFeatures(torch.zeros(1), 0.2, 1.0, 0.1, 0, context)
    sampled = TokenFeatures(torch.zeros(1), 0.2, 1.0, 0.1, 1, context, sampled=True)
    score, token_probs = ConfidencePreVerifier().score_block([greedy, sampled])
    assert token_probs == [0.2, 0.9] and score == pytest.approx(0.18)


def scalar_trained(seed: int = 0, threshold: float = 0.5, sampling_threshold: float | None = None) -> TrainedPreVerifier:
    """A layer as llama.cpp drafters get (no hidden states: the scalars only), with a layer for sampled tokens."""
    torch.manual_seed(seed)
    layer, sampling_layer = PreVerifierLayer(0, scalar_count=8), PreVerifierLayer(0, scalar_count=8)
    config = layer.shape() | {"threshold_greedy": threshold,
                              "threshold_sampling": threshold if sampling_threshold is None else sampling_threshold}
    return TrainedPreVerifier(layer, config, sampling_layer)


def test_a_scalar_layer_scores_sampled_tokens_with_its_sampling_layer_and_survives_save_load(tmp_path):
    trained = scalar_trained(seed=4)
    logits, no_hidden = torch.randn(50), torch.zeros(0)
    greedy = [token_features(logits, no_hidden, 3, position) for position in range(2)]
    sampled = [token_features(logits, no_hidden, 3, position, sampled=True) for position in range(2)]
    assert trained.token_probs(greedy) != trained.token_probs(sampled)
    with torch.no_grad():
        for layer in (trained.layer, trained.sampling_layer):
            layer.mlp[-1].bias.fill_(0.0)
        trained.sampling_layer.mlp[-1].bias.fill_(30.0)      # the sampling layer says "accepted" whatever it reads
    assert all(prob > 0.999 for prob in trained.token_probs(sampled))
    save(tmp_path, trained.layer, trained.config, trained.sampling_layer)
    loaded = load(tmp_path)
    assert loaded.token_probs(sampled) == trained.token_probs(sampled)
    assert loaded.token_probs(greedy) == trained.token_probs(greedy)
    assert loaded.config["sampling_layer"]["hidden_size"] == 0


def test_greedy_pacer_with_a_scalar_layer_equals_ar():
    target, drafter = tiny_pair(scale=6.0, draft_noise=0.3)
    for seed, threshold in ((0, 0.2), (1, 0.5), (2, 0.8)):
        trained = scalar_trained(seed, threshold)
        for prompt in ([1, 2, 3], list(range(12))):
            settings = validate_settings(max_new_tokens=30)
            *_, reference = Autoregressive().run(target, drafter, prompt, settings)
            *events, ours = Pacer(1, 8, None, trained).run(target, drafter, prompt, settings)
            assert ours.token_ids == reference.token_ids
            assert ours.info["stopped_by"].startswith("the trained pre-verification layer")


def test_fit_trains_a_sampling_layer_on_acceptance_probabilities(tmp_path):
    """Sampled rows whose acceptance falls with the draft's entropy: the sampling layer learns it and scores
    better than the constant mean acceptance and the confidence rule on held-out prompts."""
    from argparse import Namespace

    from pacer_core.training.preverifier import fit, saved_layers

    generator, rows = torch.Generator().manual_seed(1), []
    for prompt_index in range(40):
        for step in range(20):
            entropy = 3.0 * float(torch.rand((), generator=generator))
            sampled = {"hidden": torch.zeros(0).half(), "draft_prob": 0.5, "entropy": entropy, "margin": 0.2,
                       "position": step % 4, "label": 1.0 - 0.2 * entropy, "prefix_ok": True, "sampled": True,
                       "soft": 1.0 - 0.2 * entropy, "history_rate": 0.7, "last_accepted": 1.0,
                       "prefix_log_prob": 0.0, "prompt_index": prompt_index}
            greedy = sampled | {"sampled": False, "label": int(float(torch.rand((), generator=generator)) < 0.9)}
            rows += [sampled, greedy]
    torch.save({"prompts": [f"p{i}" for i in range(40)], "rows": rows}, tmp_path / "data.pt")
    saved = fit(None, Namespace(work=str(tmp_path), seed=0, epochs=20, features="auto", sampling_temperature=0.7))
    sampled_metrics = saved["sampling_metrics"]
    assert sampled_metrics["brier"] < 0.5 * sampled_metrics["brier_constant_mean"]
    assert sampled_metrics["brier"] < sampled_metrics["brier_confidence_rule"]
    layer, sampling_layer = saved_layers(saved)
    assert layer.hidden_size == 0 and sampling_layer is not None


def test_a_run_that_chooses_the_confidence_rule_gets_it_though_a_layer_exists():
    from pacer_core.request import build_request

    target, drafter = tiny_pair(scale=6.0)
    trained = scalar_trained()
    assert build_request(target, drafter, "pacer", "t1 t2", {}, preverifier=trained).preverifier is trained
    chosen = build_request(target, drafter, "pacer", "t1 t2", {"preverifier_choice": "confidence"}, preverifier=trained)
    assert isinstance(chosen.preverifier, ConfidencePreVerifier)
    assert chosen.settings.threshold == ConfidencePreVerifier().default_threshold


def test_auto_samples_with_the_cost_rule_priced_by_a_layer_trained_for_sampled_tokens():
    from pacer_core.decoders.pacer import block_acceptance, effective_stop_rule, stop_rule_summary, trained_for_sampling
    from pacer_core.stopping import AcceptanceByEntropy, PacerCostModel

    sampling = validate_settings(stop_rule="auto", temperature=0.7)
    for preverifier in (ConfidencePreVerifier(), random_trained(16), scalar_trained()):
        assert effective_stop_rule(sampling, preverifier) == "cost"
    assert effective_stop_rule(validate_settings(stop_rule="auto"), scalar_trained()) == "cost"
    assert effective_stop_rule(validate_settings(stop_rule="threshold"), scalar_trained()) == "threshold"
    model = PacerCostModel(acceptance=AcceptanceByEntropy((10.0,), (0.5,)))
    sampled = [token_features(torch.randn(50), torch.zeros(0), 3, 0, sampled=True)]
    rows = [torch.softmax(torch.randn(50), -1)]
    assert block_acceptance(model, sampled, rows, [0.9], trained_for_sampling(scalar_trained())) == [0.9]
    assert block_acceptance(model, sampled, rows, [0.9], trained_for_sampling(random_trained(16))) == [0.5]
    assert "the trained layer's acceptance estimates" in stop_rule_summary(scalar_trained(), sampling, 0.7)
    assert "entropy" in stop_rule_summary(ConfidencePreVerifier(), sampling, 0.3)


def test_softmax_summary_matches_the_softmax_it_does_not_build():
    """q(x), H(q) and the top-1 − top-2 margin from a few passes over the logits (numpy's on the CPU, torch's
    elsewhere) equal those of softmax, top-2 and −Σ q log q, masked (−inf) ids included, on a draft-sized vocabulary
    and a tiny one."""
    from pacer_core.preverifier.features import _torch_softmax_summary, softmax_summary

    generator = torch.Generator().manual_seed(0)
    masked = torch.randn(64, generator=generator) * 4
    masked[[5, 17]] = float("-inf")
    for logits in (torch.randn(49152, generator=generator) * 3, masked, torch.zeros(4), torch.tensor([2.0, -1.0])):
        probs = torch.softmax(logits.double(), dim=-1)
        top_two = torch.topk(probs, 2).values
        entropy = float(-(probs * torch.log(probs.clamp_min(1e-300))).sum())
        for chosen_id, summary in itertools.product((0, 1, len(logits) - 1), (softmax_summary, _torch_softmax_summary)):
            draft_prob, summary_entropy, margin = summary(logits, chosen_id)
            assert math.isclose(draft_prob, float(probs[chosen_id]), rel_tol=1e-5, abs_tol=1e-9)
            assert math.isclose(summary_entropy, entropy, rel_tol=1e-5, abs_tol=1e-6)
            assert math.isclose(margin, float(top_two[0] - top_two[1]), rel_tol=1e-5, abs_tol=1e-7)


@pytest.mark.parametrize("scalar_count", [5, 8])
def test_a_scalar_layer_scored_in_plain_python_equals_the_torch_module(scalar_count):
    """``scalar_layer_probs`` (the path a llama.cpp drafter's tokens take) against the module it stands in for, on
    random weights and features, including a re-read after the weights change in place."""
    from pacer_core.preverifier.model import block_scalars

    torch.manual_seed(scalar_count)
    layer = PreVerifierLayer(0, scalar_count=scalar_count)
    trained = TrainedPreVerifier(layer, layer.shape() | {"threshold_greedy": 0.5})
    block = [token_features(torch.randn(50) * 2, torch.zeros(0), token_id, position,
                            history_context(position + 3, position, position % 2 == 0))
             for position, token_id in enumerate((3, 7, 11))]
    for _ in range(2):
        with torch.no_grad():
            expected = torch.sigmoid(layer(torch.zeros(3, 0), block_scalars(block, scalar_count == 8))).tolist()
        assert trained.token_probs(block) == pytest.approx(expected, rel=1e-5, abs=1e-7)
        with torch.no_grad():
            layer.mlp[0].weight.mul_(3.0)


def test_greedy_pacer_shows_the_draft_probability_fixed_sd_shows():
    """Greedy, the q(x) a PACER token shows is read from its pre-verifier features (``DraftBuilder.draw_described``)
    instead of a second softmax: it equals the temperature-1 softmax's that fixed SD shows for the same draft."""
    from pacer_core.decoders.fixed import FixedSpeculative

    target, drafter = tiny_pair(scale=6.0, draft_noise=0.3)
    settings = validate_settings(max_new_tokens=20, gamma=4, block_size=1, max_draft_len=4, threshold=0.0, phrase_len=0)
    *fixed_events, _ = FixedSpeculative().run(target, drafter, [1, 2, 3], settings)
    *pacer_events, _ = Pacer(1, 4, None, scalar_trained(0, 0.0)).run(target, drafter, [1, 2, 3], settings)
    shown = lambda events: [token.draft_prob for event in events for token in event.tokens[: event.n_drafted]]  # noqa: E731
    assert len(shown(pacer_events)) == len(shown(fixed_events)) > 8
    assert shown(pacer_events) == pytest.approx(shown(fixed_events), rel=1e-5, abs=1e-7)
