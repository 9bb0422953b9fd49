"""Child processes we start: stopped by their own PID, never by name."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager

PR_SET_PDEATHSIG = 1  # include/uapi/linux/prctl.h


def die_with_parent(parent: int, sig: int = signal.SIGTERM) -> bool:
    """Have the kernel send this process ``sig`` when its parent dies (Linux's
    PR_SET_PDEATHSIG), so that a parent killed outright (SIGTERM, SIGKILL: it runs no cleanup)
    leaves no child running. False if the parent, PID ``parent``, is gone already."""
    prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)
    if prctl is not None:  # (Linux: elsewhere a parent killed outright leaves its children)
        prctl(PR_SET_PDEATHSIG, int(sig))
    return os.getppid() == parent


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


@contextmanager
def ctrl_c_blocked_in_children() -> Iterator[None]:
    """Children started inside (from this thread) never take Ctrl-C: they start with SIGINT
    blocked, a mask that survives fork and exec, so that this process stops them by PID.
    Unlike `parent_handles_ctrl_c`'s ignoring it, blocking loses no Ctrl-C meanwhile: one
    that comes while the children start reaches this process as soon as the block ends
    (or at once, through another thread), and nothing of it stays ignored here. For
    children that start no children of their own (a sweep's pool): theirs would inherit
    the mask."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def available_memory() -> int | None:
    """Bytes this host can still give (MemAvailable), or None where /proc says nothing: what
    a command checks a run's memory against before it starts one that could not finish."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
