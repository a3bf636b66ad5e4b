"""Facts: what one host is, read through :class:`~strata_doctor.root.Root`.

One module per family of kernel, systemd or nvidia-smi files. Each fact is an immutable
named tuple that names the files it came from, read by one ``read_*`` function that
:class:`~strata_doctor.context.HostContext` calls once per host; the parsers beside it are
pure functions of text (``parse`` and ``unitfile`` hold the ones several families share).
A file the capture lacks is a fact too (unknown, with the reason), never a crash.
"""
