"""The probe's worker threads, run so that Ctrl-C and a worker's failure stop them all.

Each measurement runs its pinned threads through :func:`run_threads`: the main thread
waits in short joins, so a ``KeyboardInterrupt`` reaches it within 0.1 s, and a worker's
exception sets the run's stop event, breaks the barrier the others wait at, and is
raised again in the main thread.
"""

from __future__ import annotations

import threading
from typing import Callable, List, Optional, Sequence


def run_threads(targets: Sequence[Callable[[], None]], stop: threading.Event,
                barrier: Optional[threading.Barrier] = None) -> None:
    """Run the workers; the main thread waits in short joins, so Ctrl-C reaches it."""
    errors: List[BaseException] = []
    workers = [threading.Thread(target=_guarded(t, errors, stop, barrier), daemon=True)
               for t in targets]
    for w in workers:
        w.start()
    try:
        for w in workers:
            while w.is_alive():
                w.join(0.1)
    except BaseException:
        _halt(stop, barrier)
        for w in workers:
            w.join()
        raise
    if errors:
        raise errors[0]


def _guarded(target: Callable[[], None], errors: List[BaseException], stop: threading.Event,
             barrier: Optional[threading.Barrier]) -> Callable[[], None]:
    """The worker's body: a failure is kept for the main thread and stops the others."""
    def body() -> None:
        try:
            target()
        except threading.BrokenBarrierError:
            pass
        except BaseException as exc:  # re-raised in the main thread
            errors.append(exc)
            _halt(stop, barrier)
    return body


def _halt(stop: threading.Event, barrier: Optional[threading.Barrier]) -> None:
    """Tell every worker to stop, those waiting at the barrier included."""
    stop.set()
    if barrier is not None:
        barrier.abort()
