"""Where the page writes the files it offers for download (a run's trace and metrics, an atlas's report): one folder
per app process, holding only the newest few, removed when the process ends.

Gradio copies a file it serves into its own cache as the handler returns (``gr.Blocks(delete_cache=...)`` ages
those copies out, ``CACHE_SCHEDULE``), so the originals are needed only until then. Written one fresh folder per
run under the system's temporary folder, they were never removed: a Space that served a class for a day kept
over a thousand of them. A process that ends without its exit hooks (killed, crashed) leaves its folder; the next
app's first download removes the folders of processes no longer running (the process id is in the name). No Gradio
here."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from collections import deque
from pathlib import Path

ROOT_PREFIX = "pacer-downloads-"
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
                parent = self.parent or Path(tempfile.gettempdir())
                remove_orphans(parent)
                self.root = Path(tempfile.mkdtemp(prefix=f"{ROOT_PREFIX}{os.getpid()}-", dir=parent))
                atexit.register(shutil.rmtree, self.root, True)
                self._made.clear()              # the folders of a root removed from outside went with it
            while len(self._made) >= self.keep:
                shutil.rmtree(self._made.popleft(), ignore_errors=True)
            folder = Path(tempfile.mkdtemp(prefix=prefix, dir=self.root))
            self._made.append(folder)
            return folder

def owner_pid(folder: Path) -> int | None:
    """The process id a root's name carries (``pacer-downloads-<pid>-<random>``), None for any other name."""
    head, _, _ = folder.name.removeprefix(ROOT_PREFIX).partition("-")
    return int(head) if folder.name.startswith(ROOT_PREFIX) and head.isdigit() else None


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:       # alive, another user's
        return True
    return True


def remove_orphans(parent: Path) -> list[Path]:
    """Remove the download roots in ``parent`` whose process is gone; returns them."""
    orphans = [folder for folder in parent.glob(f"{ROOT_PREFIX}*")
               if folder.is_dir() and (pid := owner_pid(folder)) is not None and not process_alive(pid)]
    for folder in orphans:
        shutil.rmtree(folder, ignore_errors=True)
    return orphans


DOWNLOADS = DownloadFolders()
