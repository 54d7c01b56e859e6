"""Load the app's pair as on a GPU with a given memory, on this CPU (tests/test_gpu_default_pair.py).

    python tests/gpu_stand_in.py GB pair               print the loaded pair as one JSON line
    python tests/gpu_stand_in.py GB app --port N ...   serve app.py with that pair

What is stood in: torch.cuda says a GPU with GB decimal gigabytes is visible, and ``default_target.load_target`` loads on the
CPU whatever device it is asked for (recording the device asked). Everything else is real: the choice, the hub ids
resolved by transformers (through $HF_HOME, offline in the tests), the fallback, the page."""
from __future__ import annotations

import json
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from pacer_core import default_target, generate  # noqa: E402

REQUESTED_DEVICES: list[str] = []
_real_load_target = default_target.load_target


def load_on_cpu(**settings):
    REQUESTED_DEVICES.append(str(settings.get("device")))
    return _real_load_target(**(settings | {"device": "cpu"}))


def stand_in_gpu(memory_gb: float) -> None:
    torch.cuda.is_available = lambda: True
    torch.cuda.get_device_properties = lambda index=0: types.SimpleNamespace(total_memory=int(memory_gb * 1e9))
    default_target.load_target = load_on_cpu


def describe_pair() -> dict:
    target, drafters = default_target.target_from_env()
    decoded = generate(target, drafters.default, "fixed", "Hello world", max_new_tokens=4, chat=False)
    return {"target": target.name, "draft": drafters.small_model_id, "model_type": target.model.config.model_type,
            "requested_devices": REQUESTED_DEVICES, "note": target.load_note, "tokens": len(decoded.token_ids)}


def main(argv: list[str]) -> int:
    stand_in_gpu(float(argv[0]))
    if argv[1] == "pair":
        print(json.dumps(describe_pair()))
        return 0
    sys.path.insert(0, str(ROOT))
    import app
    return app.main(argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
