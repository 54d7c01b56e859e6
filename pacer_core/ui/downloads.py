"""Where the page writes the files it offers for download (a run's trace and metrics, an atlas's report): one folder
per app process, holding only the newest few, removed when the process ends.

Gradio copies a file it serves into its own cache as the handler returns (``gr.Blocks(delete_cache=...)`` ages
those copies out, ``CACHE_SCHEDULE``), so the originals are needed only until then. Written one fresh folder per
run under the system's temporary folder, they were never removed: a Space that served a class for a day kept
over a thousand of them. No Gradio here."""
from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
from collections import deque
from pathlib import Path

KEEP_FOLDERS = 32                       # the newest run folders kept: far more than runs that finish at once
CACHE_SCHEDULE = (3600, 4 * 3600)       # Gradio's copies: checked hourly, removed 4 hours after they were made


class DownloadFolders:
    """Fresh folders under one root made on first use; beyond ``keep`` the oldest go. Thread-safe: the page's
    handlers run on Gradio's worker threads."""

    def __init__(self, keep: int = KEEP_FOLDERS, parent: Path | None = None):
        if keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        self.keep, self.parent = keep, parent
        self.root: Path | None = None
        self._made: deque[Path] = deque()
        self._lock = threading.Lock()

    def fresh(self, prefix: str) -> Path:
        """A new empty folder named ``prefix``...; the oldest beyond ``keep`` are removed first."""
        with self._lock:
            if self.root is None or not self.root.is_dir():
                self.root = Path(tempfile.mkdtemp(prefix="pacer-downloads-", dir=self.parent))
                atexit.register(shutil.rmtree, self.root, True)
            while len(self._made) >= self.keep:
                shutil.rmtree(self._made.popleft(), ignore_errors=True)
            folder = Path(tempfile.mkdtemp(prefix=prefix, dir=self.root))
            self._made.append(folder)
            return folder

    def remove_all(self) -> None:
        """Every folder made, and the root (the process's exit does this too)."""
        with self._lock:
            if self.root is not None:
                shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
            self._made.clear()


DOWNLOADS = DownloadFolders()
