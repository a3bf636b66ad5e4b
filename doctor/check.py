"""What a check is: the base class every check subclasses, and what it may import.

A check reads one :class:`~strata_doctor.context.HostContext` (facts, and the rules'
answers over them) and yields findings, with fixes as data. It never reads the host
itself: pyproject's import-linter contracts keep checks off ``strata_doctor.root``, so
the :class:`~strata_doctor.root.Command` a check declares is imported from here.
"""

from __future__ import annotations

from typing import ClassVar, Iterator, Optional, Sequence, Tuple

from strata_doctor.context import HostContext
from strata_doctor.model import Evidence, Finding, Fix, Severity
from strata_doctor.root import Command

DOCS = "docs/checks"
"""Where the built-in checks' pages are, in the source tree and the sdist."""


class Check:
    """Base class of every check; the subclass's docstring is its documentation."""

    id: ClassVar[str]
    """Stable kebab-case id, used by ``--ignore`` and in JSON."""
    title: ClassVar[str]
    """Short human title for the text output."""
    doc: ClassVar[str] = ""
    """Where the check is documented (a URL, for a plug-in); empty: the built-in page
    ``docs/checks/<id>.md``, whose Findings section lists every finding id."""
    findings: ClassVar[Tuple[str, ...]] = ()
    """Every finding id the check may yield (kebab-case), as its page lists them.
    ``--ignore``/``--only``/``--skip CHECK/FINDING`` accept only these; empty: not declared
    (a plug-in written before this attribute), and any finding id of the check is accepted.
    Every built-in declares its ids (tests/test_finding_ids.py)."""

    def commands(self, ctx: HostContext) -> Sequence[Command]:
        """External commands this check will run, so they can be started together."""
        return ()

    def applies(self, ctx: HostContext) -> Optional[str]:
        """None when the check should run, else the reason it is skipped."""
        return None

    def run(self, ctx: HostContext) -> Iterator[Finding]:
        """Yield findings; must only read facts, never change the host."""
        raise NotImplementedError

    def finding(
        self,
        id: str,
        severity: Severity,
        summary: str,
        *,
        detail: str = "",
        evidence: Sequence[Evidence] = (),
        fix: Optional[Fix] = None,
    ) -> Finding:
        """Build a finding of this check."""
        return Finding(check=self.id, id=id, severity=severity, summary=summary, detail=detail,
                       evidence=tuple(evidence), fix=fix, doc=self.doc or f"{DOCS}/{self.id}.md#findings")


__all__ = ["Check", "Command"]
