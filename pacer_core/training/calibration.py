"""How the cost rule reads a trained layer's greedy estimates: a Platt map, a = σ(slope · logit(e) + offset), fitted
by maximum likelihood to the target's verdicts on long drafts (``pacer_core.long_drafts``) over prompts outside the
held-out sets, and stored in the layer's config.json as ``greedy_calibration``
(``TrainedPreVerifier.cost_rule_estimate``). The layer is trained to rank tokens; the cost rule multiplies its
estimates into the chance a whole prefix is kept, so it needs them calibrated, and on held-out prompts the shipped
`gguf` layer's were not: tokens it put at 0.54-0.98 (mean 0.88) were kept 78% of the time
(docs/measurements.md, "PACER against fixed lengths").

Run it again after ``python -m pacer_core.training.preverifier`` retrains the layer: that writes config.json anew,
without the map.

    .venv/bin/python -m pacer_core.training.calibration --drafter gguf
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time

from ..drafters import load_drafter
from ..long_drafts import long_draft_steps
from ..models import load_target
from ..preverifier import default_preverifier
from ..preverifier.model import ASSETS_DIR, pair_slug
from ..prompts import load_prompts
from ..stopping import clipped_logit


def fit_platt(estimates: list[float], outcomes: list[float], iterations: int = 50,
              ridge: float = 1e-6) -> tuple[float, float]:
    """(slope, offset) maximising Σ y log σ(s x + o) + (1 − y) log(1 − σ(s x + o)), x = logit(e), y the outcome (0/1,
    or a probability): Newton's method on the two parameters from the identity map (1, 0), ``ridge`` keeping the
    Hessian invertible where every x is alike."""
    inputs = [clipped_logit(estimate) for estimate in estimates]
    slope, offset = 1.0, 0.0
    for _ in range(iterations):
        grad_slope = grad_offset = h_ss = h_so = h_oo = 0.0
        for x, y in zip(inputs, outcomes):
            predicted = 1.0 / (1.0 + math.exp(-(slope * x + offset)))
            weight = predicted * (1.0 - predicted)
            grad_slope += (predicted - y) * x
            grad_offset += predicted - y
            h_ss, h_so, h_oo = h_ss + weight * x * x, h_so + weight * x, h_oo + weight
        h_ss, h_oo = h_ss + ridge, h_oo + ridge
        determinant = h_ss * h_oo - h_so * h_so
        step_slope = (h_oo * grad_slope - h_so * grad_offset) / determinant
        step_offset = (h_ss * grad_offset - h_so * grad_slope) / determinant
        slope, offset = slope - step_slope, offset - step_offset
        if abs(step_slope) + abs(step_offset) < 1e-10:
            break
    return slope, offset


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pacer_core.training.calibration",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--drafter", default="gguf")
    parser.add_argument("--prompts", default="assets/prompts/validation.jsonl,assets/prompts/code-calibration.jsonl",
                        help="comma-separated prompt files, none of them held out")
    parser.add_argument("--limit", type=int, default=0, help="the first N prompts of each file (0 = all)")
    parser.add_argument("--max-draft-len", type=int, default=24)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--dry-run", action="store_true", help="fit and print; write nothing")
    args = parser.parse_args(argv)
    target, drafters = load_target("embedded", "embedded")
    drafter = load_drafter(target, drafters, args.drafter)
    preverifier = default_preverifier(target, drafter)
    if getattr(preverifier, "kind", None) != "trained":
        print(f"error: the {args.drafter} drafter has no trained pre-verification layer to calibrate", file=sys.stderr)
        return 2
    files = [path for path in args.prompts.split(",") if path]
    steps = [step for path in files for record in load_prompts(path)[: args.limit or None]
             for step in long_draft_steps(target, drafter, preverifier, record["prompt"], args.max_draft_len,
                                          args.max_new_tokens)]
    estimates = [e for step in steps for e in step["estimates"]]
    outcomes = [a for step in steps for a in step["accept_probs"]]
    if not estimates:
        print("error: no step drafted the whole cap", file=sys.stderr)
        return 2
    slope, offset = fit_platt(estimates, outcomes)
    record = {"slope": round(slope, 4), "offset": round(offset, 4), "tokens": len(estimates), "steps": len(steps),
              "source": f"python -m pacer_core.training.calibration --drafter {args.drafter} on {', '.join(files)}, "
                        f"greedy, drafts of {args.max_draft_len}, {time.strftime('%Y-%m-%d')}"}
    print(json.dumps(record, indent=1))
    if not args.dry_run:
        config_path = ASSETS_DIR / "preverifiers" / pair_slug(target.name, drafter.name) / "config.json"
        config = json.loads(config_path.read_text()) | {"greedy_calibration": record}
        config_path.write_text(json.dumps(config, indent=2))
        print(f"wrote greedy_calibration into {config_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
