"""Training utilities (the embedded draft model distillation pipeline)."""
