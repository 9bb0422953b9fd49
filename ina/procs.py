"""Child processes we start: stopped by their own PID, never by name."""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager


def stop_process(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """SIGTERM, wait up to ``timeout`` seconds, then SIGKILL; reaps the process."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def parent_handles_ctrl_c() -> Iterator[None]:
    """Children started inside ignore SIGINT (the disposition survives exec), so that Ctrl-C,
    which the terminal sends to the whole process group, reaches only this process: it
    stops them by PID and prints one line, instead of every child printing a traceback."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers belong to the main thread; leave them alone elsewhere
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
