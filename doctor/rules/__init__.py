"""Rules: pure decisions over facts, each returning a typed verdict.

No I/O and no words for people: a check asks :class:`~strata_doctor.context.HostContext`
for a rule's answer (computed once) and words it; the fix builders turn it into files.
"""
