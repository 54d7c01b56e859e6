"""The live explainer: pure renderers (events → escaped HTML, plotly figures, metrics tables), the
per-session run state, the button handlers, and ``build_ui(target, drafters, ...)`` that lays out the Gradio
app and wires its events.

Data flows one way: decoders yield events → ``session`` collects them → ``handlers`` (the buttons; the timing
phase in ``timing_turn``, the replayed race in ``race_replay``, the drafter choice in ``drafter_switch``) turn
each click into ``ViewUpdate``s (``page_types``) built by ``views`` from the renderers (``columns``,
``smc_panel``, ``narration``, ``page``, the charts of ``charts``, ``tables``; all untrusted text through
``escape``; while Run streams, ``live`` keeps each column's rendered steps so an update costs and sends only
what changed) → ``layout`` puts them on the page. Which methods there are, their labels, lanes and colours
come from ``pacer_core.method_table``, read when needed. Only ``layout`` and the tabs it adds (``replay_tab``:
a recorded run shown again by ``replay``) import Gradio. Nothing here touches a KV cache."""


def build_ui(target, drafters, **kwargs):
    """The gr.Blocks app for one loaded Target and its ``LoadedDrafters`` (imported lazily: gradio is heavy)."""
    from .layout import build_ui as _build

    return _build(target, drafters, **kwargs)


__all__ = ["build_ui"]
