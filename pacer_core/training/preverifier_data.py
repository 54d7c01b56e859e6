"""Collecting the pre-verifier's training data (``python -m pacer_core.training.preverifier collect``): greedy
speculative decoding with a forced draft length records every drafted token's features and its verification
labels (``RecordingDrafter``), over training instructions that exclude every prompt the project measures or shows
(``collection_prompts``). The labels are defined in ``training/preverifier.py``'s docstring."""
from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

import torch

from ..decoders.base import DecodeState, DraftBuilder, Proposal, draft_distribution
from ..decoders.fixed import FixedSpeculative
from ..preverifier.features import history_context, token_features
from ..preverifier.model import ASSETS_DIR
from ..settings import validate_settings


class RecordingDrafter(FixedSpeculative):
    """Fixed-length SD that keeps every drafted token's features and its verification labels. Greedy: whether the
    token is the target's argmax (and, at ``soft_temperature``, its acceptance probability). Sampling: the token was
    drawn from q at the run's settings and its label is the probability speculative sampling accepts it,
    min(1, p(x)/q(x)) under the same settings; that holds given the tokens before it, whatever became of them."""

    def __init__(self, gamma: int, soft_temperature: float):
        super().__init__(gamma)
        self.soft_temperature = soft_temperature
        self.rows: list[dict] = []
        self._pending: list = []
        self._settings = None

    def propose(self, target, state: DecodeState, settings, budget: int) -> Proposal:
        draft, self._pending, self._settings = DraftBuilder(target, state, settings), [], settings
        context = history_context(state.first_verified, state.first_accepted, state.last_first_accepted)
        for position in range(settings.gamma):
            token_id, logits_row, hidden_row = draft.draw(with_hidden=True)
            features = token_features(logits_row, hidden_row, token_id, position, context,
                                      sampled=not settings.greedy)
            self._pending.append((features, logits_row, draft.rows[-1]))
            context = context.after(features.draft_prob)
        return draft.proposal()

    def verify(self, state, verified_ids):
        target_logits = super().verify(state, verified_ids)
        rows = self._sampled_rows if not self._settings.greedy else self._greedy_rows
        self.rows += rows(verified_ids, target_logits[:-1])
        return target_logits

    def _greedy_rows(self, drafted: list[int], target_logits: torch.Tensor) -> list[dict]:
        target_argmax = target_logits.argmax(-1).tolist()
        target_probs = torch.softmax(target_logits / self.soft_temperature, -1)
        prefix_ok, rows = True, []
        for index, (token_id, (features, draft_logits, _)) in enumerate(zip(drafted, self._pending)):
            draft_probs = torch.softmax(draft_logits / self.soft_temperature, -1)
            soft = min(1.0, float(target_probs[index, token_id]) / max(float(draft_probs[token_id]), 1e-12))
            rows.append(feature_row(features, index) | {"label": int(token_id == target_argmax[index]),
                                                        "prefix_ok": prefix_ok, "soft": soft, "sampled": False})
            prefix_ok = prefix_ok and token_id == target_argmax[index]
        return rows

    def _sampled_rows(self, drafted: list[int], target_logits: torch.Tensor) -> list[dict]:
        rows = []
        for index, (token_id, (features, _, sampled_from)) in enumerate(zip(drafted, self._pending)):
            target_probs = draft_distribution(target_logits[index], self._settings)
            accept = min(1.0, float(target_probs[token_id]) / max(float(sampled_from[token_id]), 1e-12))
            rows.append(feature_row(features, index) | {"label": accept, "prefix_ok": True, "soft": accept,
                                                        "sampled": True})
        return rows


def feature_row(features, index: int) -> dict:
    """What the layer reads of one drafted token, as stored for training."""
    return {"hidden": features.hidden.half(), "draft_prob": features.draft_prob, "entropy": features.entropy,
            "margin": features.margin, "position": index, "history_rate": features.context.history_rate,
            "last_accepted": features.context.last_accepted, "prefix_log_prob": features.context.prefix_log_prob}


def evaluation_prompts() -> set[str]:
    """Every prompt the project measures or shows (assets/prompts/*.jsonl, the page's examples and the workshop's):
    never trained on."""
    assets = ASSETS_DIR
    prompts = {json.loads(line)["prompt"] for path in sorted((assets / "prompts").glob("*.jsonl"))
               for line in path.read_text().splitlines() if line.strip()}
    for name in ("examples.json", "workshop.json"):
        text = (assets / name).read_text() if (assets / name).exists() else ""
        prompts |= set(re.findall(r'"prompt":\s*"((?:[^"\\]|\\.)*)"', text))
    return {json.loads(f'"{prompt}"') if "\\" in prompt else prompt for prompt in prompts}


def collection_prompts(count: int, seed: int) -> list[str]:
    from .instructions import training_instructions

    excluded = evaluation_prompts()
    prompts = [prompt for prompt in training_instructions(seed) if prompt not in excluded]
    random.Random(seed).shuffle(prompts)
    return prompts[:count]


def collect(target, drafter, args) -> Path:
    """Greedy rows (and, with --sampling-temperature > 0, rows of a sampled run of each prompt) into data.pt."""
    from tqdm import tqdm

    out = Path(args.work) / "data.pt"
    done = torch.load(out) if out.exists() else {"prompts": [], "rows": []}
    done["collection"] = {"forced_draft_len": args.draft_len, "max_new_tokens": args.max_new_tokens,
                          "soft_temperature": args.soft_temperature, "sampling_temperature": args.sampling_temperature}
    prompts = collection_prompts(args.prompts, args.seed)
    temperatures = [0.0] + ([args.sampling_temperature] if args.sampling_temperature > 0 else [])
    for prompt in tqdm(prompts[len(done["prompts"]):], desc="collect", file=sys.stderr):
        prompt_index = len(done["prompts"])
        for temperature in temperatures:
            settings = validate_settings(max_new_tokens=args.max_new_tokens, temperature=temperature,
                                         gamma=args.draft_len, seed=args.seed + prompt_index)
            recorder = RecordingDrafter(args.draft_len, args.soft_temperature)
            for _ in recorder.run(target, drafter, target.encode_prompt(prompt), settings):
                pass
            done["rows"] += [row | {"prompt_index": prompt_index} for row in recorder.rows]
        done["prompts"].append(prompt)
        if len(done["prompts"]) % 10 == 0:
            torch.save(done, out)  # resumable
    torch.save(done, out)
    print(f"collected {len(done['rows'])} drafted tokens from {len(done['prompts'])} prompts → {out}")
    return out
