"""Plain autoregressive decoding with the target alone: the yardstick for every speed figure."""
from __future__ import annotations

import time
from typing import Iterator

from ..events import StepEvent, TokenRecord
from ..settings import DecodeSettings
from .base import CancelFlag, DecodeState, commit, finish, make_state, pick_next, steps_until_done


class Autoregressive:
    name = "ar"

    def run(self, target, drafter, prompt_ids: list[int], settings: DecodeSettings,
            cancel: CancelFlag | None = None, keep_rows: bool = False) -> Iterator:
        """The target alone, on the engine the runs drafting with ``drafter`` verify on (None: no drafter)."""
        state = make_state(target, drafter, prompt_ids, settings, with_draft=False, keep_rows=keep_rows)
        events = []
        if (yield from steps_until_done(lambda: state.finish_reason is not None,
                                        lambda step: self.step(target, state, settings, step), events, cancel)):
            state.finish_reason = "cancelled"
        yield finish(self.name, target, state, events, settings, {})

    def step(self, target, state: DecodeState, settings: DecodeSettings, step: int) -> StepEvent:
        """One target call: the next token, committed (the first from the prefill's row where the engine gave one)."""
        started = time.perf_counter()
        target_logits_row = state.take_first_target_row()
        if target_logits_row is None:
            target_logits_row = state.target.feed_sequence(state.sequence, keep=1)[-1]
        token_id, shown_prob = pick_next(target_logits_row, settings, state.generator)
        seconds = time.perf_counter() - started
        emitted = commit(state, [token_id], settings)
        state.record_log_probs(target_logits_row[None], emitted, settings)
        return StepEvent(method=self.name, step=step,
                         tokens=[TokenRecord(token_id, target.token_texts([token_id])[0], "target",
                                             target_prob=shown_prob)],
                         emitted_ids=emitted, emitted_text=target.decode(emitted), n_drafted=0, n_accepted=0,
                         draft_seconds=0.0, verify_seconds=seconds, total_new_tokens=state.new_tokens,
                         prefill_seconds=state.take_prefill_seconds())
