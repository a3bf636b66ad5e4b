"""The live probe (``strata-doctor probe``): measured bandwidth and latency between nodes.

It asks the running kernel itself (mmap, mbind, move_pages through ctypes), so it is never
replayed under ``--root`` and no check imports it; check reads only its saved JSON, as the
fact :mod:`strata_doctor.facts.saved_probe` (the document is
:mod:`strata_doctor.facts.probe_result`).
"""
