"""The trainable pre-verification layer: a small MLP over per-token draft features giving a
per-token acceptance logit; a block's score is the product of its tokens' acceptance probabilities,
i.e. the estimated P(every token of the block is accepted | the tokens before it were).

Saved as safetensors + JSON (pair ids, feature spec, block size, thresholds, data summary, held-out
metrics) and loaded automatically for the matching pair."""
from __future__ import annotations

import json
import math
import re
from array import array
from operator import mul
from pathlib import Path

import torch
from torch import nn

from ..stopping import platt
from .features import TokenFeatures

FEATURE_SPEC = ["hidden (projected)", "q(x)", "log q(x)", "entropy(q)", "top1 - top2", "position / 16"]
# The same plus what the draft's confidence cannot know: this generation's acceptance history and the draft so far.
HISTORY_FEATURE_SPEC = FEATURE_SPEC + ["first-token acceptance rate so far", "previous first token accepted",
                                       "log q of the draft before this token / 8"]
ASSETS_DIR = Path(__file__).resolve().parent.parent.parent / "assets"


def scalar_row(draft_prob: float, entropy: float, margin: float, position: int, history=None) -> list[float]:
    """One drafted token's scalar inputs, the only place they are defined: q(x), log q(x), entropy, margin and
    position / 16 (5), and with ``history`` = (acceptance rate so far, previous first token accepted, log q of the
    draft before it) three more (8)."""
    row = [draft_prob, math.log(max(draft_prob, 1e-8)), entropy, margin, position / 16.0]
    if history is not None:
        rate, last_accepted, prefix_log_prob = history
        row += [rate, last_accepted, prefix_log_prob / 8.0]
    return row


def scalar_features(draft_prob, entropy, margin, position, history=None) -> torch.Tensor:
    """[T, 5] float32 from per-token sequences of q(x), entropy, margin and position; [T, 8] with ``history`` (three
    sequences: see ``scalar_row``). Training builds its inputs with it."""
    histories = zip(*history) if history is not None else [None] * len(draft_prob)
    rows = [scalar_row(float(q), float(e), float(m), int(p), h)
            for q, e, m, p, h in zip(draft_prob, entropy, margin, position, histories)]
    return torch.tensor(rows, dtype=torch.float32).reshape(len(rows), 5 if history is None else 8)


def token_history(feature: TokenFeatures) -> tuple[float, float, float]:
    context = feature.context
    return context.history_rate, context.last_accepted, context.prefix_log_prob


def scalar_rows(block: list[TokenFeatures], with_history: bool) -> list[list[float]]:
    """A block of drafted tokens' scalar inputs as a layer trained with or without history reads them: T rows of 5
    or 8 values, each rounded to float32 (training's precision)."""
    return [array("f", scalar_row(f.draft_prob, f.entropy, f.margin, f.position,
                                  token_history(f) if with_history else None)).tolist() for f in block]


def block_scalars(block: list[TokenFeatures], with_history: bool) -> torch.Tensor:
    """``scalar_rows`` as a [T, 5 or 8] float32 tensor, for a layer that also reads hidden states."""
    return torch.tensor(scalar_rows(block, with_history), dtype=torch.float32).reshape(len(block), 8 if with_history
                                                                                        else 5)


class PreVerifierLayer(nn.Module):
    """hidden [T, H] + scalars [T, 5 or 8] → acceptance logits [T]. ``hidden_size`` 0: a drafter whose hidden
    states are not read (llama.cpp's), so the layer reads the scalars only."""

    def __init__(self, hidden_size: int, projection: int = 32, width: int = 64, scalar_count: int = 5):
        super().__init__()
        self.projection = projection if hidden_size > 0 else 0
        self.hidden_size, self.width, self.scalar_count = hidden_size, width, scalar_count
        if hidden_size > 0:
            self.hidden_norm = nn.LayerNorm(hidden_size)
            self.hidden_proj = nn.Linear(hidden_size, projection)
        self.mlp = nn.Sequential(nn.Linear(self.projection + scalar_count, width), nn.GELU(), nn.Linear(width, 1))

    def forward(self, hidden: torch.Tensor, scalars: torch.Tensor) -> torch.Tensor:
        inputs = torch.cat([self.hidden_proj(self.hidden_norm(hidden)), scalars], dim=-1) if self.hidden_size \
            else scalars
        return self.mlp(inputs).squeeze(-1)

    def shape(self) -> dict:
        """What rebuilds the layer (``layer_from_shape``): stored in the config beside its weights."""
        return {"hidden_size": self.hidden_size, "projection": self.projection, "width": self.width,
                "scalar_count": self.scalar_count}


