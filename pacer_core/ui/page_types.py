"""The page's value types, shared by every handler: what one app holds for all its clicks (``AppContext``), what
one click reads from the controls (``PageInputs``) and what one handler step changes on the page
(``ViewUpdate``). No Gradio here: ``layout`` maps each ViewUpdate onto its components, the tests and
benchmarks/ui_overhead.py call the handlers directly."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..settings import Limits
from . import page
from .frames import DrawnFrames

if TYPE_CHECKING:
    from ..drafters.drafter import Drafter
    from ..models import Target
    from .drafter_menu import DrafterMenu
    from .session import RunSession


@dataclass(frozen=True)
class AppContext:
    """What every handler of one app shares: the target loaded once per process, the drafter its runs draft with,
    PACER's pre-verifier, the Space owner's limits (read once, here or by ``build_ui``) and the drafters the page
    offers (``drafter_menu``; None: only ``drafter``)."""
    target: Target
    drafter: Drafter
    preverifier: object = None
    preverifier_kind: str = "heuristic"     # "trained" or "heuristic"
    limits: Limits = field(default_factory=Limits.from_env)
    drafter_menu: DrafterMenu | None = None
    frames: DrawnFrames = field(default_factory=DrawnFrames)   # the page's acknowledgements of drawn frames


@dataclass(frozen=True)
class PageInputs:
    """The controls' values for one click."""
    prompt: str
    settings: dict              # setting name → control value; threshold None: the pre-verifier's own
    chat: bool = False
    measure_ar: bool = True
    drafter: str | None = None  # the drafter menu's key (drafters.drafter_keys()); None: the context's own
    acknowledges: bool = False  # the page says when it has drawn a frame (ui/frames.py); an API client does not

    def key(self) -> tuple:
        """Equal to ``RunSession.key()`` of a session started from these inputs."""
        return (self.prompt, tuple(sorted(self.settings.items())), self.chat, self.drafter or None)


@dataclass
class ViewUpdate:
    """What one handler step changes on the page. A field left None keeps what the page shows."""
    columns: dict[str, object] | None = None    # method → column HTML, or a running column in parts (ui/live.py)
    plots: dict[str, object] | None = None      # chart name (``charts.chart_names()``) → plotly figure
    status: str | None = None                   # run-status HTML
    narration: str | None = None                # narration HTML
    table: object | None = None                 # metrics DataFrame
    downloads: tuple[str, str] | None = None    # (JSON trace path, CSV metrics path)
    session: RunSession | None = None           # the session to keep for the next click
    warning: str | None = None                  # plain text for a toast (escaped by the wiring)


def error_update(message: str) -> ViewUpdate:
    """A refused click: the message in the status line and as a warning."""
    return ViewUpdate(status=page.run_status_html(message, "error"), warning=message)
