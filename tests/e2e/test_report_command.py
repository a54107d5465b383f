"""`vcpulab report` as a user runs it: small sweeps, the report, its CSV files, and the page
opened in headless Chromium (Debian's `chromium`; installed with apt-get when absent).

Chromium is driven over the DevTools protocol (--remote-debugging-pipe): the page must load
with no script error or console error, request nothing but itself, and lay out every figure
with a non-zero size; a screenshot of the first screen must not be blank.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import re
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import RunCli, debian_program, run_cli

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-extensions",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def chromium() -> str:
    """The chromium binary, installed from Debian's packages if absent (the machine runs as root)."""
    found, why = debian_program("chromium", "chromium")
    if found is None:
        pytest.fail(f"the report test needs Debian's chromium: {why}")
    return found


class DevTools:
    """A headless Chromium driven over --remote-debugging-pipe (JSON messages ending in NUL on
    fds 3 and 4), attached to its first page."""

    def __init__(self, binary: str, profile: Path) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        self._log = open(profile.with_suffix(".log"), "w")  # chromium's own messages, for debugging
        # bash gives chromium the pipes as fds 3 (commands) and 4 (replies); dash cannot name fds above 9.
        cmd = " ".join(
            [binary, *CHROMIUM_FLAGS, "--remote-debugging-pipe", f"--user-data-dir={profile}", "about:blank"]
        )
        self.proc = subprocess.Popen(
            ["/bin/bash", "-c", f"exec {cmd} 3<&{to_browser_r} 4>&{from_browser_w}"],
            pass_fds=(to_browser_r, from_browser_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []
        self.session: str | None = None

    def close(self) -> None:
        os.close(self._to_browser)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._from_browser)
        self._log.close()

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_browser], [], [], left)[0]:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise ConnectionError("chromium closed the DevTools pipe")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        message: dict[str, Any] = json.loads(raw)
        return message

    def send(self, method: str, params: dict[str, Any] | None = None, timeout: float = 30) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if self.session is not None and not method.startswith("Target."):
            msg["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 30) -> dict[str, Any]:
        for e in self.events:
            if e.get("method") == method:
                return e
        deadline = time.monotonic() + timeout
        while True:
            e = self._read(deadline)
            self.events.append(e)
            if e.get("method") == method:
                return e

    def open(self, url: str) -> None:
        targets = self.send("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.send("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True})["sessionId"]
        for domain in ("Page", "Network", "Runtime", "Log"):
            self.send(f"{domain}.enable")
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": 1280, "height": 1600, "deviceScaleFactor": 1, "mobile": False},
        )
        self.send("Page.navigate", {"url": url})
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        reply = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in reply:
            raise RuntimeError(f"evaluate failed: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def errors(self) -> list[str]:
        """Script exceptions, console errors and error log entries seen so far."""
        out = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                out.append(f"exception: {p.get('exceptionDetails', {}).get('text')}")
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(f"console.{p['type']}: {p.get('args')}")
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}")
        return out

    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two small stores: a TPDS-style sweep (2 workloads × native, UC, OC × 2 and 4 vCPUs, 2
    seeds) and the Shoot4U example (3 TLB policies in UC and OC, TLB samples recorded)."""
    root = tmp_path_factory.mktemp("stores")
    tpds, s4u = root / "tpds", root / "s4u"
    r = run_cli(
        "run", "--workload", "parsec.dedup,splash2x.volrend", "--scenario", "native,UC,OC", "--vcpus", "2,4",
        "--seed", "1,2", "--results", tpds, "-j", "1", cwd=root,
    )  # fmt: skip
    assert r.code == 0, r.err
    repo = Path(__file__).resolve().parents[2]
    r = run_cli("run", repo / "examples" / "shoot4u.toml", "--results", s4u, "-j", "1", cwd=root)
    assert r.code == 0, r.err
    return {"tpds": tpds, "s4u": s4u}


EXTERNAL = re.compile(
    r"""(?:src|href|action)\s*=\s*["']?\s*(?:https?:)?//|url\(\s*["']?\s*(?:https?:)?//|@import""", re.I
)


