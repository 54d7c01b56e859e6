"""Collect pre-verifier training data for any pair and train the layer (docs/algorithms.md#pacer).

    python -m pacer_core.training.preverifier collect --prompts 120 --draft-len 12 --max-new-tokens 64
    python -m pacer_core.training.preverifier fit
    python -m pacer_core.training.preverifier threshold      # measured end-to-end speed per threshold
    python -m pacer_core.training.preverifier all            # the three above in order

Collection runs greedy speculative decoding with a FORCED draft length L: every step drafts L tokens
and the target verifies them in one pass, so every drafted token gets labels at once:
  greedy label  1 if the token equals the target's argmax (training uses tokens whose prefix matched,
                so the layer predicts P(accept | the tokens before were accepted));
  soft label    min(1, p_T(x) / q_T(x)) at --soft-temperature (the exact acceptance probability).
Contexts are the target's own greedy replies to chat instructions, so they are on-distribution. Collection is
``preverifier_data.py``; this module fits the layer, picks its thresholds and exports it."""
from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from pathlib import Path

import torch

from ..drafters import load_drafter
from ..models import ModelLoadError, load_target
from ..preverifier.model import (FEATURE_SPEC, HISTORY_FEATURE_SPEC, PreVerifierLayer, TrainedPreVerifier,
                                 layer_from_shape, pair_slug, save, scalar_features, search_dirs)
from ..prompts import load_prompts
from ..settings import SettingsError
from .preverifier_data import collect

WORK_DIR = Path("work/preverifier")


class CollectedDataError(Exception):
    """The collected data cannot train what was asked for (the message says how to mend it)."""


def tensors(rows: list[dict], with_history: bool = False) -> dict:
    history = ([r["history_rate"] for r in rows], [r["last_accepted"] for r in rows],
               [r["prefix_log_prob"] for r in rows]) if with_history else None
    return {"hidden": torch.stack([r["hidden"].float() for r in rows]),
            "scalars": scalar_features([r["draft_prob"] for r in rows], [r["entropy"] for r in rows],
                                       [r["margin"] for r in rows], [r["position"] for r in rows], history),
            "label": torch.tensor([float(r["label"]) for r in rows]),
            "soft": torch.tensor([float(r["soft"]) for r in rows])}


def split_rows(data: dict, heldout_fraction: float, seed: int):
    """Split by prompt, so held-out tokens come from prompts never trained on; only prefix-matched tokens."""
    prompt_count = len(data["prompts"])
    order = list(range(prompt_count))
    random.Random(seed).shuffle(order)
    heldout = set(order[: max(1, int(prompt_count * heldout_fraction))])
    usable = [row for row in data["rows"] if row["prefix_ok"]]
    return ([r for r in usable if r["prompt_index"] not in heldout], [r for r in usable if r["prompt_index"] in heldout])


def roc_auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """Probability that a random positive outranks a random negative (ties count half)."""
    positives, negatives = scores[labels > 0.5], scores[labels <= 0.5]
    if len(positives) == 0 or len(negatives) == 0:
        return float("nan")
    greater = (positives[:, None] > negatives[None, :]).float().mean()
    ties = (positives[:, None] == negatives[None, :]).float().mean()
    return float(greater + 0.5 * ties)


def reliability(probs: torch.Tensor, labels: torch.Tensor, bins: int = 10) -> list[dict]:
    table = []
    for low in range(bins):
        mask = (probs >= low / bins) & (probs < (low + 1) / bins if low < bins - 1 else probs <= 1.0)
        if mask.any():
            table.append({"bin_low": low / bins, "bin_high": (low + 1) / bins, "count": int(mask.sum()),
                          "mean_predicted": float(probs[mask].mean()), "fraction_accepted": float(labels[mask].mean())})
    return table


def roc_points(probs: torch.Tensor, labels: torch.Tensor, steps: int = 50) -> list[dict]:
    points = []
    for index in range(steps + 1):
        cut = index / steps
        predicted = probs >= cut
        true_positive = float((predicted & (labels > 0.5)).sum()) / max(1, int((labels > 0.5).sum()))
        false_positive = float((predicted & (labels <= 0.5)).sum()) / max(1, int((labels <= 0.5).sum()))
        points.append({"threshold": cut, "tpr": true_positive, "fpr": false_positive})
    return points


