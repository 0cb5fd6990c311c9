"""`loophound watch`: keep one store current by scanning every few minutes."""


import signal
import time
from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    from .shell import (
        DEFAULT_STORE,
        AlertOnOpt,
        AlertsOpt,
        CallCostOpt,
        ConfigOpt,
        LookbackOpt,
        PricesOpt,
        SetOpt,
        StoreOpt,
        WebhookOpt,
        err,
        fail,
        incremental_scan,
    )

    @app.command("watch")
    def watch_cmd(
        paths: Annotated[list[str], typer.Argument(help="Log files, directories or globs.")],
        every: Annotated[str, typer.Option(help="Time between scans: 30s, 5m, 1h.")] = "5m",
        store: StoreOpt = Path(DEFAULT_STORE),
        alerts: AlertsOpt = None,
        webhook: WebhookOpt = None,
        alert_on: AlertOnOpt = "high",
        lookback: LookbackOpt = "1h",
        max_runs: Annotated[int, typer.Option(help="Stop after this many scans (0: never).")] = 0,
        config: ConfigOpt = None,
        set_: SetOpt = None,
        prices: PricesOpt = None,
        cost_per_call: CallCostOpt = None,
    ) -> None:
        """Scan PATHs now and then every --every, reading only new bytes; print an alert (a
        JSON line) when a finding is new or escalated. Stops cleanly on Ctrl-C or SIGTERM,
        after the scan in progress.

        Example: loophound watch /var/log/bproxy/ --every 5m --alerts alerts.jsonl
        """
        from ..watch import parse_every  # not at registration: it imports the detectors

        try:
            interval = parse_every(every)
            lookback_s = parse_every(lookback)
        except ValueError as exc:
            fail(str(exc))
        stopping = False

        def stop(signum, frame) -> None:  # noqa: ARG001 — signal handler signature
            nonlocal stopping
            stopping = True

        from ..store import keep_windows

        keep_windows()  # the same store every cycle: its recent events stay in memory
        # put back when watch ends, however it ends: a process that goes on (a test, a
        # notebook) would otherwise ignore Ctrl-C from then on
        before = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        runs = 0
        try:
            while not stopping:
                started = time.monotonic()
                incremental_scan(paths, store, "never", alerts, webhook, alert_on, True, config,
                                 set_ or [], prices, cost_per_call, lookback_s=lookback_s)
                runs += 1
                if max_runs and runs >= max_runs:
                    break
                while not stopping and time.monotonic() - started < interval:
                    time.sleep(min(0.2, interval))
        finally:
            for sig, handler in before.items():
                signal.signal(sig, handler)
        err.print(f"watch stopped after {runs} scan(s)")
