"""PACER Lab: the live speculative-decoding explainer (Gradio).

    python app.py                                   # embedded pair on 127.0.0.1:7860
    python app.py --target HuggingFaceTB/SmolLM2-360M-Instruct --draft embedded --port 8000
    PACER_TARGET=... PACER_DRAFT=... python app.py  # the same through the environment
    python app.py --replay-only                     # recorded runs only, no model (PACER_REPLAY_ONLY=1)

The model pair is loaded once per process; every browser session keeps its own run state."""
from __future__ import annotations

import argparse
import os
import signal
import sys


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="PACER Lab: fixed-length SD, PACER and SMC-SD side by side, live.")
    parser.add_argument("--target", default=None, help="target model: hub id, local dir or 'embedded' "
                        "(default: $PACER_TARGET, else embedded; on a GPU a hub pair chosen for its memory)")
    parser.add_argument("--draft", default=None, help="drafter: hub id or local dir of a draft model, a folder "
                        "with a trained feature head, 'self-int8' or 'self-int4' (the target's own weights quantized "
                        "at load time, any target), 'gguf' (a GGUF file of the target run by llama.cpp on the CPU: "
                        "for the embedded target the file it was converted from, else --draft-gguf), or for the "
                        "embedded target 'embedded' (the default: gguf on a CPU where llama-cpp-python is installed, "
                        "else small), 'small' or 'head' (default: $PACER_DRAFT or embedded); the page can switch")
    parser.add_argument("--draft-gguf", default=None, dest="draft_gguf",
                        help="the GGUF file the 'gguf' drafter runs, for a target other than the embedded one "
                        "(default: $PACER_DRAFT_GGUF); its tokenizer must be the target's")
    parser.add_argument("--target-engine", default=None, dest="target_engine",
                        help="what runs the target: auto (llama.cpp on a float32 GGUF of the embedded target's own "
                        "weights, on a CPU where llama-cpp-python is installed; torch otherwise), torch or llama.cpp "
                        "(default: $PACER_TARGET_ENGINE or auto)")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 … (default: $PACER_DEVICE or auto)")
    parser.add_argument("--dtype", default=None, help="float32, bfloat16, float16 or auto (default: $PACER_DTYPE)")
    parser.add_argument("--draft-dtype", default=None, dest="draft_dtype",
                        help="the drafter's dtype when it should differ from the target's (default: $PACER_DRAFT_DTYPE "
                        "or the target's); exactness depends only on the target's")
    parser.add_argument("--draft-vocab", default=None, dest="draft_vocab",
                        help="how many of its most frequent ids the independent draft scores: all, or a number "
                        "(default: $PACER_DRAFT_VOCAB or the draft folder's recommendation)")
    parser.add_argument("--device-map", default=None, dest="device_map",
                        help="'auto' spreads a target too large for one GPU over all visible GPUs (accelerate)")
    parser.add_argument("--host", default=os.environ.get("PACER_HOST", os.environ.get("GRADIO_SERVER_NAME",
                                                                                      "127.0.0.1")),
                        help="interface to listen on (0.0.0.0 to serve a network; default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PACER_PORT", os.environ.get(
        "GRADIO_SERVER_PORT", "7860"))), help="port (default 7860)")
    parser.add_argument("--concurrency", type=int, default=None,
                        help="runs decoding at the same time (default: $PACER_CONCURRENCY or 1)")
    parser.add_argument("--replay-only", action="store_true", dest="replay_only",
                        default=os.environ.get("PACER_REPLAY_ONLY", "") not in ("", "0"),
                        help="serve only the Replay tab (recorded runs, uploaded traces) and load no model: "
                        "a Space for a whole class at no compute (default: $PACER_REPLAY_ONLY)")
    return parser.parse_args(argv)


def serve_replay_only(args: argparse.Namespace) -> int:
    """The replay page alone: no model pair is loaded."""
    from pacer_core.ui.layout import serve
    from pacer_core.ui.replay_tab import build_replay_ui

    print("[pacer] replay only: no model is loaded", file=sys.stderr, flush=True)
    serve(build_replay_ui(), host=args.host, port=args.port, concurrency=args.concurrency)
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")   # works offline; sends nothing anywhere
    if args.replay_only:
        return serve_replay_only(args)
    from pacer_core.compute_thread import COMPUTE_THREAD
    from pacer_core.default_target import target_from_env
    from pacer_core.models import ModelLoadError
    from pacer_core.ui.layout import build_ui

    COMPUTE_THREAD.adopt_current_thread()     # this thread loads the models and runs the page's model work

    print("[pacer] loading the model pair (once per process)…", file=sys.stderr, flush=True)
    try:
        target, drafters = target_from_env(target_source=args.target, draft=args.draft, device=args.device,
                                           dtype=args.dtype, draft_dtype=args.draft_dtype, device_map=args.device_map,
                                           draft_vocab=args.draft_vocab, draft_gguf=args.draft_gguf,
                                           target_engine=args.target_engine)
    except ModelLoadError as error:
        print(f"[pacer] {error}", file=sys.stderr)
        return 2
    info = target.describe(drafters.default)
    print(f"[pacer] target {info['target']} on {info['target_engine']} | drafter {info['draft']} "
          f"({info['drafter']['kind']}) | {info['device']} {info['dtype']} "
          f"(drafter {info['drafter'].get('dtype', info['dtype'])})",
          file=sys.stderr, flush=True)
    from pacer_core.ui.drafter_menu import DrafterMenu
    for key, why in DrafterMenu(target, drafters).left_out().items():
        print(f"[pacer] drafter {key} not offered: {why}", file=sys.stderr, flush=True)
    # pair_note: e.g. why a GPU default fell back; warm: every method once, so the first Run is timed like later ones
    demo = build_ui(target, drafters, pair_note=target.load_note or None, warm=True)
    serve_on_main_thread(demo, args)
    return 0


def serve_on_main_thread(demo, args: argparse.Namespace) -> None:
    """Gradio serves from its own threads while this thread, which loaded the models, runs the page's model work
    (``pacer_core.compute_thread``: one OpenMP team in the process, so the page decodes at a script's speed)."""
    from pacer_core.compute_thread import COMPUTE_THREAD
    from pacer_core.heap import freeze_loaded_heap
    from pacer_core.ui.layout import serve

    serve(demo, host=args.host, port=args.port, concurrency=args.concurrency, prevent_thread_lock=True)
    print(f"[pacer] startup's objects frozen out of the collector in {freeze_loaded_heap():.2f} s", file=sys.stderr,
          flush=True)      # a full collection then never stalls a timed method (pacer_core/heap.py)
    signal.signal(signal.SIGTERM, stop_on_sigterm)   # a Space or a supervisor stops the app as Ctrl-C does
    try:
        COMPUTE_THREAD.serve_forever()
    except KeyboardInterrupt:
        print("[pacer] stopping", file=sys.stderr, flush=True)
        demo.close()


def stop_on_sigterm(signum, frame) -> None:
    """SIGTERM ends the app as Ctrl-C does, so that its exit hooks run (its download folder goes: ui/downloads.py);
    Python's default for SIGTERM ends the process without them."""
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
