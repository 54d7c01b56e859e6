"""The page's download folders: one root per process, only the newest runs kept (a long-lived Space must not fill
its temporary folder, one folder a run), and the app's Blocks age Gradio's copies out."""
import os
import shutil
import threading

import pytest

from pacer_core.ui.downloads import CACHE_SCHEDULE, DownloadFolders, owner_pid


def test_folders_share_one_root_and_start_empty(tmp_path):
    folders = DownloadFolders(keep=4, parent=tmp_path)
    first, second = folders.fresh("pacer-run-"), folders.fresh("pacer-atlas-")
    assert first.parent == second.parent == folders.root and folders.root.parent == tmp_path
    assert first != second and list(first.iterdir()) == [] and second.name.startswith("pacer-atlas-")


def test_only_the_newest_folders_are_kept(tmp_path):
    folders = DownloadFolders(keep=3, parent=tmp_path)
    made = []
    for _ in range(7):
        made.append(folders.fresh("pacer-run-"))
        (made[-1] / "pacer-trace.json").write_text("{}")
    assert [folder.exists() for folder in made] == [False] * 4 + [True] * 3
    assert sorted(folders.root.iterdir()) == sorted(made[-3:])


def test_a_folder_removed_from_outside_is_remade(tmp_path):
    folders = DownloadFolders(keep=2, parent=tmp_path)
    folders.fresh("pacer-run-")
    shutil.rmtree(folders.root)                 # a cleaner of the temporary folder, say
    assert not any(tmp_path.iterdir())
    again = folders.fresh("pacer-run-")
    assert again.is_dir() and again.parent.parent == tmp_path


def test_threads_never_exceed_the_bound(tmp_path):
    folders = DownloadFolders(keep=5, parent=tmp_path)
    threads = [threading.Thread(target=lambda: [folders.fresh("pacer-run-") for _ in range(20)]) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(list(folders.root.iterdir())) == 5


def test_keep_must_be_positive():
    with pytest.raises(ValueError, match="at least 1"):
        DownloadFolders(keep=0)


def test_the_app_ages_gradios_copies_out():
    gr = pytest.importorskip("gradio")
    from pacer_core.ui.replay_tab import build_replay_ui

    demo = build_replay_ui()
    assert isinstance(demo, gr.Blocks) and demo.delete_cache == CACHE_SCHEDULE
    frequency, age = CACHE_SCHEDULE
    assert 0 < frequency <= age


def test_a_dead_processs_folder_goes_when_the_next_app_writes_its_first(tmp_path):
    """A process killed without its exit hooks leaves its root; the next one's first download removes it, and
    never a live process's root (this one's) or a folder of another name."""
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    orphan = tmp_path / f"pacer-downloads-{int(dead.stdout)}-abc"
    (orphan / "pacer-run-x").mkdir(parents=True)
    live = tmp_path / f"pacer-downloads-{os.getpid()}-def"
    other = tmp_path / "pacer-downloads-notapid"
    live.mkdir(), other.mkdir()
    folders = DownloadFolders(parent=tmp_path)
    made = folders.fresh("pacer-run-")
    assert not orphan.exists() and live.is_dir() and other.is_dir() and made.is_dir()
    assert owner_pid(folders.root) == os.getpid()


def test_the_app_ends_on_sigterm_with_its_exit_hooks():
    """app.py turns SIGTERM into Ctrl-C's path, so the download folder's exit hook runs when a Space stops it."""
    import signal

    from script_module import load_script

    app = load_script("app.py")
    with pytest.raises(KeyboardInterrupt):
        app.stop_on_sigterm(signal.SIGTERM, None)
