"""Start ``app.py`` in a subprocess on 127.0.0.1 and a free port, for the end-to-end UI tests
(tests/test_app_server.py, tests/test_app_browser.py). The pair comes from the environment like
app.py itself (PACER_TARGET / PACER_DRAFT, default: the embedded pair)."""
from __future__ import annotations

import os
from pathlib import Path

from pacer_core.testing.app_runner import (ROOT, START_TIMEOUT_S, AppStartError, free_port, running_app,  # noqa: F401
                                          set_max_new_tokens)

__all__ = ["ROOT", "START_TIMEOUT_S", "AppStartError", "free_port", "running_app", "set_max_new_tokens",  # app_runner
           "CHROMIUM", "CHROMIUM_ARGS", "browser_marks", "embedded_pair_missing"]

CHROMIUM = os.environ.get("PACER_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def browser_marks() -> list:
    """The marks of a browser test module: it starts app.py on the embedded pair and drives chromium."""
    import pytest

    return [pytest.mark.browser, pytest.mark.server, pytest.mark.embedded,
            pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"chromium not found at {CHROMIUM}: install it "
                               "with 'apt-get update && apt-get install -y chromium'")]


def embedded_pair_missing() -> str | None:
    """Why the default (embedded) pair cannot load here, or None when it can (env overrides count)."""
    if os.environ.get("PACER_TARGET") and os.environ.get("PACER_DRAFT"):
        return None
    from pacer_core import embedded

    try:
        if not os.environ.get("PACER_TARGET"):
            embedded.find_gguf_file()
    except embedded.EmbeddedModelMissing as missing:
        return str(missing)
    if not os.environ.get("PACER_DRAFT"):
        draft_dir = embedded.EMBEDDED_DRAFT_DIR
        if not (draft_dir / "config.json").exists():
            return f"the embedded draft is not in {draft_dir} (set PACER_DRAFT to another draft to run this test)"
    return None


