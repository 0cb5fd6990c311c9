"""The report in a real browser: headless Chromium, driven over the DevTools protocol.

Checks that the charts render from the inlined plotly.js with no network, that the console
shows no error (a Content-Security-Policy violation is one), and that hostile log content
(`<script>`, `onerror=`, `</script>`, `javascript:` URLs) shows as text and runs nothing.

Chromium is Debian's `chromium` package, installed by `.ci/run`. Outside CI the test skips when
it is missing; in CI (CI=true) it fails instead, so a broken CI image cannot pass silently.
The DevTools client is the standard library only: `--remote-debugging-pipe` speaks JSON
messages ended by NUL bytes over file descriptors 3 (to the browser) and 4 (from it).
"""

from __future__ import annotations

import fcntl
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

PAYLOADS = (
    "<script>window.__pwned=1</script>",
    '"><img src=x onerror="window.__pwned=1">',
    "</script><script>window.__pwned=1</script>",
    "javascript:window.__pwned=1",
    '<b>bold</b><a href="javascript:window.__pwned=1">click</a>',
)
P_SCRIPT, P_IMG, P_CLOSE, P_URL, P_PLOTLY = PAYLOADS

# Runs in a child process: move the two pipe ends to fds 3 and 4, then become the browser.
LAUNCHER = """import os, sys
r, w = int(sys.argv[1]), int(sys.argv[2])
os.dup2(r, 3); os.dup2(w, 4); os.close(r); os.close(w)
os.execv(sys.argv[3], sys.argv[3:])
"""

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def require_chromium() -> str:
    path = find_chromium()
    if path is None:
        if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
            pytest.fail("CI=true but no Chromium is installed (apt-get install -y chromium): the "
                        "browser test must run in CI")
        pytest.skip("Chromium is not installed (apt-get install -y chromium)")
    return path


# -- hostile logs -----------------------------------------------------------------------------


def write_hostile_logs(root: Path) -> dict:
    """Small logs of three formats whose every string field is an attack, arranged so the
    detectors find a retry storm (bproxy), a ping-pong (generic JSONL) and a trigger cycle
    (hooks) made of them."""
    root.mkdir(parents=True, exist_ok=True)
    base = 1_781_826_000_000  # 2026-06-18T23:40:00Z in ms
    lines = []
    n = 0

    def bproxy(t: int, **fields) -> None:
        lines.append(json.dumps({"level": 30, "time": base + t, "pid": 7, "hostname": P_IMG,
                                 **fields}))

    for i in range(30):  # healthy background on another session
        rid = f"ok-{i}"
        bproxy(i * 1500, id=rid, action="snapshot", session="good01", event="received",
               ownerHash="cafe0001")
        bproxy(i * 1500 + 40, id=rid, event="response", ok=True, elapsed_ms=40,
               ownerHash="cafe0001")
    bproxy(50_000, id="close-1", action="session.close", session=P_IMG, event="received",
           ownerHash=P_SCRIPT)
    bproxy(50_100, id="close-1", event="response", ok=True, elapsed_ms=100, ownerHash=P_SCRIPT)
    for i in range(60):  # the storm: same error on a closed session, 100 ms apart
        rid = f"storm-{i}"
        t = 51_000 + i * 100
        bproxy(t, id=rid, action=P_CLOSE, session=P_IMG, event="received", ownerHash=P_SCRIPT)
        bproxy(t, id=rid, event="response", ok=False, elapsed_ms=0, error_code=P_URL,
               ownerHash=P_SCRIPT)
        n += 1
    (root / "bproxy").mkdir(exist_ok=True)
    (root / "bproxy" / "hostile.log").write_text("\n".join(lines) + "\n", encoding="utf-8")

    chat = []
    a, b = P_PLOTLY, P_SCRIPT + "\u202egnp.exe"
    for i in range(24):  # two bots answering each other every 2 s
        chat.append(json.dumps({
            "timestamp": f"2026-06-18T22:00:{i * 2:02d}.000Z", "from": a if i % 2 == 0 else b,
            "to": b if i % 2 == 0 else a, "conversation_id": P_CLOSE, "role": "assistant",
            "type": P_URL, "text": P_CLOSE + P_IMG,
        }))
    (root / "chat").mkdir(exist_ok=True)
    (root / "chat" / "chat.jsonl").write_text("\n".join(chat) + "\n", encoding="utf-8")

    hooks = []
    agents = [P_SCRIPT, P_IMG, P_URL]
    t0 = 1_781_820_000  # seconds
    parent = None
    for k in range(12):  # a 3-agent cycle, 4 laps, every session stating a cost
        who, nxt = agents[k % 3], agents[(k + 1) % 3]
        start, end = t0 + k * 300, t0 + k * 300 + 200
        sid, cid = f"ses_{k:04d}", f"cmpl_{k:04d}"

        def iso(s: int) -> str:
            return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(s))

        src = "cron" if k == 0 else agents[(k - 1) % 3]
        hooks.append(json.dumps({"ts": iso(start), "event": "session_started", "source_agent": src,
                                 "target_agent": who, "completion_id": None, "session_id": sid,
                                 "parent_completion_id": parent, "hook_origin_depth": 0}))
        hooks.append(json.dumps({"ts": iso(end), "event": "session_completed", "source_agent": src,
                                 "target_agent": who, "completion_id": cid, "session_id": sid,
                                 "parent_completion_id": parent, "hook_origin_depth": 0,
                                 "cost_usd": 1.25}))
        hooks.append(json.dumps({"ts": iso(end + 1), "event": "hook_fired", "source_agent": who,
                                 "target_agent": nxt, "completion_id": cid, "session_id": sid,
                                 "parent_completion_id": parent, "hook_origin_depth": 0,
                                 "hook": P_URL}))
        parent = cid
    (root / "hooks").mkdir(exist_ok=True)
    (root / "hooks" / "hooks.jsonl").write_text("\n".join(hooks) + "\n", encoding="utf-8")
    return {"storm_requests": n}