def brier_skill(probs: torch.Tensor, labels: torch.Tensor) -> float:
    """Minus the mean squared error: higher is better, as ``roc_auc`` (soft labels have no ranking to score)."""
    return -float(((probs - labels) ** 2).mean())


def train_layer(train: dict, validation: dict, epochs: int, seed: int,
                score=roc_auc) -> tuple[PreVerifierLayer, list[dict]]:
    """BCE on the labels (0/1 greedy, acceptance probabilities sampled); keeps the epoch with the best validation
    ``score`` (the hidden-state input over-fits after a few epochs on a few thousand tokens)."""
    torch.manual_seed(seed)
    layer = PreVerifierLayer(train["hidden"].shape[1], projection=8, scalar_count=train["scalars"].shape[1])
    optimiser = torch.optim.AdamW(layer.parameters(), lr=2e-3, weight_decay=1e-2)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    history, best_score, best_state = [], -math.inf, None
    for epoch in range(epochs):
        layer.train()
        order = torch.randperm(len(train["label"]))
        for start in range(0, len(order), 256):
            batch = order[start:start + 256]
            loss = loss_fn(layer(train["hidden"][batch], train["scalars"][batch]), train["label"][batch])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
        layer.eval()
        with torch.no_grad():
            validation_score = score(torch.sigmoid(layer(validation["hidden"], validation["scalars"])),
                                     validation["label"])
        history.append({"epoch": epoch, "train_loss": float(loss.detach()), "validation_score": validation_score})
        if validation_score > best_score:
            best_score, best_state = validation_score, {k: v.clone() for k, v in layer.state_dict().items()}
    layer.load_state_dict(best_state)
    return layer.eval(), history


def train_variants(fit_rows, validation_rows, heldout_rows, args, score) -> dict:
    """One layer per input set (the draft's view of each token; that plus the generation's history): each with
    its held-out probabilities and best validation score."""
    variants = {}
    for variant in ("basic", "history"):
        with_history = variant == "history"
        heldout = tensors(heldout_rows, with_history)
        layer, history = train_layer(tensors(fit_rows, with_history), tensors(validation_rows, with_history),
                                     args.epochs, args.seed, score)
        with torch.no_grad():
            heldout_probs = torch.sigmoid(layer(heldout["hidden"], heldout["scalars"]))
        variants[variant] = {"layer": layer, "heldout": heldout, "probs": heldout_probs, "history": history,
                             "validation_score": max(epoch["validation_score"] for epoch in history)}
    return variants


def chosen_variant(variants: dict, features: str) -> str:
    """``--features``, or with ``auto`` the inputs with the better validation score (never the held-out one)."""
    return features if features != "auto" else max(variants, key=lambda name: variants[name]["validation_score"])


