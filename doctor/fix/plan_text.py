"""A fix plan in words: what would change, what is in place, and the next step."""

from __future__ import annotations

from typing import List

from strata_doctor.fix.plan import FixPlan, _and


def plan_text(plan: FixPlan, applying: bool = False) -> str:
    """The plan for people: answers, diffs, actions, manual steps, what it needs, and what to
    do next. ``applying``: shown by ``--apply`` itself, so the next step is not "--apply"."""
    lines: List[str] = []
    for answer in plan.answers:
        lines.append(f"• {answer.finding} ({answer.severity}): {answer.summary}")
    for planned in plan.files:
        lines.append("")
        lines.append(f"{planned.status.upper()} {planned.path} (mode {planned.mode:04o})")
        if planned.blocked:
            lines.append(f"  refused: {planned.blocked}")
        elif planned.changed:
            lines.append(planned.diff().rstrip("\n"))
    if plan.actions:
        lines.append("")
        where = "Runtime actions:" if plan.live else \
            "Runtime actions (not taken when writing into --root; they run on the live host):"
        lines.append(where)
        lines.extend(f"  $ {a.described}" for a in plan.actions)
    if plan.manual:
        lines.append("")
        lines.append("Left to you:")
        lines.extend(f"  - {text}" for _, text in plan.manual)
    if lines:
        lines.append("")
    lines.extend(nothing_to_change(plan, applying) if plan.empty else [_effect_line(plan)])
    for note in plan.notes:
        lines.append(f"note: {note}")
    for problem in plan.problems:
        lines.append(f"cannot apply: {problem}")
    lines.extend(_next_step(plan, applying))
    return "\n".join(lines) + "\n"


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


def nothing_to_change(plan: FixPlan, applying: bool = False) -> List[str]:
    """Why a plan with nothing to write (and nothing to run here) is so, in one line: no
    finding needs a fix, the fixes are already in place, or what is left runs elsewhere."""
    done = [a.finding for a in plan.answers
            if any(a.finding in f.findings for f in plan.files)]  # written, all unchanged
    done.extend(check for check in plan.configured if not any(d.startswith(check + "/") for d in done))
    done = [OPT_IN_NAMES.get(name, name.replace("/configured", "")) for name in done]
    acting = {name for a in plan.actions for name in a.findings}
    live_only = [a.finding for a in plan.answers if a.finding in acting and a.finding not in done]
    manual = {name for names, _ in plan.manual for name in names.split(", ")}
    yours = [a.finding for a in plan.answers
             if a.finding in manual and a.finding not in done and a.finding not in live_only]
    clauses = []
    if done and not live_only and not yours:
        clauses.append(f"every fix is already in place ({_and(done)})")
    elif done:
        clauses.append(f"the fixes for {_and(done)} are already in place")
    if live_only:
        clauses.append(f"the runtime actions for {_and(live_only)} run only on the live host")
    if yours:
        clauses.append(f"the {'fix' if len(yours) == 1 else 'fixes'} for {_and(yours)} "
                       f"{'is a step' if len(yours) == 1 else 'are steps'} left to you (above)")
    if plan.left_alone:
        clauses.append(f"{_and(plan.left_alone)} {'is' if len(plan.left_alone) == 1 else 'are'} left "
                       "alone (--only/--skip)")
    if not clauses:
        clauses.append("no finding on this host needs a fix")
    return [f"Nothing to change: {'; '.join(clauses)}{'; nothing written' if applying else ''}."]


OPT_IN_NAMES = {"fix/reserve-node": "--reserve-node", "fix/preflight": "--preflight"}
"""How an empty plan names the opt-in fixes' answers."""


def _next_step(plan: FixPlan, applying: bool) -> List[str]:
    """The last line: what to run next."""
    if plan.problems:
        return ["Next: solve the problems above; --apply refuses this plan until then."]
    if plan.empty:
        if plan.configured:
            return ["Next: `strata-doctor check -v` says what the configured fixes still wait for "
                    "(a daemon-reload, a restart, a reboot)."]
        if any(n.endswith("no automatic fix; see `strata-doctor check -v`") for n in plan.notes):
            return ["Next: `strata-doctor check -v` explains the findings without an automatic fix."]
        return []
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
