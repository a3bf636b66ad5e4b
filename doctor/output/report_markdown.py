"""The report's words: Markdown through ``templates/report.md.j2``, and its own JSON section.

:class:`~strata_doctor.output.report_model.Report` in, text out; the data is built by
``output/report.py``.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict
from typing import Any, Dict, List, Optional

from strata_doctor.facts.parse import format_bytes
from strata_doctor.output.provenance import could_not_read
from strata_doctor.output.report_model import Report

REPORT_SCHEMA = "strata-doctor/report/v1"


def report_data(report: Report) -> Dict[str, Any]:
    """The report's own sections as plain data (added to the check JSON)."""
    data = asdict(report)
    data["schema"] = REPORT_SCHEMA
    return data


def render_markdown(report: Report, redaction: Optional[List[str]]) -> str:
    """The Markdown report; ``redaction`` is the redaction summary, None when disabled."""
    from strata_doctor.templates import environment

    env = environment()
    env.filters.update(size=_size, md=markdown_escape, yesno=_yes_no, could_not_read=could_not_read)
    template = env.get_template("report.md.j2")
    text = template.render(
        report=report,
        redaction=redaction,
        as_root=running_as_root(),
    )
    return re.sub(r"\n{3,}", "\n\n", text)


def _size(value: Optional[int]) -> str:
    return format_bytes(value) if value is not None else "unknown"


def _yes_no(value: Optional[bool]) -> str:
    return "unknown" if value is None else "yes" if value else "no"


def markdown_escape(text: str) -> str:
    """Escape the characters that would turn host text into Markdown or HTML markup."""
    return re.sub(r"([\\`*_<>|\[\]])", r"\\\1", text)


def running_as_root() -> bool:
    """Whether this process has root's privileges (always False where there is no euid)."""
    geteuid = getattr(os, "geteuid", None)
    return bool(geteuid is not None and geteuid() == 0)
