"""``vcpulab run --timeline``: a Chrome/Perfetto trace of one cell, as a user records it."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import vcpulab
from conftest import REPO, RunCli, without_wall

SCHEMA = json.loads((REPO / "tests" / "schemas" / "trace-event.schema.json").read_text())
SMALL = ("run", "--workload", "heapchurn", "--scenario", "OC", "--vcpus", "2")


def heapchurn(scenario: str, *more: str) -> tuple[str, ...]:
    """``vcpulab run`` of heapchurn on 2 vCPUs in ``scenario`` (empty: all four), plus ``more``."""
    chosen = ("--scenario", scenario) if scenario else ()
    return ("run", "--workload", "heapchurn", "--vcpus", "2", *chosen, *more)


VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def validate(trace: dict[str, Any]) -> None:
    """The whole document against the schema (jsonschema takes ~0.4 ms an event: keep these short)."""
    VALIDATOR.validate(trace)


def validate_shapes(trace: dict[str, Any]) -> None:
    """A long trace: the schema on one event of each shape (phase, category, name, fields, arg
    names), and every event's times checked directly."""
    shapes: dict[tuple[Any, ...], dict[str, Any]] = {}
    for e in trace["traceEvents"]:
        for key in ("ts", "dur"):
            assert key not in e or (isinstance(e[key], int | float) and e[key] >= 0), e
        shape = (e["ph"], e.get("cat"), e["name"], tuple(sorted(e)), tuple(sorted(e.get("args", {}))))
        shapes.setdefault(shape, e)
    VALIDATOR.validate({**trace, "traceEvents": list(shapes.values())})


def ns(us: float) -> int:
    return round(us * 1000)


def tracks(trace: dict[str, Any]) -> dict[tuple[int, int], tuple[str, str]]:
    """(pid, tid) → (process name, track name)."""
    events = trace["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    return {
        (e["pid"], e["tid"]): (procs[e["pid"]], e["args"]["name"])
        for e in events
        if e["ph"] == "M" and e["name"] == "thread_name"
    }


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Any], Path]:
    """The timeline of a small run, recorded once for the tests that only read it."""
    from conftest import run_cli

    d = tmp_path_factory.mktemp("timeline")
    r = run_cli(*SMALL, "--timeline", "t.json", cwd=d)
    assert r.code == 0, r.err
    return r, json.loads((d / "t.json").read_text()), d


def test_a_small_run_writes_a_valid_trace(small: tuple[Any, dict[str, Any], Path]) -> None:
    r, trace, _ = small
    validate_shapes(trace)
    # The normal table still appears, and one line says where the timeline is.
    assert "heapchurn" in r.out and "δη_t" in r.out
    events = sum(1 for e in trace["traceEvents"] if e["ph"] != "M")
    assert r.err.strip() == f"vcpulab: wrote timeline t.json ({events:,} events; open in https://ui.perfetto.dev)"
    other = trace["otherData"]
    assert (other["workload"], other["scenario"], other["vcpus"], other["seed"]) == ("heapchurn", "OC", 2, 1)
    assert other["vcpulab_version"] == vcpulab.__version__
    assert other["events"] == events
    assert other["window"]["from_ns"] == 0 and other["window"]["to_ns"] == 100_000_000
    assert other["truncated_at_ns"] is None


def test_tracks_show_both_levels_of_scheduling(small: tuple[Any, dict[str, Any], Path]) -> None:
    _, trace, _ = small
    names = tracks(trace)
    assert sorted(names.values()) == [
        ("host (pCPUs)", "pCPU 0"),
        ("host (pCPUs)", "pCPU 1"),
        ("vm0 (vCPUs)", "vCPU 0"),
        ("vm0 (vCPUs)", "vCPU 1"),
        ("vm1 (vCPUs)", "vCPU 0"),
        ("vm1 (vCPUs)", "vCPU 1"),
    ]
    slices: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            slices[names[(e["pid"], e["tid"])]].append(e)
    pcpu = {n for k, s in slices.items() if k[0] == "host (pCPUs)" for n in (e["name"] for e in s)}
    # A pCPU shows which vCPU of which VM runs, and the host's own work.
    assert {"vm0 vcpu0", "vm0 vcpu1", "vm1 vcpu0", "vm1 vcpu1"} <= pcpu
    assert any(n.startswith("host: exit:") for n in pcpu)
    vcpu = {n for k, s in slices.items() if k[0].startswith("vm") for n in (e["name"] for e in s)}
    # A vCPU shows which guest thread runs, its kernel's work, and where it waits off its core.
    assert {"t0", "t1", "preempted"} <= vcpu
    assert any(n.startswith("kernel: ") for n in vcpu)
    # Each pCPU is accounted for over the whole window.
    window = trace["otherData"]["window"]
    for key, s in slices.items():
        if key[0] == "host (pCPUs)":
            assert sum(ns(e["dur"]) for e in s) == window["to_ns"] - window["from_ns"], key


