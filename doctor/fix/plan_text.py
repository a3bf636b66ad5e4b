"""A fix plan in words: what would change, what is in place, and the next step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Set, Tuple

from strata_doctor.fix.plan import FixPlan, _and
from strata_doctor.fix.plan_files import PlannedFile


def plan_text(plan: FixPlan, applying: bool = False) -> str:
    """The plan for people: answers, diffs, actions, manual steps, what it needs, and what to
    do next. ``applying``: shown by ``--apply`` itself, so the next step is not "--apply"."""
    lines = [f"• {answer.finding} ({answer.severity}): {answer.summary}" for answer in plan.answers]
    for planned in plan.files:
        lines.extend(_file_lines(planned))
    lines.extend(_action_lines(plan))
    if plan.manual:
        lines.extend(["", "Left to you:"])
        lines.extend(f"  - {text}" for _, text in plan.manual)
    if lines:
        lines.append("")
    lines.extend(nothing_to_change(plan, applying) if plan.empty else [_effect_line(plan)])
    lines.extend(f"note: {note}" for note in plan.notes)
    lines.extend(f"cannot apply: {problem}" for problem in plan.problems)
    lines.extend(_next_step(plan, applying))
    return "\n".join(lines) + "\n"


def _file_lines(planned: PlannedFile) -> List[str]:
    """One planned file: its status and path, then why it is refused or its diff."""
    lines = ["", f"{planned.status.upper()} {planned.path} (mode {planned.mode:04o})"]
    if planned.blocked:
        lines.append(f"  refused: {planned.blocked}")
    elif planned.changed:
        lines.append(planned.diff().rstrip("\n"))
    return lines


def _action_lines(plan: FixPlan) -> List[str]:
    if not plan.actions:
        return []
    where = "Runtime actions:" if plan.live else \
        "Runtime actions (not taken when writing into --root; they run on the live host):"
    return ["", where, *(f"  $ {a.described}" for a in plan.actions)]


def counted(count: int, word: str, plural: str = "") -> str:
    """``1 file``, ``5 files``."""
    return f"{count} {word if count == 1 else plural or word + 's'}"


def _effect_line(plan: FixPlan) -> str:
    restarting = plan.live and any(a.kind == "restart-unit" and a.target == plan.unit for a in plan.actions)
    effect = {
        "now": "takes effect at once",
        "reload": "takes effect after `systemctl daemon-reload`",
        "restart": f"takes effect when this apply restarts {plan.unit}" if restarting else
        f"needs a restart of {plan.unit} (after `systemctl daemon-reload`)",
        "reboot": "needs a reboot for everything to take effect",
    }[plan.takes_effect]
    if not plan.changes:
        return f"Nothing to write; the runtime actions above {effect.replace('takes', 'take', 1)}."
    return f"{counted(len(plan.changes), 'file')} to write; {effect}."


@dataclass(frozen=True)
class Unchanged:
    """Why a plan with nothing to write leaves each answered finding as it is."""

    in_place: Tuple[str, ...]
    """Findings (or opt-in options) whose fixes are already written."""
    live_only: Tuple[str, ...]
    """Findings whose fixes are runtime actions, taken only on the live host."""
    yours: Tuple[str, ...]
    """Findings whose fixes are steps left to the user."""
    left_alone: Tuple[str, ...]
    """Findings --only/--skip left alone."""


def why_unchanged(plan: FixPlan) -> Unchanged:
    """Sort the answered findings of a plan with nothing to write by why they stay so."""
    done = _in_place(plan)
    acting = {name for a in plan.actions for name in a.findings}
    live_only = _answered(plan, acting, done)
    manual = {name for names, _ in plan.manual for name in names.split(", ")}
    yours = _answered(plan, manual, done + live_only)
    return Unchanged(tuple(done), tuple(live_only), tuple(yours), tuple(plan.left_alone))


def _answered(plan: FixPlan, among: Set[str], told: List[str]) -> List[str]:
    """The answered findings in ``among`` that no earlier reason (``told``) covers."""
    return [a.finding for a in plan.answers if a.finding in among and a.finding not in told]


def _in_place(plan: FixPlan) -> List[str]:
    """The answered findings whose files are written already (all unchanged), and the checks
    that say their fix is configured, as an empty plan names them."""
    done = [a.finding for a in plan.answers if any(a.finding in f.findings for f in plan.files)]
    done.extend(check for check in plan.configured if not any(d.startswith(check + "/") for d in done))
    return [OPT_IN_NAMES.get(name, name.replace("/configured", "")) for name in done]


def nothing_to_change(plan: FixPlan, applying: bool = False) -> List[str]:
    """Why a plan with nothing to write (and nothing to run here) is so, in one line: no
    finding needs a fix, the fixes are already in place, or what is left runs elsewhere."""
    clauses = _clauses(why_unchanged(plan)) or ["no finding on this host needs a fix"]
    return [f"Nothing to change: {'; '.join(clauses)}{'; nothing written' if applying else ''}."]


def _clauses(why: Unchanged) -> List[str]:
    clauses = [_in_place_clause(why)] if why.in_place else []
    if why.live_only:
        clauses.append(f"the runtime actions for {_and(why.live_only)} run only on the live host")
    if why.yours:
        one = len(why.yours) == 1
        clauses.append(f"the {'fix' if one else 'fixes'} for {_and(why.yours)} "
                       f"{'is a step' if one else 'are steps'} left to you (above)")
    if why.left_alone:
        verb = "is" if len(why.left_alone) == 1 else "are"
        clauses.append(f"{_and(why.left_alone)} {verb} left alone (--only/--skip)")
    return clauses


def _in_place_clause(why: Unchanged) -> str:
    if why.live_only or why.yours:
        return f"the fixes for {_and(why.in_place)} are already in place"
    return f"every fix is already in place ({_and(why.in_place)})"


OPT_IN_NAMES = {"fix/reserve-node": "--reserve-node", "fix/preflight": "--preflight"}
"""How an empty plan names the opt-in fixes' answers."""


def _next_step(plan: FixPlan, applying: bool) -> List[str]:
    """The last line: what to run next."""
    if plan.problems:
        return ["Next: solve the problems above; --apply refuses this plan until then."]
    if plan.empty:
        return _next_when_empty(plan)
    if applying:
        return []
    what = []
    if plan.changes:
        what.append("write these " + counted(len(plan.changes), "file") if len(plan.changes) > 1
                    else "write this file")
    if plan.live and plan.actions:
        what.append("take the runtime actions above")
    how = "run this again with --apply" + (" as root (sudo)" if plan.live else "")
    return [f"Next: {how} to {' and '.join(what)}."]


def _next_when_empty(plan: FixPlan) -> List[str]:
    if plan.configured:
        return ["Next: `strata-doctor check -v` says what the configured fixes still wait for "
                "(a daemon-reload, a restart, a reboot)."]
    if any(n.endswith("no automatic fix; see `strata-doctor check -v`") for n in plan.notes):
        return ["Next: `strata-doctor check -v` explains the findings without an automatic fix."]
    return []
