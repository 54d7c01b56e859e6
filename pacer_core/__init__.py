"""PACER Lab core: real speculative decoders (fixed-length SD, PACER, SMC-SD) on Hugging Face
causal LMs, emitting typed step events for the explainer UI, the benchmark and trace export."""
import os

__version__ = "0.1.0"   # PACER Lab's version: exported traces record it (pacer_core.trace)

# How OpenMP threads (torch's, and llama.cpp's for the gguf drafter) wait between parallel regions; only
# effective when set before torch is first imported. A short spin, then sleep: on a quiet 2-core CPU a target
# step took 50 ms and a llama.cpp draft step 8 ms, against 74 ms and 25 ms when threads sleep at once
# (OMP_WAIT_POLICY=PASSIVE), since a forward is hundreds of short parallel regions and each wake-up costs.
# On a machine shared with other busy processes sleeping at once is better (62 ms against 174 ms with one core
# taken; an unbounded spin was worse still): set OMP_WAIT_POLICY=PASSIVE there (docs/measurements.md,
# "Threads and OpenMP waiting"). A policy or spin count set by the user is kept.
if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")

from .api import generate, make_decoder, run_request, stream
from .decoders import Autoregressive, FixedSpeculative, Pacer
from .events import BlockDecision, Metrics, Result, SMCCycleEvent, StepEvent, TokenRecord
from .default_target import target_from_env
from .models import ModelLoadError, Target, load_target
from .request import RunRequest, build_request
from .settings import DecodeSettings, Limits, SettingsError, validate_settings

__all__ = ["generate", "stream", "make_decoder", "build_request", "run_request", "RunRequest",
           "Autoregressive", "FixedSpeculative", "Pacer",
           "BlockDecision", "Metrics", "Result", "SMCCycleEvent", "StepEvent", "TokenRecord",
           "ModelLoadError", "Target", "load_target", "target_from_env", "DecodeSettings", "Limits",
           "SettingsError", "validate_settings"]
