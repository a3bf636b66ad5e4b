"""Fixes: from a check's decision to files on the host, and back.

``binding``, ``memory`` and ``limits`` are the pure builders that checks call (a decision
in, :class:`~strata_doctor.model.Fix` data out). Above the checks, ``plan`` turns the
findings' fixes into a :class:`~strata_doctor.fix.plan.FixPlan` (the files ``plan_files``
renders, the ``opt_in`` fixes, the actions) and ``plan_text`` words it; ``apply`` is the
only code that writes host files, under ``lock`` with ``journal``'s record of the
originals, and ``revert`` restores them to the byte (``state`` and ``steps`` are what
those share).
"""
