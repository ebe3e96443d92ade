"""The figure pool's start-up: an interrupt that arrives while workers are being started
waits until they have their start-up data, then stops the command as before."""

import os
import signal

import pytest

from analysis.figures.jobs import interrupts_held


def test_sigterm_while_workers_start_is_raised_after_they_started():
    """The served report's CI run printed a worker's ``EOFError: Ran out of input``: SIGTERM
    (turned into KeyboardInterrupt by the CLI) hit between a ``spawn`` worker's start and the
    parent's writing its start-up data, so the worker read a closed pipe.  Held, the signal
    is raised only when the block ends."""
    before = signal.signal(signal.SIGTERM, signal.default_int_handler)
    reached_end = False
    try:
        with pytest.raises(KeyboardInterrupt):
            with interrupts_held():
                os.kill(os.getpid(), signal.SIGTERM)
                reached_end = True  # not interrupted half-way
    finally:
        signal.signal(signal.SIGTERM, before)
    assert reached_end
    assert signal.getsignal(signal.SIGTERM) is before


def test_no_interrupt_while_held_changes_nothing():
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with interrupts_held():
        pass
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
