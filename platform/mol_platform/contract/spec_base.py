"""What every part of the ``MoLDeployment`` spec is built from: the model base class
(camelCase aliases, frozen, no unknown fields), adapter reference fields, defaulted
sub-objects and CEL rule lists. :mod:`mol_platform.contract.spec` and
:mod:`mol_platform.contract.spec_router` share them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from mol_platform.contract.refs import AdapterRef, RefError
from mol_platform.contract.spec_rules import REF_RULES


class SpecModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
    )


def _check_ref(value: str) -> str:
    try:
        AdapterRef.parse(value)
    except RefError as exc:
        raise ValueError(str(exc)) from None
    return value


AdapterRefStr = Annotated[str, AfterValidator(_check_ref), REF_RULES]
"""An adapter reference (``ns/name@ref``) field, checked with the message users see."""


def defaulted(factory: Callable[[], Any]) -> Any:
    """A field filled from ``factory`` when absent, and the CRD says so (``default``): the
    API server fills it before validation, so CEL rules may rely on it being there."""
    value = factory()
    return Field(default_factory=factory,
                 json_schema_extra={"default": {} if isinstance(value, BaseModel) else value})


def rules(*rules: dict[str, Any]) -> dict[str, Any]:
    return {"x-kubernetes-validations": list(rules)}