def fit_greedy(data: dict, args) -> tuple[PreVerifierLayer, dict]:
    """The greedy layer (labels: the target's argmax is the token, given the tokens before it were); held-out
    metrics of both input sets and of the confidence rule, on the same tokens."""
    train_rows, heldout_rows = split_rows(data, 0.2, args.seed)
    fit_rows, validation_rows = split_by_prompt(train_rows, 0.15, args.seed + 1)
    variants = train_variants(fit_rows, validation_rows, heldout_rows, args, roc_auc)
    compared = {}
    for variant, trained in variants.items():
        probs, labels = trained["probs"], trained["heldout"]["label"]
        compared[variant] = {"roc_auc_greedy": roc_auc(probs, labels),
                             "roc_auc_soft_labels_binarised": roc_auc(probs, (trained["heldout"]["soft"] > 0.5).float()),
                             "brier": float(((probs - labels) ** 2).mean()), "reliability": reliability(probs, labels),
                             "roc": roc_points(probs, labels), "history": trained["history"]}
        print(f"greedy, {variant} inputs: held-out ROC-AUC {compared[variant]['roc_auc_greedy']:.3f}, "
              f"Brier {compared[variant]['brier']:.4f}")
    chosen = chosen_variant(variants, args.features)
    heldout = variants[chosen]["heldout"]
    confidence = heldout["scalars"][:, 0]
    metrics = {**compared[chosen], "features": chosen,
               "roc_auc_confidence_rule": roc_auc(confidence, heldout["label"]),
               "brier_confidence_rule": float(((confidence - heldout["label"]) ** 2).mean()),
               "reliability_confidence_rule": reliability(confidence, heldout["label"]),
               "roc_confidence_rule": roc_points(confidence, heldout["label"]),
               "compared_inputs": {variant: {key: figures[key] for key in ("roc_auc_greedy", "brier", "reliability")}
                                   for variant, figures in compared.items()},
               "heldout_tokens": len(heldout_rows), "train_tokens": len(fit_rows),
               "validation_tokens": len(validation_rows), "prompts": len(data["prompts"]),
               "heldout_accept_rate": float(heldout["label"].mean())}
    print(f"greedy, confidence rule: ROC-AUC {metrics['roc_auc_confidence_rule']:.3f}, Brier "
          f"{metrics['brier_confidence_rule']:.4f} on {len(heldout_rows)} held-out tokens; chosen: {chosen} inputs")
    return variants[chosen]["layer"], metrics


def fit_sampling(data: dict, args) -> tuple[PreVerifierLayer, dict]:
    """The layer for sampled tokens (labels: their acceptance probability min(1, p(x)/q(x))); held-out Brier
    against the constant mean acceptance and the confidence rule's sampled estimate (the acceptance so far)."""
    train_rows, heldout_rows = split_rows(data, 0.2, args.seed)
    fit_rows, validation_rows = split_by_prompt(train_rows, 0.15, args.seed + 1)
    variants = train_variants(fit_rows, validation_rows, heldout_rows, args, brier_skill)
    chosen = chosen_variant(variants, args.features)
    labels = variants[chosen]["heldout"]["label"]
    mean_accept = float(tensors(fit_rows)["label"].mean())
    history_rate = torch.tensor([row["history_rate"] for row in heldout_rows])
    metrics = {"features": chosen, "temperature": args.sampling_temperature,
               "brier": -brier_skill(variants[chosen]["probs"], labels),
               "brier_constant_mean": -brier_skill(torch.full_like(labels, mean_accept), labels),
               "brier_confidence_rule": -brier_skill(history_rate, labels),
               "compared_inputs": {variant: {"brier": -brier_skill(trained["probs"], labels)}
                                   for variant, trained in variants.items()},
               "reliability": reliability(variants[chosen]["probs"], labels),
               "reliability_confidence_rule": reliability(history_rate, labels),
               "heldout_tokens": len(heldout_rows), "train_tokens": len(fit_rows),
               "validation_tokens": len(validation_rows), "heldout_mean_acceptance": float(labels.mean()),
               "history": variants[chosen]["history"]}
    print(f"sampled (T = {args.sampling_temperature}), {chosen} inputs: held-out Brier {metrics['brier']:.5f}; "
          f"constant mean {metrics['brier_constant_mean']:.5f}; confidence rule {metrics['brier_confidence_rule']:.5f} "
          f"on {len(heldout_rows)} tokens")
    return variants[chosen]["layer"], metrics


def fit(target, args) -> dict:
    """Train the greedy layer and, when the data has sampled rows, the layer for sampled tokens; saved to
    ``layer.pt`` in the work folder with their held-out metrics."""
    data = torch.load(Path(args.work) / "data.pt")
    if "history_rate" not in data["rows"][0]:
        raise CollectedDataError(f"{Path(args.work) / 'data.pt'} was collected without history features: collect it again.")
    by_kind = {kind: {"prompts": data["prompts"], "rows": [row for row in data["rows"] if row.get("sampled", False) == kind]}
               for kind in (False, True)}
    layer, metrics = fit_greedy(by_kind[False], args)
    saved = {"state": layer.state_dict(), "shape": layer.shape(), "metrics": metrics,
             "collection": data.get("collection", {})}
    if by_kind[True]["rows"]:
        sampling_layer, sampling_metrics = fit_sampling(by_kind[True], args)
        saved |= {"sampling_state": sampling_layer.state_dict(), "sampling_shape": sampling_layer.shape(),
                  "sampling_metrics": sampling_metrics}
    torch.save(saved, Path(args.work) / "layer.pt")
    return saved