# -- a DevTools client over a pipe -------------------------------------------------------------


class Browser:
    """Headless Chromium, one page, driven over --remote-debugging-pipe."""

    def __init__(self, binary: str, timeout: float = 60.0):
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="loophound-chromium-")
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        # Keep every pipe end at fd >= 10, so the small launcher below can put the browser's
        # ends on fds 3 and 4 (what --remote-debugging-pipe reads and writes) safely.
        ends = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_r, to_w, from_r, from_w)]
        for fd in (to_r, to_w, from_r, from_w):
            os.close(fd)
        to_r, self._to_w, self._from_r, from_w = ends
        args = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update", "--no-first-run",
                "--no-default-browser-check", "--disable-extensions", "--disable-sync",
                "--mute-audio", "--hide-scrollbars", f"--user-data-dir={self.profile}",
                "--remote-debugging-pipe", "about:blank"]
        self.proc = subprocess.Popen(
            [sys.executable, "-c", LAUNCHER, str(to_r), str(from_w), *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            pass_fds=(to_r, from_w),
        )
        os.close(to_r)
        os.close(from_w)
        self._next_id = 0
        self._inbox: queue.Queue = queue.Queue()
        self.events: list[dict] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._stderr: list[bytes] = []
        threading.Thread(target=lambda: self._stderr.extend(self.proc.stderr), daemon=True).start()
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget",
                                 {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            self.call(f"{domain}.enable", session=self.session)

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._from_r, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
            while b"\0" in buf:
                msg, buf = buf.split(b"\0", 1)
                self._inbox.put(json.loads(msg))
        self._inbox.put(None)

    def _pump(self, until, timeout: float):
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("Chromium did not answer in time: "
                                   + b"".join(self._stderr).decode(errors="replace")[-2000:])
            try:
                msg = self._inbox.get(timeout=left)
            except queue.Empty:
                continue
            if msg is None:
                raise RuntimeError("Chromium closed the DevTools pipe: "
                                   + b"".join(self._stderr).decode(errors="replace")[-2000:])
            if "id" not in msg:
                self.events.append(msg)
            got = until(msg)
            if got is not None:
                return got

    def call(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float | None = None) -> dict:
        self._next_id += 1
        mid = self._next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_w, json.dumps(msg).encode() + b"\0")

        def answer(m):
            if m.get("id") == mid:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            return None

        return self._pump(answer, timeout or self.timeout)

    def open(self, url: str) -> None:
        self.call("Page.navigate", {"url": url}, session=self.session)
        self._pump(lambda m: True if m.get("method") == "Page.loadEventFired" else None,
                   self.timeout)

    def eval(self, expression: str):
        r = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                           "awaitPromise": True}, session=self.session)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, expression: str, timeout: float | None = None):
        deadline = time.monotonic() + (timeout or self.timeout)
        while time.monotonic() < deadline:
            value = self.eval(expression)
            if value:
                return value
            time.sleep(0.1)
        raise TimeoutError(f"waited for {expression}")

    def console_errors(self) -> list[str]:
        """Console errors, uncaught exceptions and browser log errors (CSP, network)."""
        while True:  # collect what has arrived
            try:
                msg = self._inbox.get_nowait()
            except queue.Empty:
                break
            if msg is not None and "id" not in msg:
                self.events.append(msg)
        out = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console: " + " ".join(str(a.get("value", a.get("description", "")))
                                                  for a in p.get("args", [])))
            elif m == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append("exception: " + str(d.get("exception", {}).get("description")
                                               or d.get("text")))
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append("log: " + p["entry"].get("text", ""))
        return out

    def screenshot(self, path: Path, y: int = 0, height: int = 2000, width: int = 1280) -> None:
        import base64

        self.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": 1000,
                                                         "deviceScaleFactor": 1, "mobile": False},
                  session=self.session)
        r = self.call("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": y, "width": width, "height": height, "scale": 1}},
            session=self.session)
        Path(path).write_bytes(base64.b64decode(r["data"]))

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=10)
        except Exception:  # noqa: BLE001 — closing anyway
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_w, self._from_r):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)


