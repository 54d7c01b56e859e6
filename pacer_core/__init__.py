"""PACER Lab core: real speculative decoders (fixed-length SD, PACER, SMC-SD) on Hugging Face
causal LMs, emitting typed step events for the explainer UI, the benchmark and trace export."""
import os

__version__ = "0.1.0"   # PACER Lab's version: exported traces record it (pacer_core.trace)

# Busy-waiting OpenMP threads starve each other on a shared 2-core CPU (a batched decode step measured
# 7.2 s busy-waiting vs 1.0 s passive). Only effective when set before torch is first imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from .api import generate, make_decoder, run_request, stream
from .decoders import Autoregressive, FixedSpeculative, Pacer
from .events import BlockDecision, Metrics, Result, SMCCycleEvent, StepEvent, TokenRecord
from .models import ModelLoadError, ModelPair, load_pair, pair_from_env
from .request import RunRequest, build_request
from .settings import DecodeSettings, Limits, SettingsError, validate_settings

__all__ = ["generate", "stream", "make_decoder", "build_request", "run_request", "RunRequest",
           "Autoregressive", "FixedSpeculative", "Pacer",
           "BlockDecision", "Metrics", "Result", "SMCCycleEvent", "StepEvent", "TokenRecord",
           "ModelLoadError", "ModelPair", "load_pair", "pair_from_env", "DecodeSettings", "Limits",
           "SettingsError", "validate_settings"]
