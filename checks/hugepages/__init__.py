"""hugepages: does the hugepage pool fit the engine, or trap it? (docs/checks/hugepages.md)

A package, as its words are long: ``check`` is the check, ``pool_words`` the findings of
the default pool's cases.
"""

from strata_doctor.checks.hugepages.check import Hugepages

__all__ = ["Hugepages"]
