"""Long drafts for studying a length policy: PACER drafting every step to a cap (the threshold rule at 0, so nothing
stops a draft early), and for each step that drafted the whole cap, every drafted token's pre-verifier estimate e_i
and the target's acceptance probability a_i = min(1, p(x_i)/q(x_i)) given the tokens before it (greedy: 1 where x_i
is the target's argmax, else 0). ``benchmarks/length_headroom.py`` prices policies on them;
``training/calibration.py`` fits the cost rule's reading of the greedy estimates to them."""
from __future__ import annotations

from .api import generate


def full_steps(result, cap: int) -> list[dict]:
    """The steps of a run that drafted the whole cap: {"estimates": [e_i], "accept_probs": [a_i]}."""
    steps = []
    for event in result.events:
        drafted = event.tokens[: event.n_drafted] if getattr(event, "kind", "") == "step" else []
        if len(drafted) == cap and all(t.preverifier_prob is not None and t.accept_prob is not None for t in drafted):
            steps.append({"estimates": [float(t.preverifier_prob) for t in drafted],
                          "accept_probs": [float(t.accept_prob) for t in drafted]})
    return steps


def long_draft_steps(target, drafter, preverifier, prompt: str, cap: int, max_new_tokens: int,
                     temperature: float = 0.0, seed: int = 0) -> list[dict]:
    """``full_steps`` of one long-draft PACER run on ``prompt`` (blocks of one token, no phrases)."""
    result = generate(target, drafter, "pacer", prompt, preverifier=preverifier, max_new_tokens=max_new_tokens,
                      temperature=temperature, seed=seed, stop_rule="threshold", threshold=0.0, block_size=1,
                      max_draft_len=cap, phrase_len=0)
    return full_steps(result, cap)
