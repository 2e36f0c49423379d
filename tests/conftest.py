"""Session hooks of the test suite.

Once pytest has reported, the process ends with ``os._exit`` (the exit status pytest computed, its output flushed)
instead of Python's interpreter teardown: XLA's runtime has aborted there, after every test had passed and the
summary was printed ("corrupted double-linked list", exit status 134, one full run in three on 2026-11-29) --
the class of crash-at-exit that jax-ml/jax#30731 and #30517 report at the end of plain JAX scripts. A crash while a
test runs still fails the run: only the teardown after the report is skipped.
"""
import atexit
import os
import sys

_status = []


def pytest_sessionfinish(session, exitstatus):
    _status.append(int(exitstatus))
    # (registered now, after JAX's own exit handlers: atexit runs it first, before any of them)
    atexit.register(_exit_now)


def _exit_now():
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:  # (a closed stream: nothing left to write)
            pass
    os._exit(_status[-1])
