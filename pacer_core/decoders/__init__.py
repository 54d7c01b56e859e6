"""One decoder per method; each ``run(pair, prompt_ids, settings, cancel)`` yields step events and
ends with a Result."""
from .autoregressive import Autoregressive
from .fixed import FixedSpeculative
from .pacer import Pacer
from .smc import SMC

__all__ = ["Autoregressive", "FixedSpeculative", "Pacer", "SMC"]
