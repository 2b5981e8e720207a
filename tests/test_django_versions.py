"""Django 5.2 LTS and Django 6.1, both tested: `make test` runs the suite on the
first, `make test-django61` on the second (docs/installation.rst). These tests
hold what differs between the two."""

from __future__ import annotations

import warnings
from pathlib import Path

import django
import pytest
from django.contrib import admin
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from assistant.admin.conversations import action_func_and_name
from assistant.models import Conversation
from tests.conftest import NEXT_RELEASE_WARNING

REQUIREMENTS = Path(__file__).resolve().parent.parent / "requirements"


def pins(name: str) -> dict[str, str]:
    found = {}
    for line in (REQUIREMENTS / name).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            requirement = Requirement(line)
            (spec,) = requirement.specifier
            found[canonicalize_name(requirement.name)] = spec.version
    return found


def test_the_django61_pins_differ_from_the_others_in_django_alone() -> None:
    ours, django61 = pins("constraints.txt"), pins("constraints-django61.txt")
    assert ours.keys() == django61.keys()
    assert {name for name in ours if ours[name] != django61[name]} == {"django"}
    assert django61["django"].startswith("6.1.")
    assert ours["django"].startswith("5.2.")


def test_the_next_releases_deprecations_are_errors_in_a_test() -> None:
    expected = {5: "RemovedInDjango60Warning", 6: "RemovedInDjango70Warning"}[django.VERSION[0]]
    assert NEXT_RELEASE_WARNING is getattr(django.utils.deprecation, expected)
    with pytest.raises(NEXT_RELEASE_WARNING):
        warnings.warn("removed in the next release", NEXT_RELEASE_WARNING, stacklevel=1)


def test_every_declared_action_is_found_by_its_name() -> None:
    """The conversation admin's permission check reads the declared actions:
    tuples on Django 5.2, Action objects on 6.1 (unpacking one is deprecated)."""
    model_admin = admin.site._registry[Conversation]
    declared = model_admin._get_base_actions()
    found = {name: func for func, name in map(action_func_and_name, declared)}
    assert set(found) == {func.__name__ for func in model_admin.actions}
    for func in model_admin.actions:
        assert found[func.__name__] is func
