"""strata-doctor explain: a check's page, or one finding's rows of it, from the copy of
docs/checks that the package holds (``strata_doctor/pages``), so an installed copy explains
what ``check`` finds without the repository or a network."""

from __future__ import annotations

import re
import textwrap
from typing import TYPE_CHECKING, List, Optional, Sequence, Type

import click

from strata_doctor.cli.options import UsageFailure, complete_ids

if TYPE_CHECKING:
    from importlib.abc import Traversable

    from strata_doctor.check import Check
    from strata_doctor.model import Crash

FINDINGS = re.compile(r"^## Findings\n(.*?)(?=^## |\Z)", re.S | re.M)
"""A page's Findings section: its table of ids and what follows up to the next heading."""

WIDTH = 79
"""The index's lines wrap here."""


@click.command("explain")
@click.argument("topic", required=False, metavar="[CHECK[/FINDING]]", shell_complete=complete_ids)
def explain_command(topic: Optional[str]) -> None:
    """Print a check's page (docs/checks), or with /FINDING that finding's part of it; alone,
    list the checks and their finding ids."""
    from strata_doctor.registry import all_checks, unknown_id

    checks, failed = all_checks()
    if topic is None:
        click.echo(index(checks, failed), nl=False)
        return
    why = unknown_id(topic, checks, (c.check for c in failed))
    if why:
        raise UsageFailure(f"explain {topic}: {why}")
    check_id, _, finding = topic.partition("/")
    page = read_page(check_id)
    if page is None:
        click.echo(no_page(check_id, checks, failed), nl=False)
    elif finding:
        click.echo(finding_part(check_id, page, finding), nl=False)
    else:
        click.echo(page if page.endswith("\n") else page + "\n", nl=False)


def read_page(check_id: str) -> Optional[str]:
    """The packaged ``pages/<check_id>.md``, or None when the package has no such page (a
    plug-in's check) or it cannot be read."""
    from strata_doctor.registry import valid_id

    if not valid_id(check_id):  # a failed plug-in's name is no file name
        return None
    for folder in _page_folders():
        try:
            return folder.joinpath(f"{check_id}.md").read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
    return None


def _page_folders() -> List[Traversable]:
    """Where the pages are: ``strata_doctor/pages`` as a wheel or a strict editable install
    lays it out, then a checkout's ``docs/checks`` beside ``doctor/`` (an ordinary editable
    install imports doctor/ itself, and maps no folder of data)."""
    from importlib.resources import files  # of the regular package: Python 3.9 reads it alike
    from pathlib import Path

    import strata_doctor

    package = files("strata_doctor")
    folders: List[Traversable] = [package.joinpath("pages")]
    source = Path(strata_doctor.__file__).resolve().parent
    if source.name == "doctor":
        folders.append(source.parent / "docs" / "checks")
    return folders


def page_title(page: str) -> str:
    """The page's heading and the paragraph under it (its one-sentence summary)."""
    paragraphs = page.strip("\n").split("\n\n")
    return "\n\n".join(paragraphs[:2]) if len(paragraphs) > 1 else paragraphs[0]


def row_ids(line: str) -> List[str]:
    """The ids a Findings row names in its first cell (``| `madvise` / `always` | ok |``)."""
    cells = line.split("|")
    return re.findall(r"`([^`]+)`", cells[1]) if len(cells) > 2 else []


def finding_part(check_id: str, page: str, finding: str) -> str:
    """The page's title, then the Findings table's header and the rows that name ``finding``."""
    section = FINDINGS.search(page)
    table = [line for line in section.group(1).splitlines() if line.startswith("|")] if section else []
    rows = [line for line in table[2:] if finding in row_ids(line)]
    whole = f"The whole page: strata-doctor explain {check_id}"
    if not rows:
        said = f"The page's Findings section does not name {finding!r}."
        return f"{page_title(page)}\n\n{said}\n{whole}\n"
    return "\n".join([page_title(page), "", "## Findings", *table[:2], *rows, "", whole]) + "\n"


def no_page(check_id: str, checks: Sequence[Type[Check]], failed: Sequence[Crash]) -> str:
    """What is known of a check without a packaged page: a plug-in's title, docstring and
    finding ids, or why it did not load."""
    crash = next((c for c in failed if c.check == check_id), None)
    if crash is not None:
        return f"# {check_id}\n\nA plug-in: {crash.error}. strata-doctor has no page for it.\n"
    cls = next(c for c in checks if c.id == check_id)
    if cls.__module__.startswith("strata_doctor.checks."):
        return (f"# {check_id}\n\nThis installation lacks the page of the built-in check {check_id} "
                f"(strata_doctor/pages/{check_id}.md, from docs/checks in the source).\n")
    return plugin_words(cls)


def plugin_words(cls: Type[Check]) -> str:
    """A plug-in's own words: its title, class docstring, finding ids and the page it names."""
    doc = textwrap.dedent(cls.__doc__ or "").strip()
    lines = [f"# {cls.id}", "", f"**{cls.title}**", ""]
    if doc:
        lines += [doc, ""]
    if cls.findings:
        lines += ["## Findings", ", ".join(f"`{f}`" for f in cls.findings), ""]
    lines.append(f"A plug-in ({cls.__module__}): strata-doctor has no page for it; "
                 "its text above is the check's own.")
    if cls.doc:
        lines.append(f"Its page, as the plug-in names it: {cls.doc}")
    return "\n".join(lines) + "\n"


def index(checks: Sequence[Type[Check]], failed: Sequence[Crash]) -> str:
    """Each check's id and title, with its finding ids below; then how to read a page."""
    width = max((len(c.id) for c in checks), default=0) + 2
    lines: List[str] = []
    for cls in checks:
        lines.append(f"{cls.id.ljust(width)}{cls.title}")
        if cls.findings:
            lines += textwrap.wrap(", ".join(cls.findings), WIDTH, initial_indent=" " * width,
                                   subsequent_indent=" " * width, break_on_hyphens=False)
    lines += [f"{crash.check.ljust(width)}({crash.error})" for crash in failed]
    lines += ["", "strata-doctor explain CHECK prints a check's page; CHECK/FINDING, one finding's part."]
    return "\n".join(lines) + "\n"
