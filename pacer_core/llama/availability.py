"""Why llama.cpp cannot run a GGUF file here (None: it can): llama-cpp-python missing, no file, or an installed
build that died (or hung) decoding it in a child process (``proof.py``: proven once per library, file and CPU,
then cached)."""
from __future__ import annotations

from .. import embedded
from .model import GGUFUnavailable, check_gguf_file, llama_unavailable
from .proof import prove


def native_build_unavailable(path) -> str | None:
    """Why llama.cpp cannot be trusted to run this file here: it is not a GGUF file, or the installed build died
    (or hung) decoding it in a child process. None when it runs."""
    try:
        checked = check_gguf_file(path)
    except GGUFUnavailable as failure:
        return str(failure)
    verdict = prove(checked)
    return None if verdict.ok else verdict.reason


def embedded_gguf_unavailable() -> str | None:
    """Why the embedded target's own GGUF cannot run here (no llama-cpp-python, no file, a build that fails its
    proof), or None: what ``models.default_embedded_drafter`` asks before choosing gguf, and the llama.cpp target
    engine before it starts."""
    return llama_unavailable() or embedded_file_unavailable()


def embedded_file_unavailable() -> str | None:
    try:
        path = embedded.find_gguf_file()
    except embedded.EmbeddedModelMissing as absent:
        return str(absent)
    return native_build_unavailable(path)
