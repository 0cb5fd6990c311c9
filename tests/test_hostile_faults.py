"""Every fault is a sentence: a full disk wherever DuckDB or Python meets it, Ctrl-C during a
scan, and every setting the detectors or the cost model cannot use, each exit 2 (130 for
Ctrl-C) with what to do, never "internal error"."""

from __future__ import annotations

import errno
import os
import signal
import sys
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from loophound import cli
from loophound.errors import machine_condition

ROOT = Path(__file__).resolve().parents[1]
HOOKS = ROOT / "sample_logs" / "hooks" / "hooks.jsonl"
DUCKDB_FULL = ('IO Error: Could not write file "/mnt/full/st/catalog.duckdb": No space left '
               "on device")


def run(*args: str):
    return CliRunner().invoke(cli.app, [str(a) for a in args])


def run_main(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    """`loophound ARGS` through the console entry point (where faults become sentences)."""
    monkeypatch.setattr(sys, "argv", ["loophound", *map(str, args)])
    with pytest.raises(SystemExit) as done:
        cli.run()
    return done.value.code, capsys.readouterr().err


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("f") / "st"
    assert run("ingest", HOOKS, "--store", root).exit_code == 0
    return root


# -- a full disk ----------------------------------------------------------------------------

@pytest.mark.parametrize("exc", [
    duckdb.IOException(DUCKDB_FULL),
    duckdb.FatalException("FATAL Error: Failed: database has been invalidated. Original "
                          "error: " + DUCKDB_FULL),
    OSError("[Errno 28] Error writing bytes to file. Detail: No space left on device"),
    OSError(errno.EDQUOT, os.strerror(errno.EDQUOT), "/home/a/report.html"),
])
def test_a_full_disk_is_a_sentence_wherever_it_is_met(exc):
    said = machine_condition(exc)
    assert said is not None and said.exit_code == 2
    assert "free some space" in str(said)


def test_a_full_disk_under_another_error_is_found_through_its_cause():
    try:
        try:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/full/x.parquet")
        except OSError as inner:
            raise RuntimeError("writing the batch failed") from inner
    except RuntimeError as outer:
        said = machine_condition(outer)
    assert said is not None and "/full/x.parquet" in str(said)


def test_duckdb_running_out_of_disk_in_a_scan_exits_2_naming_the_file(store, monkeypatch,
                                                                       capsys):
    import loophound.scan

    def full(*_a, **_k):
        raise duckdb.IOException(DUCKDB_FULL)

    monkeypatch.setattr(loophound.scan, "scan_store", full)
    code, err = run_main(monkeypatch, capsys, "scan", "--store", store, "--fail-on", "never")
    assert code == 2, err
    assert "no space left on device" in err and "/mnt/full/st/catalog.duckdb" in err
    assert "internal error" not in err


# -- Ctrl-C ---------------------------------------------------------------------------------

def _ctrl_c() -> None:
    signal.raise_signal(signal.SIGINT)


@pytest.mark.parametrize("how", ["KeyboardInterrupt", "DuckDB's Query interrupted"])
def test_ctrl_c_during_a_scan_exits_130_with_a_sentence(store, monkeypatch, capsys, how):
    import loophound.scan

    def interrupted(*_a, **_k):
        if how == "KeyboardInterrupt":
            _ctrl_c()
        try:
            _ctrl_c()
        except KeyboardInterrupt:  # what DuckDB does with one that comes during a query
            raise RuntimeError("Query interrupted") from None

    monkeypatch.setattr(loophound.scan, "scan_store", interrupted)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as a new process starts
    code, err = run_main(monkeypatch, capsys, "scan", "--store", store, "--fail-on", "never")
    assert code == 130, err
    assert "interrupted (Ctrl-C)" in err and "internal error" not in err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back


# -- settings the detectors and the cost model cannot use -----------------------------------

CONFIGS = {
    "a list for a count": ("[unusual_actor]\nn_estimators = [1]\n", "unusual_actor.n_estimators"),
    "a fraction for a count": ("[unusual_actor]\nn_estimators = 2.5\n",
                               "unusual_actor.n_estimators"),
    "a table for a number": ("[rate_spike]\nz = { a = 1 }\n", "rate_spike.z"),
    "a string for a number": ('[rate_spike]\nz = "high"\n', "rate_spike.z"),
    "a boolean for a count": ("[repeated_error]\nmin_count = true\n", "repeated_error.min_count"),
    "a negative count": ("[repeated_error]\nmin_count = -5\n", "repeated_error.min_count"),
    "a negative time": ("[repeated_error]\nmax_gap_s = -1.0\n", "repeated_error.max_gap_s"),
    "infinity": ("[rate_spike]\nz = inf\n", "rate_spike.z"),
    "not a number": ("[rate_spike]\nz = nan\n", "rate_spike.z"),
    "a huge count": ("[ping_pong]\nmin_rounds = 99999999999999\n", "ping_pong.min_rounds"),
    "a detector that is a value": ("repeated_error = 3\n", "repeated_error"),
}


@pytest.mark.parametrize("case", [k for k, v in CONFIGS.items() if v])
def test_a_config_value_the_detectors_cannot_use_is_named(store, tmp_path, case):
    text, key = CONFIGS[case]
    config = tmp_path / "c.toml"
    config.write_text(text)
    done = run("scan", "--store", store, "--config", config, "--fail-on", "never")
    assert done.exit_code == 2, done.output
    assert done.output.startswith("error:") and key in done.output


@pytest.mark.parametrize("setting", ["unusual_actor.n_estimators=0", "rate_spike.z=inf",
                                     "rate_spike.z=-3", "repeated_error.min_count=0",
                                     "rate_spike.z=nan", "ping_pong.min_rounds=1e3"])
def test_a_set_value_the_detectors_cannot_use_is_named(store, setting):
    done = run("scan", "--store", store, "--set", setting, "--fail-on", "never")
    assert done.exit_code == 2, done.output
    assert done.output.startswith("error:") and setting.split("=")[0] in done.output


@pytest.mark.parametrize("prices", ['models = ["gpt-4o"]\n', 'models = "gpt-4o"\n',
                                    "[models]\ngpt-4o = 3\n",
                                    '[models."gpt-4o"]\ninput = inf\noutput = 1.0\n',
                                    '[models."gpt-4o"]\ninput = -1.0\noutput = 1.0\n'])
def test_a_price_table_of_the_wrong_shape_is_named(store, tmp_path, prices):
    table = tmp_path / "prices.toml"
    table.write_text(prices)
    done = run("scan", "--store", store, "--prices", table, "--fail-on", "never")
    assert done.exit_code == 2, done.output
    assert done.output.startswith("error:") and ("models" in done.output
                                                 or "gpt-4o" in done.output)


@pytest.mark.parametrize("command", ["scan", "report", "investigate"])
@pytest.mark.parametrize("value", ["inf", "nan"])
def test_a_cost_per_call_that_is_no_number_is_named(store, tmp_path, command, value):
    args = [command, "--store", store, "--cost-per-call", value]
    args += ["--out", tmp_path / "r.html"] if command != "scan" else ["--fail-on", "never"]
    done = run(*args)
    assert done.exit_code == 2, done.output
    assert "--cost-per-call" in done.output and "internal error" not in done.output


def test_good_settings_still_scan(store):
    done = run("scan", "--store", store, "--set", "repeated_error.min_count=3",
               "--set", "repair_loop.max_repairs=-1", "--cost-per-call", "-1",
               "--fail-on", "never")
    assert done.exit_code == 0, done.output
