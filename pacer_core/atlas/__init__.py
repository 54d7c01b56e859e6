"""The acceptance atlas: where a drafter's guesses are accepted and where they are not, over a prompt set.

``runner`` decodes each prompt through the engine (``api.run_request``; no second decoding loop) and keeps the
drafted tokens the target judged; ``counts`` holds the arithmetic (by draft position, kind of token, prompt
category, the drafter's confidence; the rejections); ``report`` builds ``atlas.json`` and writes it with
``atlas.csv`` and ``report.md``; ``cli`` is ``python -m pacer_core.atlas``. The page's Atlas tab
(``pacer_core.ui.atlas_tab``) runs the same functions."""
from .counts import Judgment, judged_drafts
from .token_kinds import TOKEN_KINDS, token_kind
from .report import build_atlas, write_atlas
from .runner import AtlasPrompt, atlas_lane, load_atlas_prompts, run_prompts

__all__ = ["AtlasPrompt", "Judgment", "TOKEN_KINDS", "atlas_lane", "build_atlas", "judged_drafts",
           "load_atlas_prompts", "run_prompts", "token_kind", "write_atlas"]
