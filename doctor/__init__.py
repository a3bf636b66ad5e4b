"""strata-doctor: finds what makes a host slow or unstable for the Strata engine."""

__version__ = "0.1.0"
