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
Contexts are the target's own greedy replies to chat instructions, so they are on-distribution."""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch

from ..decoders.base import DecodeState, DraftBuilder, Proposal
from ..decoders.fixed import FixedSpeculative
from ..models import ModelLoadError, load_pair
from ..preverifier.features import history_context, token_features
from ..preverifier.model import (FEATURE_SPEC, HISTORY_FEATURE_SPEC, PreVerifierLayer, TrainedPreVerifier, pair_slug,
                                 save, scalar_features, search_dirs)
from ..settings import SettingsError, validate_settings

WORK_DIR = Path("work/preverifier")


class CollectedDataError(Exception):
    """The collected data cannot train what was asked for (the message says how to mend it)."""


class RecordingDrafter(FixedSpeculative):
    """Fixed-length SD that keeps every drafted token's features and its verification labels."""

    def __init__(self, gamma: int, soft_temperature: float):
        super().__init__(gamma)
        self.soft_temperature = soft_temperature
        self.rows: list[dict] = []
        self._pending: list = []

    def propose(self, pair, state: DecodeState, settings, budget: int) -> Proposal:
        draft, self._pending = DraftBuilder(pair, state, settings), []
        context = history_context(state.first_verified, state.first_accepted, state.last_first_accepted)
        for position in range(settings.gamma):
            token_id, logits_row, hidden_row = draft.draw(with_hidden=True)
            features = token_features(logits_row, hidden_row, token_id, position, context)
            self._pending.append((features, logits_row))
            context = context.after(features.draft_prob)
        return draft.proposal()

    def verify(self, state, verified_ids):
        target_logits = super().verify(state, verified_ids)
        self._record(verified_ids, target_logits[:-1])
        return target_logits

    def _record(self, drafted: list[int], target_logits: torch.Tensor) -> None:
        target_argmax = target_logits.argmax(-1).tolist()
        target_probs = torch.softmax(target_logits / self.soft_temperature, -1)
        prefix_ok = True
        for index, (token_id, (features, draft_logits)) in enumerate(zip(drafted, self._pending)):
            draft_probs = torch.softmax(draft_logits / self.soft_temperature, -1)
            soft = min(1.0, float(target_probs[index, token_id]) / max(float(draft_probs[token_id]), 1e-12))
            self.rows.append({"hidden": features.hidden.half(), "draft_prob": features.draft_prob,
                              "entropy": features.entropy, "margin": features.margin, "position": index,
                              "history_rate": features.context.history_rate,
                              "last_accepted": features.context.last_accepted,
                              "prefix_log_prob": features.context.prefix_log_prob,
                              "label": int(token_id == target_argmax[index]), "prefix_ok": prefix_ok, "soft": soft})
            prefix_ok = prefix_ok and token_id == target_argmax[index]


def collection_prompts(count: int, seed: int) -> list[str]:
    from .instructions import training_instructions

    prompts = training_instructions(seed)
    random.Random(seed).shuffle(prompts)
    return prompts[:count]


def collect(pair, args) -> Path:
    from tqdm import tqdm

    out = Path(args.work) / "data.pt"
    done = torch.load(out) if out.exists() else {"prompts": [], "rows": []}
    prompts = collection_prompts(args.prompts, args.seed)
    settings = validate_settings(max_new_tokens=args.max_new_tokens, temperature=0.0, gamma=args.draft_len)
    for prompt in tqdm(prompts[len(done["prompts"]):], desc="collect", file=sys.stderr):
        recorder = RecordingDrafter(args.draft_len, args.soft_temperature)
        for _ in recorder.run(pair, pair.encode_prompt(prompt), settings):
            pass
        for row in recorder.rows:
            row["prompt_index"] = len(done["prompts"])
        done["rows"] += recorder.rows
        done["prompts"].append(prompt)
        if len(done["prompts"]) % 10 == 0:
            torch.save(done, out)  # resumable
    torch.save(done, out)
    print(f"collected {len(done['rows'])} drafted tokens from {len(done['prompts'])} prompts → {out}")
    return out


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


