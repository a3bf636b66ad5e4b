"""Output: findings and facts as text, JSON, fleet files, a map, a report and a bundle.

Nothing here reads the host: every number comes from
:class:`~strata_doctor.context.HostContext` and the check results, and a bundle is built
from the records of what :class:`~strata_doctor.root.Root` read. ``files`` is the one way
a file the user names (``--output``, ``--bundle``) is written.
"""
