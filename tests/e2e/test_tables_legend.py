"""What `vcpulab run`'s table and legend say (issue 21, items 6 and 11): the top host cost is a
share of one set of VMs' host time, and with OC/OC2 rows the legend explains what δη_t compares
with (γ_v/γ_p = 1/k in OC) and what a negative value means; so do the report's captions."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

from conftest import RunCli

OC_NOTE = "γ_v/γ_p = 1/k"
OC2_NOTE = "(γ_v/γ_p = 1)"


def _rows(table: str) -> list[list[str]]:
    """The body rows of a rich table, as stripped cells."""
    return [[c.strip() for c in line.split("│")[1:-1]] for line in table.splitlines() if line.startswith("│")]


def _measured_host_by_reason(result: dict[str, Any]) -> dict[str, int]:
    measured = {i["vm"] for i in result["run"]["instances"] if not i["background"]}
    out: dict[str, int] = {}
    for vm in result["run"]["vms"]:
        if vm["vm"] in measured:
            for reason, ns in vm["host_ns_by_reason"].items():
                out[reason] = out.get(reason, 0) + ns
    return out


def test_top_host_cost_with_co_runner_vms_is_a_share_of_the_same_vms(cli: RunCli, tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    r = cli(
        "run",
        "--workload",
        "parsec.blackscholes",
        "--scenario",
        "native,OC",
        "--vcpus",
        "1,16",
        "--set",
        "experiment.oc_vms=4",
        "--set",
        'experiment.corunner="cpuhog"',
        "--no-store",
        "-o",
        out,
    )
    assert r.code == 0, r.err
    results = {(x["scenario"], x["vcpus"]): x for x in map(json.loads, out.read_text().splitlines())}
    header = next(line for line in r.out.splitlines() if line.startswith("┃"))
    col = [c.strip() for c in header.split("┃")[1:-1]].index("top host cost")
    shown = 0
    for row in _rows(r.out):
        if row[1] != "OC":
            continue
        res = results[("OC", int(row[2]))]
        # The co-runners' VMs have host time too: they are not in the share.
        assert len(res["run"]["vms"]) == 4 and sum(not i["background"] for i in res["run"]["instances"]) == 1
        by_reason = _measured_host_by_reason(res)
        top = max(sorted(by_reason), key=lambda k: by_reason[k])
        m = re.fullmatch(r"(\S+) (\d+)%", row[col])
        assert m, row[col]
        assert m.group(1) == top
        assert int(m.group(2)) <= 100
        assert int(m.group(2)) == round(100 * by_reason[top] / sum(by_reason.values()))
        shown += 1
    assert shown == 2


def _legend(out: str) -> str:
    return out[out.index("t_native, t_virt  simulated") :]


def test_legend_explains_oc_gamma_only_with_oc_rows(cli: RunCli) -> None:
    small = ["--set", "workloads.ep.params.chunks=20", "--no-store"]
    oc = cli(
        "run", "--workload", "ep", "--scenario", "native,OC", "--vcpus", "2", "--set", "experiment.oc_vms=2", *small
    )
    assert oc.code == 0, oc.err
    legend = _legend(oc.out)
    flat = " ".join(legend.split())
    assert OC_NOTE in flat and "δη_t = 1/k − 1 (k = 2: −50 %)" in flat
    assert "not because it is faster" in flat and "A negative δη_t means" in flat
    assert OC2_NOTE not in flat
    # The table's own OC row: δη_t = (t_v/k − t_p)/t_p.
    row = next(r for r in _rows(oc.out) if r[1] == "OC")
    assert row[5].endswith("%")

    k3 = cli(
        "run", "--workload", "ep", "--scenario", "native,OC,OC2", "--vcpus", "2", "--set", "experiment.oc_vms=3", *small
    )
    assert k3.code == 0, k3.err
    flat = " ".join(_legend(k3.out).split())
    assert "(k = 3: −67 %)" in flat and OC2_NOTE in flat

    plain = cli("run", "--workload", "ep", "--scenario", "native,UC", "--vcpus", "2", *small)
    assert plain.code == 0, plain.err
    assert OC_NOTE not in plain.out and OC2_NOTE not in plain.out and "δη_t" in _legend(plain.out)


def test_report_captions_explain_oc_gamma(cli: RunCli, tmp_path: Path) -> None:
    store = tmp_path / "results"
    r = cli(
        "run",
        "--workload",
        "ep",
        "--scenario",
        "native,OC",
        "--vcpus",
        "1,2",
        "--set",
        "workloads.ep.params.chunks=20",
        "--results",
        store,
    )
    assert r.code == 0, r.err
    page = tmp_path / "report.html"
    rep = cli("report", store, "-o", page)
    assert rep.code == 0, rep.err
    text = html.unescape(page.read_text(encoding="utf-8"))
    methods = text[text.index('id="methods"') :]
    assert OC_NOTE in methods and "not because it is faster" in methods
    distribution = text[text.index('id="distribution"') : text.index('id="per-workload"')]
    assert OC_NOTE in distribution and "−50 %" in distribution
