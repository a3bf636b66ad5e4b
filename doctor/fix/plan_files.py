"""The files of a fix plan: each path's fixes merged into one rendered file, beside what
is there now.

Templates are rendered with Jinja2's StrictUndefined, so a missing variable is an error,
never an empty string in a unit file.
"""

from __future__ import annotations

import difflib
import stat
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

from strata_doctor.model import FileChange, Finding, Fix
from strata_doctor.root import Root

MANAGED_MARKER = "Managed by strata-doctor"
"""Text every generated file carries; a file without it is not overwritten without --force."""


@dataclass(frozen=True)
class PlannedFile:
    """One file the apply will write, with what is there now."""

    path: str
    """Host path, e.g. ``/etc/sysctl.d/60-strata-doctor.conf``."""
    mode: int
    """Mode to write."""
    content: str
    """The full new content."""
    template: str
    """Template it was rendered from."""
    findings: Tuple[str, ...]
    """``check/id`` of each finding it answers."""
    current: Optional[bytes] = None
    """What is there now; None when absent."""
    current_mode: Optional[int] = None
    """Mode of what is there now."""
    blocked: str = ""
    """Why it cannot be written (a symlink, a directory, not ours without --force)."""

    @property
    def status(self) -> str:
        """``create``, ``replace``, ``mode`` (same bytes, other mode) or ``unchanged``."""
        if self.current is None:
            return "create"
        if self.current != self.content.encode():
            return "replace"
        return "mode" if self.current_mode != self.mode else "unchanged"

    @property
    def changed(self) -> bool:
        """Whether the apply would write this file."""
        return self.status != "unchanged"

    def diff(self) -> str:
        """A unified diff from what is there to the new content."""
        old = (self.current or b"").decode("utf-8", "replace").splitlines(keepends=True)
        new = self.content.splitlines(keepends=True)
        before = "/dev/null" if self.current is None else f"a{self.path}"
        lines = list(difflib.unified_diff(old, new, before, f"b{self.path}"))
        if self.status == "mode":
            return f"mode {self.current_mode or 0:04o} -> {self.mode:04o}: {self.path}\n"
        return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                       for line in lines)


def plan_files(
    root: Root, picked: Sequence[Tuple[Finding, Fix]], force: bool, problems: List[str]
) -> List[PlannedFile]:
    """One planned file per path the picked fixes write, with what is there now; what stops
    one is added to ``problems``."""
    by_path: Dict[str, List[Tuple[str, FileChange]]] = {}
    for finding, fix in picked:
        for change in fix.files:
            by_path.setdefault(change.path, []).append((f"{finding.check}/{finding.id}", change))
    files: List[PlannedFile] = []
    for path, changes in by_path.items():
        planned = _merge(path, changes, problems)
        if planned is not None:
            files.append(with_current(root, planned, force))
    return files


def _merge(path: str, changes: List[Tuple[str, FileChange]], problems: List[str]) -> Optional[PlannedFile]:
    """One planned file from every fix that writes ``path``; None (and a problem) when they
    disagree on what it holds."""
    names = tuple(dict.fromkeys(name for name, _ in changes))
    first = changes[0][1]
    if not _one_kind(changes):
        problems.append(f"{path}: fixes for {', '.join(names)} want different files there")
        return None
    contexts = [dict(c.context) for _, c in changes]
    if len(changes) > 1 and all("settings" in c for c in contexts):
        content = _merged_settings_text(path, first.template, contexts, names, problems)
    else:
        content = _same_text(path, changes, names, problems)
    if content is None:
        return None
    return PlannedFile(path, first.mode, content, first.template, names)


def _one_kind(changes: List[Tuple[str, FileChange]]) -> bool:
    """Whether every fix writes the path from the same template with the same mode."""
    return len({c.template for _, c in changes}) == 1 and len({c.mode for _, c in changes}) == 1


def _merged_settings_text(path: str, template: str, contexts: List[Dict[str, Any]], names: Tuple[str, ...],
                          problems: List[str]) -> Optional[str]:
    """The file that holds every fix's settings, when no two set a key differently."""
    merged = _merge_settings(path, contexts, problems)
    if merged is None:
        return None
    return render_template(template, dict(contexts[0], settings=merged, finding=", ".join(names)))


def _same_text(path: str, changes: List[Tuple[str, FileChange]], names: Tuple[str, ...],
               problems: List[str]) -> Optional[str]:
    """The file every fix renders alike (naming the first fix's finding, else all of them);
    None when two render it differently."""
    finding = dict(changes[0][1].context).get("finding", ", ".join(names))
    texts = [render_template(c.template, dict(dict(c.context), finding=finding)) for _, c in changes]
    if len(set(texts)) > 1:
        problems.append(f"{path}: fixes for {', '.join(names)} want different contents")
        return None
    return texts[0]  # the first change's own context, with the finding it names


def _merge_settings(path: str, contexts: List[Dict[str, Any]], problems: List[str]) -> Optional[List[Any]]:
    merged: Dict[str, Tuple[Any, ...]] = {}
    for context in contexts:
        for setting in context["settings"]:
            key = setting[0]
            if key in merged and str(merged[key][1]) != str(setting[1]):
                problems.append(f"{path}: two fixes set {key} to {merged[key][1]} and {setting[1]}")
                return None
            merged.setdefault(key, tuple(setting))
    return list(merged.values())


def with_current(root: Root, planned: PlannedFile, force: bool) -> PlannedFile:
    """``planned`` with what is at its path now, and why it cannot be written (``blocked``)."""
    # Looked at and read through Root, by descriptor inside the root: a link swapped in
    # for a folder on the way never leads the plan's read out of it. What this user may
    # not see reads as absent here; the apply looks again before it writes.
    info = root.look(planned.path)
    if info is None:
        return planned
    if stat.S_ISLNK(info.st_mode):
        return replace(planned, current=b"", blocked="is a symlink; strata-doctor never writes through one")
    if not stat.S_ISREG(info.st_mode):
        return replace(planned, current=b"", blocked="exists and is not a regular file")
    current = root.read_bytes(planned.path)
    if current is None:
        return replace(planned, blocked=f"cannot inspect: {root.reads.get(planned.path) or 'unreadable'}")
    planned = replace(planned, current=current, current_mode=stat.S_IMODE(info.st_mode))
    text = current.decode("utf-8", "replace")
    if planned.changed and MANAGED_MARKER not in text and not force:
        return replace(planned, blocked="exists and was not written by strata-doctor; --force overwrites "
                       "it (the original is kept for --revert)")
    return planned


def render_template(name: str, context: Dict[str, Any]) -> str:
    """Render one template from the templates package; a missing variable raises."""
    return str(_environment().get_template(name).render(**context))


def _environment() -> Any:
    from strata_doctor.templates import environment

    return environment()
