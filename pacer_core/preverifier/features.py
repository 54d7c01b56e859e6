"""Per-token features for the pre-verifier, all computed from what the draft already produced."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class TokenFeatures:
    """Features of one drafted token x chosen from the draft distribution at its position."""
    hidden: torch.Tensor        # [H] the draft's last hidden state that produced q
    draft_prob: float           # q(x) at temperature 1
    entropy: float              # entropy of q at temperature 1 (nats)
    margin: float               # top-1 minus top-2 probability of q
    position: int               # 0-based position in the whole draft of this step

    def scalars(self) -> torch.Tensor:
        """[4] the non-hidden features, as the layer consumes them."""
        return torch.tensor([self.draft_prob, self.entropy, self.margin, float(self.position)])


def token_features(draft_logits: torch.Tensor, hidden: torch.Tensor, chosen_id: int, position: int) -> TokenFeatures:
    """draft_logits: [V] raw logits at the position; hidden: [H]."""
    draft_probs = torch.softmax(draft_logits.float(), dim=-1)
    top_two = torch.topk(draft_probs, 2).values
    entropy = -(draft_probs * torch.log(draft_probs.clamp_min(1e-30))).sum()
    return TokenFeatures(hidden=hidden.detach().float().cpu(), draft_prob=float(draft_probs[chosen_id]),
                         entropy=float(entropy), margin=float(top_two[0] - top_two[1]), position=position)
