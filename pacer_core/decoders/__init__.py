"""One decoder per method. Each ``run(target, drafter, prompt_ids, settings, cancel=None, keep_rows=False)``
yields one event per target forward pass (``events.StepEvent``; SMC-SD: ``events.SMCCycleEvent``) and ends with
an ``events.Result``.

Modules: ``base`` (the decoding state and the draft → verify → accept → commit loop the speculative decoders
share), ``verify`` (the accept rule, ``judge``), ``autoregressive`` (AR, the yardstick), ``fixed`` (fixed-length
SD), ``pacer`` and ``pacer_state`` (PACER), ``smc`` (SMC-SD) and ``oracle`` (``OracleLength``, PACER's greedy
yardstick in the bench)."""
from .autoregressive import Autoregressive
from .fixed import FixedSpeculative
from .pacer import Pacer
from .smc import SMC

__all__ = ["Autoregressive", "FixedSpeculative", "Pacer", "SMC"]