def check_page_text(text: str) -> int:
    """No script, no link to a style sheet or font, no URL but the SVG namespaces; returns
    the number of figures."""
    assert "<script" not in text.lower() and "<link" not in text.lower() and "<iframe" not in text.lower()
    assert not EXTERNAL.search(text)
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", text))
    assert urls <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}, urls
    figures = text.count('<figure class="fig">')
    assert text.count('<svg class="plot"') == figures
    return figures


def open_in_chromium(page: Path, profile: Path) -> tuple[list[list[float]], bytes, DevTools]:
    tools = DevTools(chromium(), profile)
    try:
        tools.open(page.resolve().as_uri())
        sizes = tools.evaluate(
            "[...document.querySelectorAll('figure.fig svg')].map(s => {"
            "const r = s.getBoundingClientRect(); "
            "return [r.width, r.height, s.querySelectorAll('path, use').length]; })"
        )
        shot = base64.b64decode(tools.send("Page.captureScreenshot", {"format": "png"})["data"])
    finally:
        tools.close()
    return sizes, shot, tools


def not_blank(png: bytes) -> float:
    """The share of pixels that are not (near) white."""
    from PIL import Image

    im = Image.open(io.BytesIO(png)).convert("L")
    hist = im.histogram()
    return 1.0 - sum(hist[245:]) / (im.width * im.height)


@pytest.mark.parametrize("name", ["tpds", "s4u"])
def test_report_opens_in_chromium(name: str, stores: dict[str, Path], cli: RunCli, tmp_path: Path) -> None:
    out = tmp_path / "out" / "report.html"
    out.parent.mkdir()
    r = cli("report", stores[name], "-o", out, "--title", f"{name} <test>")
    assert r.code == 0, r.err
    csv_dir = out.parent / "report_csv"
    assert r.out.splitlines()[0] == f"wrote {out}"
    assert r.out.splitlines()[1].startswith(f"wrote {csv_dir}/ (")
    assert r.err == ""  # quiet when stderr is not a terminal
    text = out.read_text(encoding="utf-8")
    figures = check_page_text(text)
    assert "<h1>tpds &lt;test&gt;</h1>" in text or "<h1>s4u &lt;test&gt;</h1>" in text

    # CSV: every table, linked from the page, with a header and rows.
    names = sorted(p.name for p in csv_dir.iterdir())
    assert names and all(n.endswith(".csv") for n in names)
    for n in names:
        assert f'href="report_csv/{n}"' in text
        rows = list(csv.reader(io.StringIO((csv_dir / n).read_text())))
        assert len(rows) >= 2 and all(len(row) == len(rows[0]) for row in rows), n

    if name == "tpds":
        assert figures == 7  # box plots, 2 × per workload (UC, OC), host exits, per vCPU, TLB ranges, speedup
        assert {"distribution.csv", "per_workload.csv", "host_exits.csv", "per_vcpu.csv", "speedup.csv",
                "categories.csv", "summary.csv", "methods.csv"} <= set(names)  # fmt: skip
        per_vcpu = list(csv.DictReader(io.StringIO((csv_dir / "per_vcpu.csv").read_text())))
        assert {row["scenario"] for row in per_vcpu} == {"UC", "OC"}
        assert all(float(row["normalised"]) > 0 for row in per_vcpu)
        assert 'id="ple-window"' in text and "set [record] ple_window = true" in text
    else:
        assert "tlb_cdf.csv" in names and "published.csv" in names and "per_vcpu.csv" not in names
        cdf = list(csv.DictReader(io.StringIO((csv_dir / "tlb_cdf.csv").read_text())))
        assert {row["variant"] for row in cdf} == {"vm.tlb=ipi", "vm.tlb=pv", "vm.tlb=shoot4u"}
        assert "no native cells: cycles per vCPU normalised to native needs scenario native" in text

    sizes, shot, tools = open_in_chromium(out, tmp_path / "profile")
    assert tools.errors() == []
    requested = tools.requests()
    assert requested and all(u.startswith("file://") for u in requested), requested
    assert len(sizes) == figures
    for width, height, marks in sizes:
        assert width > 300 and height > 100 and marks > 20, sizes
    assert not_blank(shot) > 0.03


