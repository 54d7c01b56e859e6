"""The live explainer: pure renderers (events → escaped HTML, plotly figures, metrics tables), the
per-session run state, the button handlers, and ``build_ui(pair, drafter)`` that lays out the Gradio app and
wires its events.

Data flows one way: decoders yield events → ``session`` collects them → ``handlers`` turn each click
into ``ViewUpdate``s built by the renderers (``columns``, ``smc_panel``, ``narration``, ``page``,
``plots``, ``tables``; all untrusted text through ``escape``; while Run streams, ``live`` keeps each column's
rendered steps so an update costs and sends only what changed) → ``layout`` puts them on the page.
Only ``layout`` and the tabs it adds (``replay_tab``: a recorded run shown again by ``replay``) import Gradio. Nothing here touches a KV cache."""

METHOD_LABELS = {
    "ar": "Autoregressive (AR)",
    "fixed": "Fixed-length SD",
    "pacer": "PACER",
    "smc": "SMC-SD (approximate)",
}
COLUMN_METHODS = ("fixed", "pacer", "smc")


def build_ui(target, **kwargs):
    """The gr.Blocks app for one loaded Target (imported lazily: gradio is heavy)."""
    from .layout import build_ui as _build

    return _build(target, **kwargs)


__all__ = ["METHOD_LABELS", "COLUMN_METHODS", "build_ui"]