def test_point_events_mark_exits_ipis_ple_and_shootdowns(small: tuple[Any, dict[str, Any], Path]) -> None:
    _, trace, _ = small
    names = tracks(trace)
    kinds = Counter((e["ph"], e.get("cat")) for e in trace["traceEvents"] if e["ph"] in "isf")
    for cat in ("exit", "ipi", "tlb", "ple"):
        assert kinds[("i", cat)] > 0, cat
    assert kinds[("s", "ipi")] > 0 and kinds[("f", "ipi")] > 0
    instants = [e for e in trace["traceEvents"] if e["ph"] == "i"]
    # Exits and guest IPIs are on vCPU tracks.
    assert all(names[(e["pid"], e["tid"])][0].startswith("vm") for e in instants if e["cat"] == "exit")
    shootdown = next(e for e in instants if e["name"] == "TLB shootdown")
    assert shootdown["args"]["targets"] and shootdown["args"]["policy"] == "ipi"
    done = next(e for e in instants if e["name"] == "TLB shootdown done")
    assert done["args"]["latency_ns"] > 0
    assert {"HLT", "MSR_WRITE_ICR"} <= {e["name"] for e in instants if e["cat"] == "exit"}
    # Every arrow that ends starts once, earlier.
    starts = {e["id"]: e["ts"] for e in trace["traceEvents"] if e["ph"] == "s"}
    for e in trace["traceEvents"]:
        if e["ph"] == "f":
            assert starts[e["id"]] <= e["ts"]


def test_recording_changes_neither_the_result_nor_the_bytes(cli: RunCli, tmp_path: Path) -> None:
    plain = cli(*SMALL, "--json")
    a = cli(*SMALL, "--json", "--timeline", "a.json")
    b = cli(*SMALL, "--json", "--timeline", "b.json")
    assert plain.code == a.code == b.code == 0, plain.err + a.err + b.err
    assert [without_wall(x) for x in a.json_lines()] == [without_wall(x) for x in plain.json_lines()]
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


def test_window_and_cap(cli: RunCli, tmp_path: Path) -> None:
    r = cli(*SMALL, "--timeline", "w.json", "--timeline-window", "10ms:12.5ms")
    assert r.code == 0, r.err
    trace = json.loads((tmp_path / "w.json").read_text())
    validate(trace)
    assert trace["otherData"]["window"] == {"from_ns": 10_000_000, "to_ns": 12_500_000, "requested_to_ns": 12_500_000}
    for e in trace["traceEvents"]:
        if e["ph"] != "M":
            assert 10_000_000 <= ns(e["ts"]) and ns(e["ts"]) + ns(e.get("dur", 0)) <= 12_500_000, e
    r = cli(*SMALL, "--timeline", "c.json", "--timeline-window", "0:", "--timeline-max-events", "300")
    assert r.code == 0, r.err
    trace = json.loads((tmp_path / "c.json").read_text())
    validate(trace)
    cut = trace["otherData"]["truncated_at_ns"]
    assert cut is not None and trace["otherData"]["window"]["to_ns"] == cut
    assert f"cut at {cut / 1e6:g} ms of virtual time by --timeline-max-events" in r.err


def test_a_window_after_the_run_is_empty_and_says_so(cli: RunCli, tmp_path: Path) -> None:
    r = cli(*SMALL, "--timeline", "e.json", "--timeline-window", "10s:")
    assert r.code == 0, r.err
    # The end time is the model's; the message must give it and say why nothing was recorded.
    assert re.search(r"\(0 events: the run ended at [0-9.]+ ms, before the window starts; open in", r.err), r.err
    validate(json.loads((tmp_path / "e.json").read_text()))


def test_a_native_cell_has_thread_tracks(cli: RunCli, tmp_path: Path) -> None:
    r = cli(*heapchurn("native", "--timeline", "n.json", "--timeline-window", "0:3ms"))
    assert r.code == 0, r.err
    trace = json.loads((tmp_path / "n.json").read_text())
    validate(trace)
    procs = {p for p, _ in tracks(trace).values()}
    assert procs == {"host (pCPUs)", "native0 (threads)"}


