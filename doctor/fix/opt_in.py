"""The fixes asked for by option rather than by a finding: ``--reserve-node`` and
``--preflight``, and the script the preflight runs."""

from __future__ import annotations

import os
import stat
from typing import List, Optional, Sequence, Tuple

from strata_doctor.context import HostContext
from strata_doctor.model import CheckResult, Finding, Fix, Severity
from strata_doctor.root import Root


def opt_in_fixes(
    ctx: HostContext, results: Sequence[CheckResult], reserve_node: bool, preflight: bool,
    problems: List[str], notes: List[str], check_args: Sequence[str] = (),
) -> List[Tuple[Finding, Fix]]:
    """The fixes asked for by option (--reserve-node, --preflight), each with the finding it
    answers; what stops one is added to ``problems``. ``check_args``: what the preflight's
    check is given (PlanOptions.check_args)."""
    extra = [_reserve_node(ctx, results, problems) if reserve_node else None,
             _preflight(ctx, check_args, problems, notes) if preflight else None]
    return [pair for pair in extra if pair is not None]


def _reserve_node(
    ctx: HostContext, results: Sequence[CheckResult], problems: List[str],
) -> Optional[Tuple[Finding, Fix]]:
    """The --reserve-node fix, answering the contention finding when there is one."""
    from strata_doctor.fix.binding import reserve_node_fix

    binding = ctx.binding_plan
    contention = [f for r in results for f in r.findings
                  if f.check == "cpu-contention" and f.severity > Severity.OK]
    finding = contention[0] if contention else Finding("fix", "reserve-node", Severity.INFO, "")
    if binding is None:
        problems.append("--reserve-node: no node to reserve (one NUMA node, no GPU, or --numa off)")
        return None
    # The files name the option, never the finding (shared-cpus before an apply,
    # configured after it): a second apply then finds nothing to change.
    fix, why = reserve_node_fix(ctx, binding, "--reserve-node")
    if fix is None:
        problems.append(why)
        return None
    return finding, fix


def _preflight(ctx: HostContext, check_args: Sequence[str], problems: List[str],
               notes: List[str]) -> Optional[Tuple[Finding, Fix]]:
    """The --preflight fix, when the script it names can run."""
    from strata_doctor.fix.binding import preflight_fix

    script, where = preflight_script(ctx.root)
    if where == "missing":
        problems.append(f"--preflight: {script} is not an executable file, so the engine unit "
                        "could not start; install strata-doctor as README.md says (its script "
                        "linked to /usr/local/bin/strata-doctor), or set STRATA_DOCTOR_SCRIPT")
        return None
    finding = Finding("fix", "preflight", Severity.INFO, "")
    if where == "this machine":
        notes.append(f"--preflight: {script} is not inside {ctx.root.base}; the path is taken "
                     "from this machine")
    return finding, preflight_fix(ctx.config.unit, "--preflight", script, check_args)


SCRIPT_ENV = "STRATA_DOCTOR_SCRIPT"
"""Names the script ``ExecStartPre=`` runs, when the running one is not the one to use."""


def running_script() -> str:
    """The absolute path of the installed ``strata-doctor`` console script.

    ``$STRATA_DOCTOR_SCRIPT`` if set; else the running script when it is called
    strata-doctor (not resolved: the /usr/local/bin link stays the link); else the one on
    ``PATH``; else the one beside the running Python (a virtual environment's bin).
    """
    import shutil
    import sys

    named = os.environ.get(SCRIPT_ENV, "")
    if named:
        return os.path.abspath(named)
    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0) == "strata-doctor" and os.sep in argv0:
        return os.path.abspath(argv0)
    found = shutil.which("strata-doctor")
    if found:
        return os.path.abspath(found)
    return os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "strata-doctor")


def preflight_script(root: Root) -> Tuple[str, str]:
    """(path, where): where is ``root``, ``this machine`` (a --root tree without it) or ``missing``."""
    script = running_script()

    def runnable(path: str) -> bool:
        return os.path.isfile(path) and os.access(path, os.X_OK)

    # In the root it is looked at by descriptor, as every host path: no link leads out.
    there = root.look(script, follow_last=True)
    if there is not None and stat.S_ISREG(there.st_mode) and there.st_mode & 0o111:
        return script, "root"
    if not root.live and runnable(script):
        return script, "this machine"
    return script, "missing"
