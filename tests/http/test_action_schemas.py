"""Each action type's schema in the OpenAPI document is generated from its JSON shape in
``engine.action_kinds``, and what the engine's actions turn into validates against it."""

from __future__ import annotations

import jsonschema
import pytest
from tests.engine.action_samples import SAMPLES

from nodefence.engine.action_kinds import KINDS, kind_of
from nodefence.engine.model import Action
from nodefence.engine.render import action_to_dict
from nodefence.http.openapi import ACTION_SCHEMAS, openapi_document


def test_every_action_type_has_its_schema_in_the_document() -> None:
    components = openapi_document()["components"]["schemas"]
    for kind in KINDS:
        schema = components[kind.action.__name__]
        assert schema == ACTION_SCHEMAS[kind.action.__name__]
        assert schema["properties"]["type"]["const"] == kind.name
        assert set(schema["required"]) == set(schema["properties"])


def test_a_decision_lists_each_action_type_as_one_of_its_actions() -> None:
    decision = openapi_document()["components"]["schemas"]["Decision"]
    listed = {
        ref["$ref"].rsplit("/", 1)[1] for ref in decision["properties"]["actions"]["items"]["anyOf"]
    }
    assert listed == {kind.action.__name__ for kind in KINDS}


@pytest.mark.parametrize("action", SAMPLES, ids=lambda action: type(action).__name__)
def test_every_action_validates_against_its_schema(action: Action) -> None:
    jsonschema.validate(action_to_dict(action), ACTION_SCHEMAS[type(action).__name__])
    for other in KINDS:
        if other is not kind_of(action):
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate(action_to_dict(action), ACTION_SCHEMAS[other.action.__name__])
