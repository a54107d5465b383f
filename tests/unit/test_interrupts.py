"""Ctrl-C handling of the CLI: KeyboardInterrupt as usual, plus a watchdog for the clean-up."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from vcpulab import cli


def test_ctrl_c_raises_and_arms_the_watchdog(monkeypatch: pytest.MonkeyPatch, ctrl_c: None) -> None:
    gave_up = threading.Event()
    monkeypatch.setattr(cli, "INTERRUPT_GRACE_S", 0.05)
    monkeypatch.setattr(cli, "_give_up_after_interrupt", lambda code: gave_up.set())
    with cli._Interrupts():
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            threading.Event().wait(5)
        # A clean-up that hangs past the grace period.
        assert gave_up.wait(5), "the watchdog did not fire"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_prompt_clean_up_cancels_the_watchdog(monkeypatch: pytest.MonkeyPatch, ctrl_c: None) -> None:
    gave_up = threading.Event()
    monkeypatch.setattr(cli, "INTERRUPT_GRACE_S", 0.5)
    monkeypatch.setattr(cli, "_give_up_after_interrupt", lambda code: gave_up.set())
    with pytest.raises(KeyboardInterrupt), cli._Interrupts():
        os.kill(os.getpid(), signal.SIGINT)
    assert not gave_up.wait(1.0)


def test_sigterm_takes_the_same_path_with_its_own_exit_code(monkeypatch: pytest.MonkeyPatch) -> None:
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        pytest.skip("the test runner owns SIGTERM here")
    codes: list[int] = []
    fired = threading.Event()
    monkeypatch.setattr(cli, "INTERRUPT_GRACE_S", 0.05)
    monkeypatch.setattr(cli, "_give_up_after_interrupt", lambda code: (codes.append(code), fired.set()))
    with cli._Interrupts():
        with pytest.raises(KeyboardInterrupt) as caught:
            os.kill(os.getpid(), signal.SIGTERM)
            threading.Event().wait(5)
        assert isinstance(caught.value, cli.Interrupted)
        assert cli._interrupted(caught.value) == ("interrupted by SIGTERM", 143)
        assert fired.wait(5), "the watchdog did not fire"
    assert codes == [143]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
