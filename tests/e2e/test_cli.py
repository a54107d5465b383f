"""The vcpulab command end to end, as a user runs it."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

import vcpulab
from conftest import CORE_WORKLOADS, RESULT_KEYS, RunCli, without_wall


def test_version(cli: RunCli) -> None:
    r = cli("--version")
    assert r.code == 0, r.err
    assert r.out.strip() == f"vcpulab {vcpulab.__version__}"


def test_run_json_prints_one_sane_result(cli: RunCli) -> None:
    r = cli("run", "--workload", "ep", "--scenario", "UC", "--vcpus", "4", "--json")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert len(lines) == 1
    res = json.loads(lines[0])
    assert RESULT_KEYS <= res.keys()
    assert (res["workload"], res["scenario"], res["vcpus"], res["seed"]) == ("ep", "UC", 4, 1)
    assert res["threads"] == 4
    assert res["t_native_s"] > 0
    assert res["t_virt_s"] >= 0
    assert res["omega"] == pytest.approx((1 + res["delta_eta_t"]) / (1 + res["delta_eta_r"]), rel=1e-9, abs=1e-9)
    assert all(isinstance(n, int) and n >= 0 for n in res["exits"].values())
    assert all(ns >= 0 for ns in res["host_ns_by_reason"].values())
    assert res["guest_ns"] >= 0 and res["host_ns"] >= 0
    assert res["events"] > 0
    assert res["duration_s"] > 0


def test_run_is_deterministic(cli: RunCli) -> None:
    args = ("run", "--workload", "lock", "--scenario", "OC", "--vcpus", "4", "--seed", "3", "--json")
    first, second = cli(*args), cli(*args)
    assert first.code == second.code == 0, first.err + second.err
    assert [without_wall(x) for x in first.json_lines()] == [without_wall(x) for x in second.json_lines()]


def test_default_scenarios_are_all_four_in_order(cli: RunCli) -> None:
    r = cli("run", "--workload", "ep", "--vcpus", "2", "--json")
    assert r.code == 0, r.err
    results = r.json_lines()
    assert [x["scenario"] for x in results] == ["native", "UC", "OC", "OC2"]
    native = results[0]
    assert native["t_virt_s"] is None and native["omega"] is None


def test_set_overrides_the_flags(cli: RunCli) -> None:
    r = cli("run", "--workload", "ep", "--scenario", "UC", "--vcpus", "4", "--set", "experiment.vcpus=[2]", "--json")
    assert r.code == 0, r.err
    assert [x["vcpus"] for x in r.json_lines()] == [2]


def test_flags_override_a_spec_file(cli: RunCli, tmp_path: Path) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text('[experiment]\nworkloads = ["lock"]\nscenarios = ["native", "UC"]\nvcpus = [4]\nseeds = [1]\n')
    r = cli("run", spec, "--workload", "ep", "--scenario", "UC", "--vcpus", "2", "--seed", "5", "--json")
    assert r.code == 0, r.err
    assert [(x["workload"], x["scenario"], x["vcpus"], x["seed"]) for x in r.json_lines()] == [("ep", "UC", 2, 5)]


def test_human_table(cli: RunCli) -> None:
    r = cli("run", "--workload", "ep", "--scenario", "native,UC", "--vcpus", "2")
    assert r.code == 0, r.err
    assert r.err == ""  # no progress bar when stderr is not a terminal
    for text in ("workload", "δη_t", "δη_r", "ω", "weighted speedup", "ep", "native", "UC"):
        assert text in r.out


def test_out_writes_the_json_lines(cli: RunCli, tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    r = cli("run", "--workload", "ep", "--scenario", "UC", "--vcpus", "2", "--json", "--out", out)
    assert r.code == 0, r.err
    assert out.read_text() == r.out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.jsonl"]


def test_workloads_lists_the_builtins(cli: RunCli) -> None:
    r = cli("workloads", "--json")
    assert r.code == 0, r.err
    items = [w for w in r.json_lines() if w["kind"] == "profile"]  # the traced programs follow
    names = [w["name"] for w in items]
    assert len(names) == len(set(names)) >= 7
    assert CORE_WORKLOADS <= set(names)
    assert all(w["source"] == "builtin" and w["description"] and w["model"] for w in items)
    table = cli("workloads")
    assert table.code == 0, table.err
    assert all(name in table.out for name in names)


def test_policies_lists_every_selectable_implementation(cli: RunCli) -> None:
    r = cli("policies", "--json")
    assert r.code == 0, r.err
    items = r.json_lines()
    by_kind: dict[str, set[str]] = {}
    for p in items:
        by_kind.setdefault(p["kind"], set()).add(p["name"])
        assert p["field"] and p["description"]
    assert by_kind["ple_window"] >= {"kvm", "fixed"}
    assert by_kind["ple_yield"] >= {"kvm", "none"}
    assert by_kind["tlb"] == {"ipi", "pv", "shoot4u"}
    # Every listed name is accepted by the field it names.
    for p in items:
        v = cli("validate", "--workload", "ep", "--set", f'{p["field"]}="{p["name"]}"')
        assert v.code == 0, (p, v.err)
    table = cli("policies")
    assert table.code == 0 and "shoot4u" in table.out


def test_directed_yield_generation_is_a_validated_setting(cli: RunCli) -> None:
    # The presets name their kernel's kvm_vcpu_on_spin candidate rule; a spec may set another.
    ok = cli("validate", "--workload", "ep", "--set", 'platform.preset="TPDS-4S"', "--print-spec")
    assert ok.code == 0 and 'yield_candidates = "v4.14"' in ok.out, ok.err
    bad = cli("validate", "--workload", "ep", "--set", 'vm.ple.yield_candidates="v4.15"')
    assert bad.code == 2 and "Traceback" not in bad.err, bad.err
    assert len(bad.err.strip().splitlines()) == 1 and "vm.ple.yield_candidates" in bad.err
    assert "expected one of v3.10, v4.14, v5.3, v5.13" in bad.err


def test_workloads_show_prints_toml(cli: RunCli) -> None:
    r = cli("workloads", "show", "lock")
    assert r.code == 0, r.err
    assert tomllib.loads(r.out)


def test_validate_lists_cells(cli: RunCli) -> None:
    r = cli("validate", "--workload", "ep,lock", "--scenario", "UC", "--vcpus", "2,4", "--json")
    assert r.code == 0, r.err
    cells = r.json_lines()
    assert sorted((c["workload"], c["vcpus"]) for c in cells) == [("ep", 2), ("ep", 4), ("lock", 2), ("lock", 4)]
    assert {c["scenario"] for c in cells} == {"UC"}


def test_validate_print_spec_is_toml(cli: RunCli) -> None:
    r = cli("validate", "--workload", "ep", "--vcpus", "2", "--print-spec")
    assert r.code == 0, r.err
    assert tomllib.loads(r.out)


def test_bench(cli: RunCli) -> None:
    r = cli("bench", "--seconds", "0.3", "--json")
    assert r.code == 0, r.err
    b = json.loads(r.out)
    assert b["events"] > 0 and b["events_per_s"] > 0 and b["sim_per_wall"] > 0
    human = cli("bench", "--seconds", "0.1")
    assert human.code == 0 and "events/s" in human.out


def test_characterize_sim_classifies_a_workload(cli: RunCli) -> None:
    r = cli("characterize-sim", "lock", "--cpus", "4", "--json")
    assert r.code == 0, r.err
    (c,) = r.json_lines()
    assert c["workload"] == "lock" and c["cpus"] == 4 and c["threads"] == 4
    assert c["scalability_type"] in (1, 2, 3, 4)
    assert c["high_sync"] and c["sync_per_thread_s"] >= c["sync_threshold_per_s"]
    table = cli("characterize-sim", "lock", "--cpus", "4")
    assert table.code == 0 and "scalability type" in table.out
    bad = cli("characterize-sim", "nosuch")
    assert bad.code == 2 and "unknown workload 'nosuch'" in bad.err and "Traceback" not in bad.err
    for flags, message in ((["--cpus", "0"], "--cpus must be at least 1"), (["--slice", "soon"], "milliseconds")):
        bad = cli("characterize-sim", "lock", *flags)
        assert bad.code == 2 and message in bad.err and "Traceback" not in bad.err, bad.err
    amb = cli("characterize-sim", "raytrace")
    assert amb.code == 2 and "ambiguous" in amb.err, amb.err


def test_vcpu_quota_caps_a_vcpu_and_reports_cpu_stat(cli: RunCli) -> None:
    # libvirt's <cputune><quota>/<period> as vm.quota/vm.period: ep on 2 vCPUs, alone in UC,
    # capped at a quarter of each core, runs about 4 times as long and is throttled every period.
    base = ("run", "--workload", "ep", "--scenario", "UC", "--vcpus", "2", "--json")
    free = cli(*base)
    capped = cli(*base, "--set", 'vm.quota="5ms"', "--set", 'vm.period="20ms"')
    assert free.code == capped.code == 0, free.err + capped.err
    (f,), (c,) = free.json_lines(), capped.json_lines()
    assert 3.5 < c["t_virt_s"] / f["t_virt_s"] < 4.5
    stats = [v["bandwidth"] for v in c["run"]["vms"][0]["vcpus"]]
    assert all(s["nr_throttled"] > 0 and s["throttled_ns"] > 0 for s in stats), stats
    assert all("bandwidth" not in v for v in f["run"]["vms"][0]["vcpus"])
    bad = cli(*base, "--set", 'vm.global_quota="5ms"', "--set", 'host.cgroups="none"')
    assert bad.code == 2 and "Traceback" not in bad.err, bad.err
    assert len(bad.err.strip().splitlines()) == 1 and "vm.global_quota" in bad.err


def test_guest_spinlocks_and_old_glibc_trimming_show_in_the_vm_profile(cli: RunCli) -> None:
    # heapchurn in OC with glibc 2.19's thread-heap trimming (arena_trim = "always"): every item
    # trims and faults back in through the guest's page-allocator locks, and the VM's profile
    # metrics split its guest time into TLB shootdowns, kernel spinlocks, other kernel and user.
    base = ("run", "--workload", "heapchurn", "--scenario", "OC", "--vcpus", "4", "--json")
    base += ("--set", "workloads.heapchurn.params.items=60", "--set", 'guest.arena_trim="always"')
    for lock in ("ticket", "qspinlock", "pmt"):
        r = cli(*base, "--set", f'guest.spinlock="{lock}"')
        assert r.code == 0, r.err
        (res,) = r.json_lines()
        m = res["metrics"]
        shares = [m[k] for k in ("vm_cpu_tlb_share", "vm_cpu_lock_share", "vm_cpu_kernel_other_share", "vm_cpu_user_share")]
        assert sum(shares) == pytest.approx(1.0) and all(s >= 0 for s in shares), m
        assert m["vm_cpu_tlb_share"] > 0, m
    # PMT is a guest spinlock: a one-line error naming the field.
    bad = cli(*base, "--set", 'host.spinlock="pmt"')
    assert bad.code == 2 and "Traceback" not in bad.err, bad.err
    assert len(bad.err.strip().splitlines()) == 1 and "host.spinlock" in bad.err and "guest" in bad.err
    bad = cli(*base, "--set", 'guest.arena_trim="sometimes"')
    assert bad.code == 2 and len(bad.err.strip().splitlines()) == 1 and "guest.arena_trim" in bad.err, bad.err
