"""The ``Target`` holds the target and nothing of the draft side; what drafts travels beside it (``LoadedDrafters``)
or with the run, and neither record can be changed in place."""
import dataclasses

import pytest

from pacer_core.drafters import LoadedDrafters, drafter_key, load_drafter
from pacer_core.models import Target
from pacer_core.testing.tiny import tiny_pair


def test_no_target_field_belongs_to_the_draft_side():
    names = [field.name for field in dataclasses.fields(Target)]
    assert "model" in names and "tokenizer" in names and "engine" in names
    assert not [name for name in names if name.startswith("draft")], names
    assert not [name for name in dir(Target) if "drafter" in name and not name.startswith("_")]


def test_the_target_and_what_was_loaded_beside_it_cannot_be_changed_in_place():
    target, drafter = tiny_pair()
    drafters = LoadedDrafters.around(drafter)
    with pytest.raises(dataclasses.FrozenInstanceError):
        target.vocab_size = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        drafters.default = None


def field_values(record) -> list:
    return [getattr(record, field.name) for field in dataclasses.fields(record)]


def test_another_drafter_is_built_from_what_was_loaded_and_leaves_both_records_as_they_were():
    target, drafter = tiny_pair()
    drafters = LoadedDrafters.around(drafter)
    before = field_values(target) + field_values(drafters)
    int8 = load_drafter(target, drafters, "self-int8")
    assert drafter_key(int8) == "self-int8" and drafter_key(drafters.default) == "small"
    assert all(old is new for old, new in zip(before, field_values(target) + field_values(drafters)))


def test_the_small_drafter_needs_a_loaded_draft_model():
    target, drafter = tiny_pair()
    without_model = LoadedDrafters(default=drafter)
    with pytest.raises(ValueError, match="no independent draft model|needs an independent draft model"):
        load_drafter(target, without_model, "small")
    assert load_drafter(target, LoadedDrafters.around(drafter), "small").model is drafter.model