# -- the tests -----------------------------------------------------------------------------------


def _investigate(paths: list[Path], tmp: Path, out: Path,
                 *options: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SOURCE_DATE_EPOCH": "1767225600"}
    # the interpreter running the tests, not whatever `loophound` is on PATH
    cli = [sys.executable, "-c", "from loophound.cli import run; run()"]
    return subprocess.run(
        [*cli, "investigate", *map(str, paths), "--store", str(tmp / "store"), "--out", str(out),
         *options],
        capture_output=True, text=True, env=env, timeout=600,
    )


@pytest.fixture(scope="module")
def hostile_report(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("hostile")
    write_hostile_logs(tmp / "logs")
    out = tmp / "report.html"
    r = _investigate([tmp / "logs"], tmp, out)
    assert r.returncode == 0, r.stderr + r.stdout
    return out


@pytest.fixture(scope="module")
def browser():
    b = Browser(require_chromium())
    try:
        yield b
    finally:
        b.close()


def _load(browser: Browser, report: Path) -> dict:
    browser.events.clear()
    browser.open(report.resolve().as_uri())
    browser.wait_for("document.documentElement.getAttribute('data-charts') !== null")
    return browser.eval("""({
      charts: Number(document.documentElement.getAttribute('data-charts')),
      failed: Number(document.documentElement.getAttribute('data-charts-failed')),
      figures: document.querySelectorAll('div[data-fig]').length,
      svgs: document.querySelectorAll('div[data-fig] .main-svg').length,
      bars: document.querySelectorAll('div[data-fig] .main-svg .point').length,
      pwned: typeof window.__pwned !== 'undefined',
      imgs: document.querySelectorAll('img, iframe, object, embed, frame').length,
      scripts: document.querySelectorAll('script:not([type="application/json"])').length,
      handlers: document.querySelectorAll('[onerror], [onload], [onclick], [onmouseover]').length,
      jsLinks: Array.from(document.querySelectorAll('a[href], [*|href]')).filter(
        a => /^\\s*javascript:/i.test(a.getAttribute('href') || a.getAttribute('xlink:href') || '')).length,
      text: document.body.innerText,
      plotText: Array.from(document.querySelectorAll('div[data-fig] svg text')).map(
        t => t.textContent).join('\\n'),
      plotLinks: document.querySelectorAll('div[data-fig] svg a').length,
      incidents: document.querySelectorAll('article.incident').length,
      rows: document.querySelectorAll('#attribution a[href^="#incident-I"]').length,
      headline: document.getElementById('headline').innerText,
    })""")


@pytest.mark.browser
def test_hostile_report_runs_nothing_and_shows_the_payloads_as_text(browser, hostile_report):
    html = hostile_report.read_text(encoding="utf-8")
    for p in PAYLOADS:
        if any(c in p for c in '<>"'):
            assert p not in html, f"payload reached the HTML unescaped: {p}"
    page = _load(browser, hostile_report)
    assert not page["pwned"], "a hostile payload ran"
    assert page["imgs"] == 0 and page["handlers"] == 0 and page["jsLinks"] == 0
    assert page["scripts"] == 2  # plotly.js and the page's own: nothing injected
    errors = browser.console_errors()
    assert errors == [], errors
    assert page["failed"] == 0
    assert page["charts"] == page["figures"] > 0
    assert page["svgs"] >= page["charts"] and page["bars"] > 0
    text = page["text"]
    for p in (P_SCRIPT, P_IMG, P_CLOSE, P_URL):
        assert p in text, f"payload not shown as text: {p}"
    assert "\\u202e" in text  # the bidi override is shown, not obeyed
    # plotly labels: plotly.js reads a little HTML in labels; the markup must stay text there too
    assert "<b>bold</b>" in page["plotText"] and page["plotLinks"] == 0


@pytest.mark.browser
def test_sample_report_renders_offline_without_errors(browser, sample_report):
    page = _load(browser, sample_report)
    assert browser.console_errors() == []
    assert page["failed"] == 0
    assert page["charts"] == page["figures"] > 5
    assert page["svgs"] >= page["charts"]
    assert not page["pwned"]
    assert "Runaway loops made" in page["text"] or "came from" in page["text"]
    # one panel and one attribution row per runaway loop, and the headline counts them
    assert page["incidents"] == page["rows"] >= 9
    assert page["headline"].startswith(f"Findings: {page['incidents']} runaway loops (")
    assert "Also seen as:" in page["text"]


@pytest.fixture(scope="module")
def sample_report(tmp_path_factory) -> Path:
    root = Path(__file__).resolve().parents[1] / "sample_logs"
    tmp = tmp_path_factory.mktemp("samples")
    out = tmp / "incident.html"
    r = _investigate([root], tmp, out)
    assert r.returncode == 0, r.stderr + r.stdout
    return out


@pytest.fixture(scope="module")
def guarded_report(tmp_path_factory) -> Path:
    """`investigate` with guards: the report with the section "What would have stopped it"."""
    root = Path(__file__).resolve().parents[1] / "sample_logs"
    tmp = tmp_path_factory.mktemp("guarded")
    out = tmp / "incident.html"
    r = _investigate([root / "hooks", root / "bproxy"], tmp, out, "--preset", "had", "--preset",
                     "adopted", "--sweep", "hooks-cycle.window=5m..1h")
    assert r.returncode == 0, r.stderr + r.stdout
    return out


TOC = """(() => {
  const links = Array.from(document.querySelectorAll('nav.toc a'));
  return {hrefs: links.map(a => a.getAttribute('href')),
          missing: links.filter(a => !document.getElementById(a.getAttribute('href').slice(1)))
                        .map(a => a.getAttribute('href')),
          sections: Array.from(document.querySelectorAll('section[id]')).map(s => s.id)};
})()"""


@pytest.mark.browser
def test_the_table_of_contents_links_every_section_it_names(browser, sample_report,
                                                            guarded_report):
    _load(browser, sample_report)
    plain = browser.eval(TOC)
    assert plain["missing"] == [] and len(plain["hrefs"]) >= 8
    assert "#guards" not in plain["hrefs"] and "guards" not in plain["sections"]

    page = _load(browser, guarded_report)
    assert browser.console_errors() == [] and page["failed"] == 0
    toc = browser.eval(TOC)
    assert toc["missing"] == []
    # the guards' entry sits where the section sits: after the runaway loops
    at = plain["hrefs"].index("#incidents") + 1
    assert toc["hrefs"] == plain["hrefs"][:at] + ["#guards"] + plain["hrefs"][at:]
    assert toc["sections"].index("guards") == toc["sections"].index("incidents") + 1
    # following the link brings the section to the top of the window
    jumped = browser.eval("""(() => {
      window.scrollTo(0, 0);
      document.querySelector('nav.toc a[href="#guards"]').click();
      const s = document.getElementById('guards');
      return {top: Math.round(s.getBoundingClientRect().top), y: window.scrollY,
              hash: location.hash, rows: s.querySelectorAll('table.guards tbody tr').length,
              plots: s.querySelectorAll('div[data-fig] .main-svg').length};
    })()""")
    assert jumped["hash"] == "#guards" and jumped["y"] > 0 and abs(jumped["top"]) <= 2
    assert jumped["rows"] == 16 and jumped["plots"] >= 1