def test_report_default_output_and_rewrite(stores: dict[str, Path], cli: RunCli, tmp_path: Path) -> None:
    results = tmp_path / "s4u"
    shutil.copytree(stores["s4u"], results)
    for _ in range(2):  # a second report replaces the first (CSV folder included)
        r = cli("report", results)
        assert r.code == 0, r.err
    assert (results / "report.html").is_file() and (results / "report_csv" / "tlb_cdf.csv").is_file()
    assert sorted(p.name for p in results.iterdir() if p.name.startswith(".report")) == []
    r = cli("summary", results)  # the store is still a store
    assert r.code == 0, r.err


def test_report_errors_are_one_line(stores: dict[str, Path], cli: RunCli, tmp_path: Path) -> None:
    def one_line(r: Any, *needles: str) -> None:
        assert r.code == 2, (r.out, r.err)
        assert r.out == "" and r.err.count("\n") == 1 and r.err.startswith("vcpulab: error: "), r.err
        for n in needles:
            assert n in r.err, r.err

    one_line(cli("report", tmp_path / "nope"), "is not a directory")
    (tmp_path / "plain").mkdir()
    one_line(cli("report", tmp_path / "plain"), "not a vcpulab results directory")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "manifest.jsonl").write_text('{"format": "vcpulab-results", "op": "format", "version": 1}\n')
    one_line(cli("report", empty), "holds no results")
    one_line(cli("report", stores["s4u"], "-o", tmp_path / "missing" / "r.html"), "does not exist")
    one_line(cli("report", stores["s4u"], "-o", tmp_path), "is a directory")
    (tmp_path / "r_csv").mkdir()
    (tmp_path / "r_csv" / "mine.txt").write_text("keep me")
    one_line(cli("report", stores["s4u"], "-o", tmp_path / "r.html"), "not a report's CSV folder")
    assert not (tmp_path / "r.html").exists() and (tmp_path / "r_csv" / "mine.txt").read_text() == "keep me"
    assert not (empty / "report.html").exists() and not (empty / "report_csv").exists()


def test_the_browser_check_sees_errors_and_requests(tmp_path: Path) -> None:
    """The checks above would catch a script error, a console error and a fetched URL (a
    loopback address that refuses the connection: nothing leaves the machine)."""
    page = tmp_path / "bad.html"
    page.write_text(
        '<!DOCTYPE html><html><body><img src="http://127.0.0.1:9/x.png">'
        "<script>console.error('bad'); undefinedFunction();</script></body></html>"
    )
    tools = DevTools(chromium(), tmp_path / "profile")
    try:
        tools.open(page.as_uri())
        tools.evaluate("1")
    finally:
        tools.close()
    errors = tools.errors()
    assert any("exception" in e for e in errors) and any("console.error" in e for e in errors), errors
    assert "http://127.0.0.1:9/x.png" in tools.requests()


def test_report_with_a_diagnosis_section(stores: dict[str, Path], cli: RunCli, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    r = cli("report", stores["tpds"], "-o", out, "--diagnose", "workload=parsec.dedup,scenario=OC,vcpus=4,seed=1")
    assert r.code == 0, r.err
    text = out.read_text(encoding="utf-8")
    check_page_text(text)
    assert '<section id="diagnosis">' in text and "parsec.dedup in OC, 4 vCPUs, seed 1" in text
    causes = list(csv.DictReader(io.StringIO((tmp_path / "report_csv" / "diagnosis_1_causes.csv").read_text())))
    # dedup's two virtualization costs in OC: its pthread spinlocks (user spinning on preempted
    # holders) and its glibc arena trims (TLB shootdowns); the larger one leads, with a real cost.
    added = [float(c["added_s"]) for c in causes]
    assert added == sorted(added, reverse=True) and added[0] > 0
    assert causes[0]["cause"] in ("user spinning", "TLB shootdowns"), causes[0]
    assert (tmp_path / "report_csv" / "diagnosis_1_mitigations.csv").is_file()
    _, _, tools = open_in_chromium(out, tmp_path / "profile")
    assert tools.errors() == []
    # Errors: no matching cell, too many cells, a bad field; nothing written.
    bad = tmp_path / "bad.html"
    for flt, msg in (
        ("workload=parsec.dedup,scenario=OC2", "no stored UC, OC or OC2 cell matches"),
        ("scenario=UC|OC", "at most 8"),
        ("colour=red", "unknown field"),
    ):
        r = cli("report", stores["tpds"], "-o", bad, "--diagnose", flt)
        assert r.code == 2 and msg in r.err and r.err.count("\n") == 1, r.err
        assert not bad.exists()
