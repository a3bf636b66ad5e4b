"""Fixes: from a check's decision to files on the host, and back.

``binding``, ``memory`` and ``limits`` are the pure builders that checks call (a decision
in, :class:`~strata_doctor.model.Fix` data out). Above the checks, ``plan`` turns the
findings' fixes into a :class:`~strata_doctor.fix.plan.FixPlan` (rendered files, diffs,
actions) and ``plan_text`` words it; ``apply`` is the only code that writes host files,
with its lock, journal and byte-exact revert.
"""