def train_layer(train: dict, validation: dict, epochs: int, seed: int) -> tuple[PreVerifierLayer, list[dict]]:
    """BCE on greedy labels; keeps the epoch with the best validation ROC-AUC (the hidden-state input
    over-fits after a few epochs on a few thousand tokens)."""
    torch.manual_seed(seed)
    layer = PreVerifierLayer(train["hidden"].shape[1], projection=8, scalar_count=train["scalars"].shape[1])
    optimiser = torch.optim.AdamW(layer.parameters(), lr=2e-3, weight_decay=1e-2)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    history, best_auc, best_state = [], -1.0, None
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
            validation_auc = roc_auc(torch.sigmoid(layer(validation["hidden"], validation["scalars"])), validation["label"])
        history.append({"epoch": epoch, "train_loss": float(loss.detach()), "validation_auc": validation_auc})
        if validation_auc > best_auc:
            best_auc, best_state = validation_auc, {k: v.clone() for k, v in layer.state_dict().items()}
    layer.load_state_dict(best_state)
    return layer.eval(), history


def fit(pair, args) -> tuple[PreVerifierLayer, dict]:
    """Train the layer with the chosen inputs (``--features``); the held-out metrics also give the other
    inputs' layer and the confidence rule, on the same tokens, so the three can be compared."""
    data = torch.load(Path(args.work) / "data.pt")
    train_rows, heldout_rows = split_rows(data, 0.2, args.seed)
    fit_rows, validation_rows = split_by_prompt(train_rows, 0.15, args.seed + 1)
    if "history_rate" not in heldout_rows[0] and args.features == "history":
        raise CollectedDataError(f"{Path(args.work) / 'data.pt'} was collected without history features: collect it again.")
    layers, compared = {}, {}
    for variant in ("basic", "history") if "history_rate" in heldout_rows[0] else ("basic",):
        with_history = variant == "history"
        heldout = tensors(heldout_rows, with_history)
        layer, history = train_layer(tensors(fit_rows, with_history), tensors(validation_rows, with_history),
                                     args.epochs, args.seed)
        with torch.no_grad():
            heldout_probs = torch.sigmoid(layer(heldout["hidden"], heldout["scalars"]))
        layers[variant] = layer
        compared[variant] = {"roc_auc_greedy": roc_auc(heldout_probs, heldout["label"]),
                             "roc_auc_soft_labels_binarised": roc_auc(heldout_probs, (heldout["soft"] > 0.5).float()),
                             "brier": float(((heldout_probs - heldout["label"]) ** 2).mean()),
                             "reliability": reliability(heldout_probs, heldout["label"]),
                             "roc": roc_points(heldout_probs, heldout["label"]), "history": history}
    confidence = heldout["scalars"][:, 0]
    metrics = {**compared[args.features], "features": args.features,
               "roc_auc_confidence_rule": roc_auc(confidence, heldout["label"]),
               "brier_confidence_rule": float(((confidence - heldout["label"]) ** 2).mean()),
               "reliability_confidence_rule": reliability(confidence, heldout["label"]),
               "compared_inputs": {variant: {key: figures[key] for key in ("roc_auc_greedy", "brier", "reliability")}
                                   for variant, figures in compared.items()},
               "heldout_tokens": len(heldout_rows), "train_tokens": len(fit_rows),
               "validation_tokens": len(validation_rows), "prompts": len(data["prompts"]),
               "heldout_accept_rate": float(heldout["label"].mean())}
    for variant, figures in compared.items():
        print(f"{variant} inputs: held-out ROC-AUC {figures['roc_auc_greedy']:.3f}, Brier {figures['brier']:.4f}")
    print(f"confidence rule: ROC-AUC {metrics['roc_auc_confidence_rule']:.3f}, Brier "
          f"{metrics['brier_confidence_rule']:.4f} on {len(heldout_rows)} held-out tokens")
    layer = layers[args.features]
    torch.save({"state": layer.state_dict(), "metrics": metrics}, Path(args.work) / "layer.pt")
    return layer, metrics