def test_one_cell_only(cli: RunCli, tmp_path: Path) -> None:
    r = cli(*heapchurn("", "--timeline", "t.json"))
    assert r.code == 2
    assert r.err == (
        "vcpulab: error: --timeline records one cell; this run selects 4 (choose one with --only, "
        "e.g. --only 'workload=heapchurn,scenario=native,vcpus=2,seed=1')\n"
    )
    assert not (tmp_path / "t.json").exists()
    # --only narrows it to one.
    r = cli(*heapchurn("", "--only", "scenario=UC", "--timeline", "t.json", "--timeline-window", "0:2ms"))
    assert r.code == 0, r.err
    validate(json.loads((tmp_path / "t.json").read_text()))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--timeline-window", "5ms"), "argument --timeline-window: expected START:END"),
        (("--timeline-window", "20ms:10ms"), "argument --timeline-window: the end must be after the start"),
        (("--timeline-window", "10:20"), "argument --timeline-window: expected START:END"),
        (("--timeline-window", "1h:"), "'1h' is not a duration"),
        (("--timeline-max-events", "0"), "argument --timeline-max-events: expected a positive integer"),
    ],
)
def test_bad_window_or_cap_is_one_line(cli: RunCli, tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    r = cli(*SMALL, "--timeline", "t.json", *args)
    assert r.code == 2
    assert r.err.startswith("vcpulab: error: ") and r.err.count("\n") == 1 and message in r.err, r.err
    assert not (tmp_path / "t.json").exists()


def test_bad_paths_and_conflicts_are_one_line(cli: RunCli, tmp_path: Path) -> None:
    (tmp_path / "adir").mkdir()
    cases = [
        (
            ("--timeline", "missing/t.json"),
            "--timeline: cannot write 'missing/t.json': directory 'missing' does not exist",
        ),
        (("--timeline", "adir"), "--timeline: cannot write 'adir': is a directory"),
        (("--timeline-window", "0:10ms"), "--timeline-window and --timeline-max-events need --timeline FILE"),
        (("--timeline", "t.json", "--results", "r"), "drop --results"),
        (("--timeline", "t.json", "--cluster", "tcp://127.0.0.1:1"), "drop --cluster"),
    ]
    for args, message in cases:
        r = cli(*SMALL, *args)
        assert r.code == 2, (args, r.err)
        assert r.err == f"vcpulab: error: {message}\n" or (r.err.count("\n") == 1 and message in r.err), r.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir"]


def test_a_run_that_fails_writes_its_timeline_up_to_the_failure(cli: RunCli, tmp_path: Path) -> None:
    # A run limit: the timeline shows what led to it (a valid, complete file up to the
    # failure), then the run fails as it does without --timeline.
    r = cli(*SMALL, "--timeline", "t.json", "--set", 'limits.max_virtual_time="1ms"')
    assert r.code == 3
    note, error = r.err.splitlines()
    assert re.fullmatch(r"vcpulab: wrote timeline t\.json up to the failure below \([0-9,]+ events; open in .*\)", note), r.err
    assert error.startswith("vcpulab: error: ") and "run limit reached" in error, r.err
    trace = json.loads((tmp_path / "t.json").read_text())
    validate_shapes(trace)
    ends = [ns(e["ts"]) + ns(e.get("dur", 0)) for e in trace["traceEvents"] if e["ph"] != "M"]
    # The cores ran up to the limit: the tracks end at 1 ms.
    assert ends and abs(max(ends) - 1_000_000) <= 1, max(ends)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]
    # A failure before anything is recorded (a bad window) still writes nothing.
    r = cli(*SMALL, "--timeline", "u.json", "--timeline-window", "20ms:10ms")
    assert r.code == 2 and not (tmp_path / "u.json").exists()


def test_python_api_failed_run_carries_the_timeline() -> None:
    plan = vcpulab.plan(
        {"experiment": {"workloads": ["lock"], "scenarios": ["UC"], "vcpus": [2]}, "limits": {"max_events": 5000}}
    )
    with pytest.raises(vcpulab.SimulationError, match="limits.max_events") as info:
        plan.run_cell_with_timeline(0, 0, None, 100_000)
    doc = json.loads(info.value.timeline)  # type: ignore[attr-defined]
    validate_shapes(doc)
    assert doc["otherData"]["events"] == info.value.timeline_events > 0  # type: ignore[attr-defined]
    assert info.value.timeline_truncated_at is None  # type: ignore[attr-defined]


def test_python_api() -> None:
    plan = vcpulab.plan({"experiment": {"workloads": ["lock"], "scenarios": ["UC"], "vcpus": [2]}})
    result, trace, events, cut = plan.run_cell_with_timeline(0, 0, 2_000_000, 100_000)
    assert json.loads(result)["scenario"] == "UC"
    doc = json.loads(trace)
    validate(doc)
    assert doc["otherData"]["events"] == events and cut is None
    with pytest.raises(ValueError, match="must be after its start"):
        plan.run_cell_with_timeline(0, 10, 10)


def test_the_schema_rejects_malformed_events() -> None:
    good = {"name": "a", "ph": "X", "ts": 1.5, "dur": 2, "pid": 1, "tid": 2}
    validate({"traceEvents": [good]})
    bad_events = [
        {k: v for k, v in good.items() if k != "dur"},  # X without dur
        {**good, "ts": -1},  # negative time
        {"name": "a", "ph": "i", "s": "t", "ts": 1, "pid": 1},  # thread instant without tid
        {"name": "a", "ph": "i", "ts": 1, "pid": 1, "tid": 1, "dur": 3},  # instants have no duration
        {"name": "thread_name", "ph": "M", "pid": 1, "args": {"name": "x"}},  # thread metadata without tid
        {"name": "process_sort_index", "ph": "M", "pid": 1, "args": {"sort_index": "first"}},
        {"name": "IPI", "cat": "ipi", "ph": "f", "ts": 1, "pid": 1, "tid": 1},  # flow without id
        {"name": "IPI", "cat": "ipi", "ph": "s", "ts": 1, "pid": 1, "tid": 1, "id": 1, "bp": "e"},
        {**good, "ph": "Q"},
    ]
    for e in bad_events:
        with pytest.raises(jsonschema.ValidationError):
            validate({"traceEvents": [e]})
