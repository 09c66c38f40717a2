"""The registry's PATCH bodies are their create bodies made optional (schemas.base.patch_of)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from specdash.api.schemas.base import In
from specdash.api.schemas.registry import ContainerIn, ContainerPatch, HostIn, HostPatch


@pytest.mark.parametrize(("body", "patch"), [(HostIn, HostPatch), (ContainerIn, ContainerPatch)])
def test_a_patch_body_has_every_field_of_its_create_body_optional(
    body: type[In], patch: type[In]
) -> None:
    assert list(patch.model_fields) == list(body.model_fields)
    assert all(not f.is_required() and f.default is None for f in patch.model_fields.values())
    assert patch.model_validate({}).model_dump(exclude_unset=True) == {}


def test_a_patch_body_keeps_the_create_bodys_bounds_and_refuses_unknown_fields() -> None:
    assert HostPatch.model_validate({"ssh_port": 2222}).model_dump(exclude_unset=True) == {
        "ssh_port": 2222
    }
    for bad in ({"ssh_port": 70_000}, {"address": "x" * 256}, {"notes": "a\x00b"}, {"rack": 4}):
        with pytest.raises(ValidationError):
            HostPatch.model_validate(bad)
    with pytest.raises(ValidationError):
        ContainerPatch.model_validate({"host_id": 0})
