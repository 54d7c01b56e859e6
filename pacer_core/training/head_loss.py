"""The feature head's training objective (EAGLE, Li et al. 2024, arXiv 2401.15077, with the second
pass on its own predictions that later EAGLE versions add), as small functions over tensors.

Batch tensors: ids [B, L] (long), features [B, L, H] (the target's, float32), valid [B, L] (bool).
Head position i reads (f_i, e(x_{i+1})) and predicts f_{i+1}, whose logits score x_{i+2}."""
from __future__ import annotations

import torch
import torch.nn.functional as F

TEMPERATURES = (1.0, 0.7)


def second_pass_mask(length: int) -> torch.Tensor:
    """bool [n, length + n] with n = length - 1: the own-prediction query at position q+1 sees the real
    inputs at positions ≤ q and itself, exactly what the head sees when it drafts a second token."""
    seen_real = torch.ones(length - 1, length, dtype=torch.bool).tril(diagonal=0)
    return torch.cat([seen_real, torch.eye(length - 1, dtype=torch.bool)], dim=1)


def distribution_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Forward KL up to a constant: cross-entropy of the student against the teacher at each training
    temperature, over the kept ids, averaged over valid positions. Logits [B, T, K], valid [B, T]."""
    total = student_logits.new_zeros(())
    for temperature in TEMPERATURES:
        teacher_probs = torch.softmax(teacher_logits / temperature, dim=-1)
        student_log_probs = torch.log_softmax(student_logits / temperature, dim=-1)
        per_position = -(teacher_probs * student_log_probs).sum(-1)
        total = total + per_position[valid].mean()
    return total


def regression_loss(predicted: torch.Tensor, real: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    return F.smooth_l1_loss(predicted[valid], real[valid])


def head_losses(head, batch: dict, embedding, output_rows: torch.Tensor, regression_weight: float,
                second_pass: bool = True) -> tuple[torch.Tensor, dict]:
    """Loss over both passes and the figures to log (depth-1 and depth-2 top-1 agreement with the target)."""
    ids, features, valid = batch["ids"], batch["features"], batch["valid"]
    length = ids.shape[1]
    with torch.no_grad():
        next_embeddings = embedding(ids[:, 1:]).float()                    # e(x_1..x_{L-1})
        teacher_logits = features[:, 1:] @ output_rows.t()                  # scores x_2..x_L
    positions = torch.arange(length - 1, device=ids.device)
    predicted, past = head.predict_features(features[:, :-1], next_embeddings, positions)
    valid_first = valid[:, 1:]
    student_logits = predicted @ output_rows.t()
    loss = (distribution_loss(student_logits, teacher_logits, valid_first)
            + regression_weight * regression_loss(predicted, features[:, 1:], valid_first))
    stats = {"agree1": agreement(student_logits, teacher_logits, valid_first)}
    if second_pass and length > 2:
        mask = second_pass_mask(length - 1).to(ids.device)
        predicted_2, _ = head.predict_features(predicted[:, :-1].detach(), next_embeddings[:, 1:],
                                               torch.arange(1, length - 1, device=ids.device), past, mask)
        valid_second = valid[:, 2:]
        student_logits_2 = predicted_2 @ output_rows.t()
        loss = loss + (distribution_loss(student_logits_2, teacher_logits[:, 1:], valid_second)
                       + regression_weight * regression_loss(predicted_2, features[:, 2:], valid_second))
        stats["agree2"] = agreement(student_logits_2, teacher_logits[:, 1:], valid_second)
    stats["loss"] = float(loss.detach())
    return loss, stats


def agreement(student_logits: torch.Tensor, teacher_logits: torch.Tensor, valid: torch.Tensor) -> float:
    same = student_logits.argmax(-1) == teacher_logits.argmax(-1)
    return float(same[valid].float().mean())