def layer_from_shape(shape: dict) -> PreVerifierLayer:
    return PreVerifierLayer(shape["hidden_size"], shape["projection"], shape["width"], shape.get("scalar_count", 5))


class TrainedPreVerifier:
    """A trained layer plus its thresholds, scoring blocks inside the PACER loop. ``sampling_layer`` (optional)
    scores tokens sampled from q at a temperature > 0, trained on their acceptance probability min(1, p(x)/q(x));
    without it the greedy layer scores every token."""

    kind = "trained"

    def __init__(self, layer: PreVerifierLayer, config: dict, sampling_layer: PreVerifierLayer | None = None):
        self.layer = layer.eval()
        self.sampling_layer = sampling_layer.eval() if sampling_layer is not None else None
        self.config = config
        self.default_threshold = float(config["threshold_greedy"])
        self._scalar_weights: dict[int, list] = {}   # id(layer) → [its parameters, their versions, its weights]

    def threshold_for(self, temperature: float) -> float:
        key = "threshold_greedy" if temperature <= 0 else "threshold_sampling"
        return float(self.config.get(key, self.default_threshold))

    def token_probs(self, block: list[TokenFeatures]) -> list[float]:
        layer = self.sampling_layer if self.sampling_layer is not None and block[0].sampled else self.layer
        if not layer.hidden_size:
            return scalar_layer_probs(self._weights_of(layer), scalar_rows(block, with_history=layer.scalar_count > 5))
        return self._module_probs(layer, block)

    @torch.inference_mode()
    def _module_probs(self, layer: PreVerifierLayer, block: list[TokenFeatures]) -> list[float]:
        hidden = torch.stack([feature.hidden for feature in block])
        scalars = block_scalars(block, with_history=layer.scalar_count > 5)
        return torch.sigmoid(layer(hidden, scalars)).tolist()

    def _weights_of(self, layer: PreVerifierLayer):
        """``scalar_layer_weights(layer)``, read again only after its parameters changed in place (their version
        counters, as training's optimizer steps and ``load_state_dict`` change them). The parameters are looked up once:
        reaching them through the modules' attribute lookups took ~25 µs a token between two draft calls."""
        cached = self._scalar_weights.get(id(layer))
        if cached is None:
            parameters = (layer.mlp[0].weight, layer.mlp[0].bias, layer.mlp[2].weight, layer.mlp[2].bias)
            cached = self._scalar_weights[id(layer)] = [parameters, None, None]
        parameters, versions, weights = cached
        now = tuple(parameter._version for parameter in parameters)
        if now != versions:
            weights = scalar_layer_weights(layer)
            cached[1], cached[2] = now, weights
        return weights

    def cost_rule_estimate(self, estimate: float, sampled: bool) -> float:
        """What the cost rule reads of a token's estimate: a greedy one through the layer's ``greedy_calibration`` (a
        Platt map fitted to the target's verdicts on prompts outside the held-out sets, training/calibration.py) when
        it has one, since the rule multiplies estimates into the chance a prefix is kept; a sampled one as it is (that
        layer is trained on the acceptance probabilities themselves)."""
        calibration = self.config.get("greedy_calibration")
        if sampled or not calibration:
            return estimate
        return platt(estimate, float(calibration["slope"]), float(calibration["offset"]))

    def score_block(self, block: list[TokenFeatures]) -> tuple[float, list[float]]:
        token_probs = self.token_probs(block)
        return math.prod(token_probs), token_probs


