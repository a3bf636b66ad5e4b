"""Allows ``python -m strata_doctor``."""

from strata_doctor.cli import run

run()
