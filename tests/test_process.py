"""Settings of the whole process (loophound.process): changed while a command runs, put
back when the last user is done, and never changed where they were already as wanted."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import pytest

from loophound import detect
from loophound.ingest import ingest
from loophound.process import GC_PAUSED, WhileInUse
from loophound.scan import scan_store
from loophound.store import Store

SAMPLES = Path(__file__).resolve().parents[1] / "sample_logs"


def test_a_setting_changes_for_the_first_user_and_is_put_back_after_the_last():
    setting = {"value": "old"}
    calls = []

    def change(tag):
        calls.append(("change", tag))
        before, setting["value"] = setting["value"], "new"
        return before

    def restore(before, tag):
        calls.append(("restore", tag))
        setting["value"] = before

    held = WhileInUse(change, restore)
    with held.using("a"):
        with held.using("b"):
            assert setting["value"] == "new"
        assert setting["value"] == "new"  # the first user still holds it
    assert setting["value"] == "old"
    assert calls == [("change", "a"), ("restore", "a")]


def test_a_setting_that_did_not_change_is_not_put_back():
    restored = []
    held = WhileInUse(lambda: None, lambda before: restored.append(before))
    with held.using():
        pass
    assert restored == []


def test_users_on_several_threads_share_one_change():
    changes, live = [], []
    held = WhileInUse(lambda: changes.append(1) or "before", lambda before: live.append(before))
    inside = threading.Barrier(4)

    def work():
        with held.using():
            inside.wait()  # all four hold it at once

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert changes == [1] and live == ["before"] and held.users == 0


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    st = Store(tmp_path_factory.mktemp("gc") / "st")
    ingest([str(SAMPLES / "bproxy")], st)
    return st


@pytest.mark.parametrize("enabled", [True, False])
def test_a_scan_pauses_the_cycle_collector_and_leaves_it_as_it_was(store, enabled):
    seen = []
    run = detect.run_detectors

    def watching(*args, **kwargs):
        seen.append(gc.isenabled())
        return run(*args, **kwargs)

    (gc.enable if enabled else gc.disable)()
    try:
        scan_store(store, save=False, detect=watching)
        assert seen == [False] and gc.isenabled() is enabled and GC_PAUSED.users == 0
    finally:
        gc.enable()