def split_by_prompt(rows: list[dict], fraction: float, seed: int) -> tuple[list[dict], list[dict]]:
    prompts = sorted({row["prompt_index"] for row in rows})
    random.Random(seed).shuffle(prompts)
    chosen = set(prompts[: max(1, int(len(prompts) * fraction))])
    return [r for r in rows if r["prompt_index"] not in chosen], [r for r in rows if r["prompt_index"] in chosen]


def measure_threshold(pair, layer, args, config: dict) -> dict:
    """Run PACER greedy on validation prompts for each threshold; pick the best median tokens/s."""
    from ..api import generate

    records = [json.loads(line) for line in Path(args.validation_prompts).read_text().splitlines() if line.strip()]
    prompts = [r["prompt"] for r in records][: args.validation_count]
    candidates = [float(t) for t in args.thresholds.split(",")]
    speeds = {}
    preverifier = TrainedPreVerifier(layer, config | {"threshold_greedy": 0.5})
    for threshold in candidates:
        rates = []
        for _ in range(args.repeats):
            tokens, seconds = 0, 0.0
            for prompt in prompts:
                result = generate(pair, "pacer", prompt, preverifier=preverifier, max_new_tokens=args.max_new_tokens,
                                  threshold=threshold, block_size=args.block_size, max_draft_len=args.max_draft_len)
                tokens, seconds = tokens + result.metrics.new_tokens, seconds + result.metrics.seconds
            rates.append(tokens / seconds)
        speeds[threshold] = statistics.median(rates)
        print(f"threshold {threshold:.2f}: {speeds[threshold]:.2f} tokens/s (median of {args.repeats})")
    best = max(speeds, key=speeds.get)
    return {"threshold_greedy": best, "tokens_per_s_by_threshold": {str(k): v for k, v in speeds.items()}}


def export(pair, layer: PreVerifierLayer, metrics: dict, chosen: dict, args) -> Path:
    config = {"target_id": pair.target_id, "draft_id": pair.draft_id, "hidden_size": layer.hidden_size,
              "projection": layer.projection, "width": layer.width, "scalar_count": layer.scalar_count,
              "features": HISTORY_FEATURE_SPEC if layer.scalar_count > 5 else FEATURE_SPEC,
              "block_size": args.block_size, "max_draft_len": args.max_draft_len,
              "threshold_greedy": chosen["threshold_greedy"],
              "threshold_sampling": chosen.get("threshold_sampling", chosen["threshold_greedy"]),
              "threshold_selection": chosen, "training_data": {
                  "prompts": metrics.get("prompts", args.prompts), "forced_draft_len": args.draft_len, "max_new_tokens": args.max_new_tokens,
                  "soft_temperature": args.soft_temperature, "source": "pacer_core.training.instructions (shuffled)"},
              "heldout_metrics": metrics}
    directory = Path(args.out) if args.out else search_dirs()[1] / pair_slug(pair.target_id, pair.draft_id)
    save(directory, layer, config)
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
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--features", choices=["basic", "history"], default="basic",
                        help="the layer's inputs: the draft's view of each token (basic), or that plus this "
                             "generation's acceptance history and the draft so far (history)")
    parser.add_argument("--block-size", type=int, default=3)
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
        pair = load_pair(args.target, args.draft, device=args.device, dtype=args.dtype)
        if args.stage in ("collect", "all"):
            collect(pair, args)
        if args.stage in ("fit", "all"):
            fit(pair, args)
        if args.stage in ("threshold", "all"):
            saved = torch.load(Path(args.work) / "layer.pt")
            projection = saved["state"]["hidden_proj.weight"].shape[0]
            layer = PreVerifierLayer(saved["state"]["hidden_norm.weight"].shape[0], projection=projection,
                                     scalar_count=saved["state"]["mlp.0.weight"].shape[1] - projection)
            layer.load_state_dict(saved["state"])
            config = {"threshold_greedy": 0.5}
            chosen = measure_threshold(pair, layer.eval(), args, config)
            export(pair, layer, saved["metrics"], chosen, args)
    except (SettingsError, ModelLoadError, CollectedDataError, OSError) as problem:   # OSError: e.g. --work not writable
        print(f"error: {problem}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