def saved_layers(saved: dict) -> tuple[PreVerifierLayer, PreVerifierLayer | None]:
    """The layers ``fit`` saved (the greedy one, and the sampled tokens' when trained)."""
    layer = layer_from_shape(saved["shape"])
    layer.load_state_dict(saved["state"])
    sampling_layer = None
    if "sampling_state" in saved:
        sampling_layer = layer_from_shape(saved["sampling_shape"])
        sampling_layer.load_state_dict(saved["sampling_state"])
    return layer.eval(), sampling_layer.eval() if sampling_layer is not None else None


def split_by_prompt(rows: list[dict], fraction: float, seed: int) -> tuple[list[dict], list[dict]]:
    prompts = sorted({row["prompt_index"] for row in rows})
    random.Random(seed).shuffle(prompts)
    chosen = set(prompts[: max(1, int(len(prompts) * fraction))])
    return [r for r in rows if r["prompt_index"] not in chosen], [r for r in rows if r["prompt_index"] in chosen]


def measure_threshold(target, drafter, preverifier: TrainedPreVerifier, args, temperature: float) -> dict:
    """Run PACER with the layer on validation prompts at every candidate threshold (interleaved: each repeat
    runs every threshold in turn); the threshold with the best median tokens/s, and every median."""
    from ..api import generate

    prompts = [record["prompt"] for record in load_prompts(args.validation_prompts)][: args.validation_count]
    candidates = [float(t) for t in args.thresholds.split(",")]
    rates: dict[float, list[float]] = {threshold: [] for threshold in candidates}
    for repeat in range(args.repeats):
        for threshold in candidates:
            tokens, seconds = 0, 0.0
            for index, prompt in enumerate(prompts):
                result = generate(target, drafter, "pacer", prompt, preverifier=preverifier,
                                  max_new_tokens=args.max_new_tokens, temperature=temperature, seed=1000 * repeat + index, threshold=threshold,
                                  stop_rule="threshold", block_size=args.block_size,
                                  max_draft_len=args.max_draft_len, phrase_len=args.phrase_len)
                tokens, seconds = tokens + result.metrics.new_tokens, seconds + result.metrics.seconds
            rates[threshold].append(tokens / seconds)
    speeds = {threshold: statistics.median(values) for threshold, values in rates.items()}
    for threshold, speed in speeds.items():
        print(f"T = {temperature}, threshold {threshold:.2f}: {speed:.2f} tokens/s (median of {args.repeats})")
    return {"threshold": max(speeds, key=speeds.get), "tokens_per_s_by_threshold": {str(k): v for k, v in speeds.items()}}


def choose_thresholds(target, drafter, layer, sampling_layer, args) -> dict:
    """The greedy threshold, and the sampling one (measured at --sampling-temperature with the sampled tokens'
    layer when there is one, else the greedy layer's)."""
    preverifier = TrainedPreVerifier(layer, {"threshold_greedy": 0.5}, sampling_layer)
    greedy = measure_threshold(target, drafter, preverifier, args, 0.0)
    chosen = {"threshold_greedy": greedy["threshold"], "greedy": greedy}
    if args.sampling_temperature > 0:
        sampled = measure_threshold(target, drafter, preverifier, args, args.sampling_temperature)
        chosen |= {"threshold_sampling": sampled["threshold"], "sampling": sampled}
    return chosen


def feature_spec(layer: PreVerifierLayer) -> list[str]:
    """The inputs a layer reads, in words (no hidden state for a drafter whose hidden states are not read)."""
    spec = HISTORY_FEATURE_SPEC if layer.scalar_count > 5 else FEATURE_SPEC
    return spec if layer.hidden_size else spec[1:]