def scalar_layer_weights(layer: PreVerifierLayer) -> tuple[tuple[tuple[tuple[float, ...], float, float], ...], float]:
    """A scalar-only layer's weights as ``scalar_layer_probs`` reads them: per hidden unit j (row j of W1, b1[j],
    W2[0, j]), and b2."""
    first_weight, first_bias, second_weight, second_bias = (
        tensor.detach().cpu().double().tolist() for tensor in
        (layer.mlp[0].weight, layer.mlp[0].bias, layer.mlp[2].weight, layer.mlp[2].bias))
    return tuple(zip(map(tuple, first_weight), first_bias, second_weight[0])), second_bias[0]


def scalar_layer_probs(weights, rows: list[list[float]]) -> list[float]:
    """A scalar-only layer's acceptance probabilities, sigmoid(W2 · GELU(W1 · x + b1) + b2) for each row x of
    ``rows`` (``weights``: ``scalar_layer_weights``), in plain Python floats: a drafted token is scored between two
    draft calls, which leave the CPU's caches holding the draft's weights; there a 5 → 64 → 1 layer cost 0.03 ms
    this way, 0.17 ms in numpy's small-array calls and more in torch's (tests/test_preverifier.py checks it against
    the module)."""
    units, second_bias = weights
    probs = []
    for row in rows:
        logit = second_bias
        for unit_weights, unit_bias, out_weight in units:
            hidden = unit_bias + sum(map(mul, unit_weights, row))
            logit += out_weight * 0.5 * hidden * (1.0 + math.erf(hidden * _INV_SQRT2))
        probs.append(1.0 / (1.0 + math.exp(-logit)) if logit > -700 else 0.0)
    return probs


_INV_SQRT2 = 1.0 / math.sqrt(2.0)


def pair_slug(target_id: str, draft_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", f"{target_id}__{draft_id}")[:120]


def search_dirs() -> list[Path]:
    from ..embedded import cache_root

    return [ASSETS_DIR / "preverifiers", cache_root() / "preverifiers"]


SAMPLING_WEIGHTS = "preverifier-sampling.safetensors"


def save(directory: Path, layer: PreVerifierLayer, config: dict, sampling_layer: PreVerifierLayer | None = None) -> None:
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in layer.state_dict().items()}, str(directory / "preverifier.safetensors"))
    if sampling_layer is not None:
        save_file({k: v.contiguous() for k, v in sampling_layer.state_dict().items()}, str(directory / SAMPLING_WEIGHTS))
        config = config | {"sampling_layer": sampling_layer.shape()}
    (directory / "config.json").write_text(json.dumps(config, indent=2))


def load(directory: Path) -> TrainedPreVerifier:
    from safetensors.torch import load_file

    config = json.loads((directory / "config.json").read_text())
    layer = layer_from_shape(config)
    layer.load_state_dict(load_file(str(directory / "preverifier.safetensors")))
    sampling_layer = None
    if config.get("sampling_layer"):
        sampling_layer = layer_from_shape(config["sampling_layer"])
        sampling_layer.load_state_dict(load_file(str(directory / SAMPLING_WEIGHTS)))
    return TrainedPreVerifier(layer, config, sampling_layer)


def load_for_pair(target, drafter) -> TrainedPreVerifier | None:
    """The trained layer for exactly this target and ``drafter``, if one was shipped or trained. A draft model
    drafting from a reduced vocabulary (``small-N``) reads the same hidden states as when it drafts from all
    ids, so it uses the layer trained for the draft model when it has none of its own."""
    draft_names = [drafter.name]
    if getattr(drafter, "kind", "") == "independent" and getattr(drafter, "kept_ids", None) is not None:
        draft_names.append(drafter.model_id)
    for root in search_dirs():
        for draft_name in draft_names:
            directory = root / pair_slug(target.name, draft_name)
            if (directory / "config.json").exists():
                trained = load(directory)
                if trained.config.get("hidden_size") == drafter.hidden_size:
                    return trained
    return None
