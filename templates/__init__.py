"""Jinja2 templates for the files ``strata-doctor fix`` writes (see docs/fix-templates.md)."""