def export(target, drafter, layer: PreVerifierLayer, sampling_layer, saved: dict, chosen: dict, args) -> Path:
    config = layer.shape() | {
        "target_id": target.name, "draft_id": drafter.name,
        "features": feature_spec(layer),
        "block_size": args.block_size, "max_draft_len": args.max_draft_len,
        "threshold_greedy": chosen["threshold_greedy"],
        "threshold_sampling": chosen.get("threshold_sampling", chosen["threshold_greedy"]),
        "threshold_selection": chosen | {"validation_prompts": args.validation_prompts,
                                         "validation_count": args.validation_count, "repeats": args.repeats,
                                         "max_new_tokens": args.max_new_tokens, "phrase_len": args.phrase_len},
        "training_data": {"prompts": saved["metrics"].get("prompts", args.prompts), **saved.get("collection", {}),
                          "source": "pacer_core.training.instructions (shuffled; every prompt in assets/prompts, "
                                    "the page's examples and the workshop's left out)"},
        "heldout_metrics": saved["metrics"]}
    if sampling_layer is not None:
        config["sampling_heldout_metrics"] = saved["sampling_metrics"]
        config["sampling_features"] = feature_spec(sampling_layer)
    directory = Path(args.out) if args.out else search_dirs()[1] / pair_slug(target.name, drafter.name)
    save(directory, layer, config, sampling_layer)
    print(f"saved the pre-verifier to {directory}")
    return directory


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pacer_core.training.preverifier", description=__doc__.split("\n\n")[0])
    parser.add_argument("stage", choices=["collect", "fit", "threshold", "all"])
    parser.add_argument("--target", default="embedded")
    parser.add_argument("--draft", default="embedded")
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--work", default=str(WORK_DIR), help="scratch folder (resumable)")
    parser.add_argument("--out", default=None, help="output folder (default: $PACER_CACHE/preverifiers/<pair>)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prompts", type=int, default=120)
    parser.add_argument("--draft-len", type=int, default=12)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--soft-temperature", type=float, default=0.7)
    parser.add_argument("--sampling-temperature", type=float, default=0.7,
                        help="also collect a sampled run of each prompt at this temperature, and train a layer for "
                             "sampled tokens on their acceptance probability (0: greedy only)")
    parser.add_argument("--drafter", default=None, help="the drafter kind to train for (default: the pair's)")
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--features", choices=["auto", "basic", "history"], default="auto",
                        help="the layer's inputs: the draft's view of each token (basic), or that plus this "
                             "generation's acceptance history and the draft so far (history); auto: the better on validation tokens")
    parser.add_argument("--block-size", type=int, default=3)
    parser.add_argument("--phrase-len", type=int, default=0, help="phrase drafts while choosing thresholds (0: off)")
    parser.add_argument("--max-draft-len", type=int, default=12)
    parser.add_argument("--thresholds", default="0.2,0.35,0.5,0.65")
    parser.add_argument("--validation-prompts", default="assets/prompts/validation.jsonl")
    parser.add_argument("--validation-count", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        # Check the inputs a stage needs before loading any model, and create nothing for a bad call.
        needed = {"fit": ("data.pt", "collect"), "threshold": ("layer.pt", "fit")}.get(args.stage)
        if needed and not (Path(args.work) / needed[0]).exists():
            raise FileNotFoundError(f"{Path(args.work) / needed[0]} does not exist: run the {needed[1]} stage "
                                    f"first with the same --work folder.")
        Path(args.work).mkdir(parents=True, exist_ok=True)
        target, drafters = load_target(args.target, args.draft, device=args.device, dtype=args.dtype)
        drafter = load_drafter(target, drafters, args.drafter) if args.drafter else drafters.default
        if args.stage in ("collect", "all"):
            collect(target, drafter, args)
        if args.stage in ("fit", "all"):
            fit(target, args)
        if args.stage in ("threshold", "all"):
            saved = torch.load(Path(args.work) / "layer.pt")
            layer, sampling_layer = saved_layers(saved)
            chosen = choose_thresholds(target, drafter, layer, sampling_layer, args)
            export(target, drafter, layer, sampling_layer, saved, chosen, args)
    except (SettingsError, ModelLoadError, CollectedDataError, OSError) as problem:   # OSError: e.g. --work not writable
        print(f"error: {problem}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
