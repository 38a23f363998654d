"""`cdc verify --consistent/--no-consistent` (cdc.cli.verify.confirmer_for): which way the
differences a comparison finds are checked again. With a merger running, the default and
--consistent confirm them in verify windows; --no-consistent re-reads them after a wait,
as documented (docs/operations/verify-and-repair.md), even then."""

from __future__ import annotations

import pytest

from cdc.cli.verify import confirmer_for
from cdc.config import ConfigError, MergerConfig
from merger.state.store import StateStore
from merger.verify.consistent import Confirmer


@pytest.fixture
def cfg(tmp_path):
    return MergerConfig(state_dir=str(tmp_path / "state"))


def test_with_a_merger_running_the_default_and_consistent_confirm_in_windows(cfg, monkeypatch):
    monkeypatch.setattr(StateStore, "running_merger", lambda self: {"pid": 1})
    assert isinstance(confirmer_for(cfg, None), Confirmer)
    assert isinstance(confirmer_for(cfg, True), Confirmer)


def test_no_consistent_re_reads_even_with_a_merger_running(cfg, monkeypatch):
    monkeypatch.setattr(StateStore, "running_merger", lambda self: {"pid": 1})
    assert confirmer_for(cfg, False) is None


def test_without_a_merger_consistent_is_refused_with_the_reason(cfg, monkeypatch):
    monkeypatch.setattr(StateStore, "running_merger", lambda self: None)
    assert confirmer_for(cfg, None) is None
    with pytest.raises(ConfigError, match="no merger runs on state_dir"):
        confirmer_for(cfg, True)
