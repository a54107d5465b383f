"""APICv off: what it costs in the model, and the note that says when it cannot cost anything."""

from __future__ import annotations

from conftest import run_cli
from vcpulab.spec import apicv_note


def test_the_note_names_apicv_off_with_pv_eoi_on_only() -> None:
    assert apicv_note("[vm]\napicv = false\n") is not None
    assert apicv_note("[vm]\napicv = false\n[vm.pv]\neoi = false\n") is None
    assert apicv_note("[vm]\napicv = true\n") is None
    assert apicv_note("") is None
    # A named VM inherits [vm] and may override it.
    assert apicv_note("[vm]\napicv = false\n[vm.pv]\neoi = false\n[vms.a]\npv = { eoi = true }\n") is not None
    assert apicv_note("[vms.a]\napicv = false\n") is not None
    # ... and variants that turn it off.
    assert apicv_note('[experiment]\nvary = { "vm.apicv" = [true, false] }\n') is not None
    assert apicv_note('[[experiment.variants]]\nname = "x"\nset = { "vm.apicv" = false }\n') is not None
    no_eoi = '[[experiment.variants]]\nname = "x"\nset = { "vm.apicv" = false, "vm.pv.eoi" = false }\n'
    assert apicv_note(no_eoi) is None


def test_apicv_off_costs_exits_where_interrupts_queue_and_says_why_elsewhere() -> None:
    args = ("run", "--workload", "heapchurn", "--scenario", "OC", "--vcpus", 4, "--json")
    on = run_cli(*args)
    off = run_cli(*args, "--set", "vm.apicv=false")
    assert on.code == 0 and off.code == 0, (on.err, off.err)
    assert "vm.apicv" not in on.err
    assert "vcpulab: note: vm.apicv = false with PV EOI on" in off.err
    (r_on,) = [r for r in on.json_lines() if r["scenario"] == "OC"]
    (r_off,) = [r for r in off.json_lines() if r["scenario"] == "OC"]
    assert "INTERRUPT_WINDOW" not in r_on["exits"]
    assert r_off["exits"]["INTERRUPT_WINDOW"] > 0
    # Their host time is charged. (The runs' totals differ by more than that: in this
    # overcommitted run the schedules diverge once a cost changes.)
    assert r_off["delta_eta_r_by_reason"]["INTERRUPT_WINDOW"] > 0
    assert "INTERRUPT_WINDOW" not in r_on["delta_eta_r_by_reason"]


def test_validate_gives_the_same_note() -> None:
    r = run_cli("validate", "--workload", "lock", "--scenario", "UC", "--set", "vm.apicv=false")
    assert r.code == 0 and "vcpulab: note: vm.apicv = false with PV EOI on" in r.err
    r = run_cli(
        "validate", "--workload", "lock", "--scenario", "UC", "--set", "vm.apicv=false", "--set", "vm.pv.eoi=false"
    )
    assert r.code == 0 and "vm.apicv" not in r.err
