"""Session hooks of the test suite.

Once pytest has reported, the process ends with ``os._exit`` (the exit status pytest computed, its output flushed)
instead of Python's interpreter teardown: XLA's runtime has aborted there, after every test had passed and the
summary was printed ("corrupted double-linked list", exit status 134, one full run in three on 2026-11-29) --
the class of crash-at-exit that jax-ml/jax#30731 and #30517 report at the end of plain JAX scripts. A crash while a
test runs still fails the run: only the teardown after the report is skipped.

The run ends with a line naming the machine: the last bits of XLA:CPU's float16 arithmetic (and NumPy's float16
functions) depend on whether the CPU has AVX512-FP16, and a failure seen only on some machine says which.
"""
import atexit
import os
import sys

import pytest

_status = []


def pytest_sessionfinish(session, exitstatus):
    _status.append(int(exitstatus))
    # (registered now, after JAX's own exit handlers: atexit runs it first, before any of them)
    atexit.register(_exit_now)


@pytest.fixture
def fresh_auto_jit_state(monkeypatch):
    """Auto-jit's per-process memory cleared (sites, steps, early launches, stats) and its static step timer off --
    the clusters run, not a timer's choice of eager; ``megxla.config.auto_jit`` restored afterwards. Yields the
    ``_autojit`` module. (megxla imported here, not at the top: hooks above run for tests that import it late.)"""
    import megxla
    from megxla.jit import _autojit, reset_auto_jit_stats
    saved = megxla.config.auto_jit
    monkeypatch.setattr(_autojit, "STATIC_TIMER", False)
    _autojit._sites.clear()
    _autojit._steps.clear()
    _autojit._early.clear()
    reset_auto_jit_stats()
    try:
        yield _autojit
    finally:
        megxla.config.auto_jit = saved


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"machine: {_machine()}")


def _machine():
    """The CPU's model, its core count and the features that change floating-point results (Linux; elsewhere the
    platform's processor string)."""
    import platform
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                elif key.strip() in ("flags", "Features"):
                    flags = set(value.split())
                    break
    except OSError:
        pass
    features = [f for f in ("avx2", "fma", "avx512f", "avx512_fp16", "avx512_bf16", "amx_tile") if f in flags]
    return f"{model}, {os.cpu_count()} cores, {' '.join(features) or 'no AVX2/AVX-512'}"


def _exit_now():
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:  # (a closed stream: nothing left to write)
            pass
    os._exit(_status[-1])
