"""Every registered check is documented and well-formed (as sos does for its plug-ins)."""

from __future__ import annotations

from typing import Type

import pytest

from strata_doctor.registry import Check, builtin_checks, valid_id
from tests.conftest import REPO

CHECKS = builtin_checks()


@pytest.mark.parametrize("cls", CHECKS, ids=[c.id for c in CHECKS])
def test_check_metadata(cls: Type[Check]) -> None:
    assert valid_id(cls.id), cls.id
    assert cls.title and cls.title[0].isupper()
    doc = (cls.__doc__ or "").strip()
    assert len(doc.splitlines()) >= 3, f"{cls.id}: the docstring is its documentation"


@pytest.mark.parametrize("cls", CHECKS, ids=[c.id for c in CHECKS])
def test_check_has_a_docs_page_that_opens_with_its_docstring(cls: Type[Check]) -> None:
    page = REPO / "docs" / "checks" / f"{cls.id}.md"
    assert page.is_file(), f"missing {page}"
    text = page.read_text()
    assert text.startswith(f"# {cls.id}\n")
    first_line = (cls.__doc__ or "").strip().splitlines()[0]
    assert first_line in text, f"{page} should quote the docstring's summary: {first_line!r}"
    assert "## Silencing" in text


def test_ids_are_unique() -> None:
    ids = [c.id for c in CHECKS]
    assert len(ids) == len(set(ids))


def test_every_docs_page_belongs_to_a_check() -> None:
    ids = {c.id for c in CHECKS}
    pages = {p.stem for p in (REPO / "docs" / "checks").glob("*.md")}
    assert pages <= ids, f"pages without a check: {sorted(pages - ids)}"
