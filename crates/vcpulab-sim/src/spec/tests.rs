use super::*;

fn parse(text: &str, sets: &[&str]) -> Result<Spec, SpecError> {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    Spec::parse(text, "t.toml", &sets)
}

const MIN: &str = "[experiment]\nworkloads = [\"lock\"]\n";

#[test]
fn minimal_spec_uses_defaults_and_builtins() {
    let s = parse(MIN, &[]).unwrap();
    assert_eq!(s.experiment.vcpus.0, vec![8]);
    assert_eq!(s.experiment.scenarios.0.len(), 4);
    assert_eq!(s.workloads[0].name, "lock");
    assert!(s.materialized.contains("[workloads.lock]"));
}

#[test]
fn narrowing_the_workloads_on_the_command_line_points_at_only() {
    let spec = "[experiment]\nworkloads = [\"lock\", \"ep\"]\n[workloads.ep.params]\nchunks = 3\n";
    let e = parse(spec, &["experiment.workloads=[\"lock\"]"]).unwrap_err();
    assert_eq!((e.source.as_str(), e.field.as_str()), ("t.toml", "workloads.ep"));
    assert!(e.message.contains("no workload 'ep'") && e.message.contains("--only workload=NAME"), "{e}");
    // Without the override, a table for a workload the spec does not run is a plain error.
    let e = parse("[experiment]\nworkloads = [\"lock\"]\n[workloads.ep.params]\nchunks = 3\n", &[]).unwrap_err();
    assert!(e.message.contains("no workload 'ep'") && !e.message.contains("--only"), "{e}");
}

#[test]
fn overrides_reach_builtin_workloads_and_blame_the_flag() {
    let s = parse(MIN, &["workloads.lock.params.iterations=7", "experiment.vcpus=[2,4]"]).unwrap();
    assert_eq!(s.experiment.vcpus.0, vec![2, 4]);
    assert_eq!(
        s.workloads[0].program.instrs[0],
        crate::workload::Instr::LoopStart { count: crate::workload::Times::Fixed(7), end: 5, share: crate::workload::Share::Each }
    );
    let e = parse(MIN, &["vm.apicvv=false"]).unwrap_err();
    assert_eq!(e.source, "--set vm.apicvv=false");
    assert!(e.message.contains("unknown field"), "{e}");
    let e = parse(MIN, &["experiment.vcpus=[0]"]).unwrap_err();
    assert_eq!(e.field, "experiment.vcpus[0]");
    let e = parse(MIN, &["workloads.lock.params.iterations=-5"]).unwrap_err();
    assert_eq!(e.source, "--set workloads.lock.params.iterations=-5");
    assert!(e.message.contains("params.iterations"), "{e}");
    let e = parse(MIN, &["vm.apicv.x=1"]).unwrap_err();
    assert_eq!(e.source, "--set vm.apicv.x=1");
    let e = parse(MIN, &["novalue"]).unwrap_err();
    assert!(e.to_string().contains("PATH=VALUE"));
}

#[test]
fn errors_name_file_and_field() {
    let e = parse("[experiment\n", &[]).unwrap_err();
    assert!(e.message.starts_with("malformed TOML"), "{e}");
    assert_eq!(e.source, "t.toml");
    let e = parse("[experiment]\nworkloads = [\"nope\"]\n", &[]).unwrap_err();
    assert_eq!(e.field, "experiment.workloads[0]");
    assert!(e.message.contains("unknown workload 'nope'"), "{e}");
    let e = parse("[experiment]\nworkloads = [\"w\"]\n[workloads.w]\nprogram = [{ compute = -5 }]\n", &[]).unwrap_err();
    assert_eq!(e.field, "workloads.w.program[0].compute");
    let e = parse("[experiment]\nworkloads = [\"lock\"]\nscenarios = [\"XC\"]\n", &[]).unwrap_err();
    assert!(e.message.contains("unknown scenario 'XC'"), "{e}");
    let e = parse("[experiment]\nworkloads = [\"lock\"]\n[machine]\nsockets = 0\n", &[]).unwrap_err();
    assert_eq!(e.field, "machine.sockets");
    let e = parse("[experiment]\nworkloads = [\"lock\"]\n[machine.costs]\nexit_hlt = -1\n", &[]).unwrap_err();
    assert!(e.field.starts_with("machine.costs.exit_hlt"), "{e:?}");
    let e = parse("[experiment]\nworkloads = [\"lock\"]\n[limits]\nmax_virtual_time = \"soon\"\n", &[]).unwrap_err();
    assert_eq!(e.field, "limits.max_virtual_time");
}

#[test]
fn thread_dependent_checks_use_the_run_thread_count() {
    let w = "[experiment]\nworkloads = [\"w\"]\nvcpus = [2]\n[workloads.w]\nobjects = { b = { kind = \"barrier\", parties = 4 } }\nprogram = [{ barrier = \"b\" }]\n";
    let e = parse(w, &[]).unwrap_err();
    assert_eq!(e.field, "workloads.w.objects.b.parties");
}

#[test]
fn mechanism_settings_reject_bad_input_with_the_field() {
    let cases: &[(&str, &[&str], &str, &str)] = &[
        (MIN, &["vm.ple.window_policy=\"adaptive\""], "vm.ple.window_policy", "unknown policy 'adaptive'"),
        (MIN, &["vm.ple.yield_policy=\"hvs_all\""], "vm.ple.yield_policy", "expected one of: kvm, none, hvs, hvs_causality"),
        (MIN, &["vm.ple.aple.epoch_exits=0"], "vm.ple.aple.epoch_exits", "positive number of PLE exits"),
        (MIN, &["vm.ple.aple.initial=100"], "vm.ple.aple.initial", "within [ple.aple.min, ple.aple.max] = [4096, 32768]"),
        (MIN, &["vm.ple.aple.min=40000"], "vm.ple.aple.min", "expected 1..=ple.aple.max (32768)"),
        (MIN, &["vm.ple.aple.delta=0"], "vm.ple.aple.delta", "positive step"),
        (MIN, &["vm.ple.aple.epochs=5"], "vm.ple.aple.epochs", "unknown field"),
        (MIN, &["vm.ple.yield_candidates=\"v4.15\""], "vm.ple.yield_candidates", "expected one of v3.10, v4.14, v5.3, v5.13"),
        (MIN, &["vm.llc=\"foo\""], "vm.llc", "expected one of per_vcpu, shared"),
        (MIN, &["vm.lazy_fpu=3"], "vm.lazy_fpu", "expected a boolean"),
        (MIN, &["host.idle=\"mwaitx\""], "host.idle", "expected one of halt, poll, haltpoll, mwait"),
        (MIN, &["guest.cond_broadcast=\"signal\""], "guest.cond_broadcast", "expected one of wake_all, requeue"),
        (MIN, &["host.arena_trim=\"never\""], "host.arena_trim", "expected one of threshold, always"),
        (MIN, &["guest.spinlock=\"mcs\""], "guest.spinlock", "expected one of qspinlock, ticket, byte, pmt"),
        (MIN, &["host.spinlock=\"pmt\""], "host.spinlock", "pmt) are a guest policy"),
        (MIN, &["guest.futex_wake=\"early\""], "guest.futex_wake", "expected one of deferred, locked"),
        (MIN, &["guest.rwsem_spin=\"always\""], "guest.rwsem_spin", "expected one of none, owner_on_cpu, vcpu_aware"),
        (MIN, &["host.rwsem_spin=1"], "host.rwsem_spin", "expected a name (a string) such as \"vcpu_aware\""),
        (MIN, &["host.mm_locks=\"per_thread\""], "host.mm_locks", "expected one of mmap_sem, per_vma_faults, per_vma"),
        (MIN, &["guest.tcache_bytes=100000"], "guest.tcache_bytes", "expected 0 (no tcache) up to 65536 bytes"),
        (MIN, &["host.tcache_bytes=\"640\""], "host.tcache_bytes", "expected"),
        (MIN, &["machine.costs.futex_hb=-1"], "machine.costs.futex_hb", "expected a non-negative integer"),
        (MIN, &["machine.costs.sock_lock=\"fast\""], "machine.costs.sock_lock", "expected a non-negative integer"),
        (MIN, &["host.cgroups=\"v2\""], "host.cgroups", "expected one of libvirt, none"),
        (MIN, &["host.native_groups=true", "host.cgroups=\"none\""], "host.native_groups", "expected cgroups = \"libvirt\""),
        (MIN, &["guest.native_groups=true"], "guest.native_groups", "use [host] native_groups"),
        (MIN, &["vm.cpu_weight=0"], "vm.cpu_weight", "expected 1..=10000"),
        (MIN, &["vm.emulator={count=2, run=0}"], "vm.emulator", "expected positive run and interval durations"),
        (MIN, &["vm.emulator={count=2, threads=3}"], "vm.emulator.threads", "unknown field"),
        (MIN, &["guest.pin_threads=2"], "guest.pin_threads", "expected a boolean"),
        (MIN, &["vm.vcpus=2"], "vm.vcpus", "in [vms.N] (N >= 1)"),
        (MIN, &["vms.0.vcpus=2"], "vms.0.vcpus", "the measured VM's vCPU count is experiment.vcpus"),
        (MIN, &["vms.1.vcpus=0"], "vms.1.vcpus", "expected 1..="),
        (MIN, &["vms.1.vcpus=2", "experiment.vcpus=[1, 4]"], "vms.1.vcpus", "expected 1..=1, at most the run's cores"),
        (MIN, &["vm.cpu_weight=200", "vm.weight=2048"], "vm.cpu_weight", "not both"),
        (MIN, &["vm.period=\"500us\""], "vm.period", "expected a period of 1ms..=1s"),
        (MIN, &["vm.global_period=\"2s\""], "vm.global_period", "expected a period of 1ms..=1s"),
        (MIN, &["vm.quota=\"10us\""], "vm.quota", "expected a quota of at least 1ms"),
        (MIN, &["vm.vcpu_quotas=[\"5ms\", 100]"], "vm.vcpu_quotas[1]", "cpu.max minimum (got 100 ns)"),
        (MIN, &["vm.global_quota=\"5ms\"", "host.cgroups=\"none\""], "vm.global_quota", "expected host.cgroups = \"libvirt\""),
        (MIN, &["vms.1.global_quota=\"5ms\"", "host.cgroups=\"none\""], "vms.1.global_quota", "needs the VM's group"),
        (MIN, &["vm.quota=\"fast\""], "vm.quota", "use ns, us, ms or s"),
        (MIN, &["experiment.variants=[{set={}}]"], "experiment.variants[0]", "missing field `name`"),
        (MIN, &["experiment.variants=[{name=\"a;b\"}]"], "experiment.variants[0].name", "without ';'"),
        (MIN, &["experiment.variants=[{name=\"a\"},{name=\"a\"}]"], "experiment.variants[1].name", "names two variants"),
        (
            MIN,
            &["experiment.variants=[{name=\"a\",set={\"experiment.vcpus\"=[2]}}]"],
            "experiment.variants[0].set.\"experiment.vcpus\"",
            "axes cannot be set",
        ),
        (
            MIN,
            &["experiment.variants=[{name=\"a\",set={\"vm.tlb\"=\"pv\"}}]", "experiment.vary={\"vm.tlb\"=[\"ipi\"]}"],
            "experiment.variants[0].set.\"vm.tlb\"",
            "also a key of experiment.vary",
        ),
        (MIN, &["vm.ple.max_cycles=100"], "vm.ple.max_cycles", "at least ple.window_cycles"),
        (MIN, &["vm.tlb=\"flush\""], "vm.tlb", "flush"),
        (MIN, &["vm.pv.spinlocks=true", "vm.pv.spin_threshold=0"], "vm.pv.spin_threshold", "positive"),
        (MIN, &["guest.idle=\"spin\""], "guest.idle", "spin"),
        (MIN, &["guest.daemons.count=2"], "guest.daemons.count", "only [host.daemons]"),
        (MIN, &["host.daemons.count=2", "host.daemons.run=0"], "host.daemons", "positive"),
        (MIN, &["report.cdf=\"tlb_latency\""], "report.cdf", "tlb_samples"),
        (MIN, &["report.cdf=\"wake\"", "record.tlb_samples=true"], "report.cdf", "unknown sampled metric"),
        (MIN, &["experiment.corunner=\"nosuch\""], "experiment.corunner", "unknown workload 'nosuch'"),
        (MIN, &["experiment.vary={\"vm.tlb\"=[]}"], "experiment.vary.\"vm.tlb\"", "at least one value"),
        (MIN, &["experiment.corunner_threads=0"], "experiment.corunner_threads", "1..=4096"),
        (MIN, &["workloads.lock.heap.trim_thresh=\"1MiB\""], "workloads.lock.heap.trim_thresh", "unknown field"),
        (MIN, &["workloads.lock.heap.top_pad=\"3 parsecs\""], "workloads.lock.heap.top_pad", "unknown size unit"),
        (MIN, &["workloads.lock.heap.mprotect_size=-4096"], "workloads.lock.heap.mprotect_size", "expected a size like"),
        (MIN, &["workloads.lock.heap.mprotect_sz=4096"], "workloads.lock.heap.mprotect_sz", "or mprotect_size"),
        (MIN, &["record.ple_window_interval=\"0s\""], "record.ple_window_interval", "positive duration"),
        (MIN, &["record.ple_window_interval=\"soon\""], "record.ple_window_interval", "unknown time unit"),
        (MIN, &["record.wait_chains=\"yes\""], "record.wait_chains", "expected a boolean"),
        (MIN, &["record.waitchains=true"], "record.waitchains", "unknown field"),
        (MIN, &["guest.asymmetric.latency=true"], "guest.asymmetric", "host policy"),
        (MIN, &["host.asymmetric.growth=-0.1"], "host.asymmetric.growth", "expected a number in 0..=10"),
        (MIN, &["host.asymmetric.full=0"], "host.asymmetric.full", "expected a number in 0.01..=1"),
        (MIN, &["host.asymmetric.max_drop=1.5"], "host.asymmetric.max_drop", "expected a number in 0..=1"),
        (MIN, &["host.asymmetric.min_share=0"], "host.asymmetric.min_share", "expected a number"),
        (MIN, &["host.asymmetric.latency_step=0.5"], "host.asymmetric.latency_step", "expected a number in 1..=100"),
        (MIN, &["host.asymmetric.imbalance=\"10%\""], "host.asymmetric.imbalance", "expected a number"),
        (MIN, &["host.asymmetric.urgency_ratio=0.5"], "host.asymmetric.urgency_ratio", "expected a number in 1..=1000"),
        (MIN, &["host.asymmetric.latency_min=0"], "host.asymmetric.latency_min", "positive duration"),
        (MIN, &["host.asymmetric.latency_max=\"0.1ms\""], "host.asymmetric.latency_max", "at least latency_min"),
        (MIN, &["host.asymmetric.resolve=true"], "host.asymmetric.resolve", "unknown field"),
        (MIN, &["machine.memory.remote_latency_ns=50"], "machine.memory.remote_latency_ns", "at least local_latency_ns"),
        (MIN, &["machine.memory.local_latency_ns=0"], "machine.memory.local_latency_ns", "positive number"),
        (MIN, &["machine.memory.node_bandwidth_gbs=-1"], "machine.memory.node_bandwidth_gbs", "positive number"),
        (MIN, &["machine.memory.core_bandwidth_gbs=0"], "machine.memory.core_bandwidth_gbs", "positive number"),
        (MIN, &["machine.memory.share_remote_latency_ns=10"], "machine.memory.share_remote_latency_ns", "at least share_local"),
        (MIN, &["machine.memory.sharing_weight=2"], "machine.memory.sharing_weight", "0..=1"),
        (MIN, &["machine.memory.ipc=0"], "machine.memory.ipc", "positive number"),
        (MIN, &["machine.memory.model=\"on\""], "machine.memory.model", "expected a boolean"),
        (MIN, &["machine.memory.latency=1"], "machine.memory.latency", "unknown field"),
        (MIN, &["machine.placement=\"scatter\""], "machine.placement", "packed"),
        (MIN, &["vm.numa=\"visible\""], "vm.numa", "exposed"),
        (MIN, &["vm.memory=\"node\""], "vm.memory", "interleave"),
        (MIN, &["vm.memory=\"bind\"", "vm.memory_node=4"], "vm.memory_node", "0..=3"),
        (MIN, &["host.numad.interval=0"], "host.numad.interval", "positive duration"),
        (MIN, &["host.numad.target_utilization=1.5"], "host.numad.target_utilization", "(0, 1]"),
        (MIN, &["host.numad.period=\"1s\""], "host.numad.period", "unknown field"),
        (MIN, &["guest.numad.enabled=true"], "guest.numad.enabled", "host daemon"),
    ];
    for (text, sets, field, msg) in cases {
        let e = parse(text, sets).expect_err(field);
        assert_eq!(e.field, *field, "{e}");
        assert!(e.message.contains(msg), "{field}: {e}");
    }
    let e = parse(&format!("{MIN}[vms.x]\napicv = false\n"), &[]).unwrap_err();
    assert_eq!((e.field.as_str(), e.source.as_str()), ("vms.x", "t.toml"), "{e}");
    let e = parse(&format!("{MIN}[vms.1]\nmemory = \"bind\"\nmemory_node = 9\n"), &[]).unwrap_err();
    assert_eq!(e.field, "vms.1.memory_node", "{e}");
    let e = parse(&format!("{MIN}[vms.1.halt_poll]\nmax = -1\n"), &[]).unwrap_err();
    assert!(e.field.starts_with("vms.1.halt_poll.max"), "{e}");
    let e = parse(&format!("{MIN}[[published]]\nmetric = \"\"\nvalue = 1\nsource = \"x\"\n"), &[]).unwrap_err();
    assert_eq!(e.field, "published[0].metric");
    let e = parse(&format!("{MIN}[workloads.lock]\nprogram = [ {{ malloc = \"4 parsecs\" }} ]\n"), &[]).unwrap_err();
    assert!(e.field.contains("malloc") && e.message.contains("size unit"), "{e}");
}

/// Overriding a built-in's field that read a parameter leaves that parameter unused: the
/// profile's, not a misspelling of the user's (ebizzy's documented mmap mode).
#[test]
fn overriding_a_field_that_read_a_parameter_is_no_error() {
    const EBIZZY: &str = "[experiment]\nworkloads = [\"ebizzy\"]\n";
    let s = parse(EBIZZY, &["workloads.ebizzy.heap.mmap_threshold=\"128KiB\"", "workloads.ebizzy.params.mm_sections=1"]).unwrap();
    let doc: toml::Table = toml::from_str(&s.materialized).unwrap();
    let w = &doc["workloads"]["ebizzy"];
    assert_eq!(w["heap"]["mmap_threshold"].as_str(), Some("128KiB"));
    assert!(w["params"].get("mmap_threshold").is_none(), "the unused parameter is dropped: {w}");
    assert!(w["params"].get("trim_threshold").is_some(), "the others stay");
    // A parameter the user sets is still checked.
    let e = parse(EBIZZY, &["workloads.ebizzy.heap.mmap_threshold=\"128KiB\"", "workloads.ebizzy.params.recrds=5"]).unwrap_err();
    assert_eq!(e.field, "workloads.ebizzy.params.recrds", "{e}");
    assert!(e.message.contains("did you mean 'records'?"), "{e}");
    // So is one the user sets to replace the one the override made unused.
    let e =
        parse(EBIZZY, &["workloads.ebizzy.heap.mmap_threshold=\"128KiB\"", "workloads.ebizzy.params.mmap_threshold=\"1MiB\""]).unwrap_err();
    assert_eq!(e.field, "workloads.ebizzy.params.mmap_threshold", "{e}");
}

/// Issue 21 item 4: a misspelt key anywhere is an error naming it and the closest valid name.
#[test]
fn misspelt_overrides_and_tables_are_errors_with_a_suggestion() {
    const DEDUP: &str = "[experiment]\nworkloads = [\"parsec.dedup\"]\n";
    let cases: &[(&str, &[&str], &str, &str)] = &[
        (MIN, &["workloads.lock.params.iteratons=10"], "workloads.lock.params.iteratons", "did you mean 'iterations'?"),
        (MIN, &["workloads.lcok.params.iters=10"], "workloads.lcok", "did you mean 'lock'?"),
        (DEDUP, &["workloads.parsec.dedupp.params.fragments=68"], "workloads.parsec.dedupp", "did you mean 'parsec.dedup'?"),
        (DEDUP, &["workloads.\"parsec.dedup\".params.fragmnts=68"], "workloads.parsec.dedup.params.fragmnts", "did you mean 'fragments'?"),
        (MIN, &["vm.ple.windw_cycles=10"], "vm.ple.windw_cycles", "did you mean 'window_cycles'?"),
        (MIN, &["vm.tlb=\"shootdown4u\""], "vm.tlb", "shoot4u"),
        (MIN, &["experiment.workloads=[\"lokc\"]"], "experiment.workloads[0]", "did you mean 'lock'?"),
        (&format!("{MIN}[workloads.lcok.params]\niterations = 10\n"), &[], "workloads.lcok", "did you mean 'lock'?"),
        (&format!("{MIN}[workloads.lock.params]\niteratons = 10\n"), &[], "workloads.lock.params.iteratons", "did you mean 'iterations'?"),
        // Another name of a listed built-in is not where its settings are read.
        (
            "[experiment]\nworkloads = [\"dedup\"]\n",
            &["workloads.parsec.dedup.params.fragments=68"],
            "workloads.parsec.dedup",
            "workloads.dedup",
        ),
        (DEDUP, &["workloads.dedup.params.fragments=68"], "workloads.dedup", "workloads.parsec.dedup"),
    ];
    for (text, sets, field, msg) in cases {
        let e = parse(text, sets).expect_err(field);
        assert_eq!(e.field, *field, "{e}");
        assert!(e.message.contains(msg), "{field}: {e}");
        if !sets.is_empty() {
            assert!(e.source.starts_with("--set"), "blames the flag: {e}");
        }
    }
    // The quoted form patches the workload itself (no stray tables).
    let s = parse(DEDUP, &["workloads.\"parsec.dedup\".params.fragments=68"]).unwrap();
    let doc: toml::Table = toml::from_str(&s.materialized).unwrap();
    let w = doc["workloads"].as_table().unwrap();
    assert_eq!(w.keys().collect::<Vec<_>>(), ["parsec.dedup"], "{}", s.materialized);
    assert_eq!(w["parsec.dedup"]["params"]["fragments"].as_integer(), Some(68));
    let unquoted = parse(DEDUP, &["workloads.parsec.dedup.params.fragments=68"]).unwrap();
    assert_eq!(unquoted.workloads[0], s.workloads[0]);
    // A full definition that nothing runs is still allowed, and so is a co-runner of a variant.
    parse(&format!("{MIN}[workloads.spare]\nprogram = [{{ compute = \"1ms\" }}]\n"), &[]).unwrap();
    let vary = "[experiment]\nworkloads = [\"lock\"]\nvary = { \"experiment.corunner\" = [\"none\", \"ep\"] }\n[workloads.ep.params]\n";
    parse(vary, &[]).unwrap();
}

/// Issue 21 item 18: type errors speak of tables, lists and numbers, not Rust types.
#[test]
fn type_errors_name_no_rust_types() {
    let cases: &[(&[&str], &str, &str)] = &[
        (&["vm.halt_poll=false"], "vm.halt_poll", "vm.halt_poll.enabled = false"),
        (&["vm.ple=3"], "vm.ple", "expected a table with fields aple, enabled, grow, max_cycles"),
        (&["vm.weight=\"x\""], "vm.weight", "expected an integer in 0..=4294967295"),
        (&["vm.vcpu_weights=3"], "vm.vcpu_weights", "expected a list"),
        (&["vm.tlb=3"], "vm.tlb", "expected a name (a string) such as \"ipi\""),
        (&["machine.freq_ghz=\"fast\""], "machine.freq_ghz", "expected a number"),
        (&["limits.max_events=-1"], "limits.max_events", "expected a non-negative integer"),
        (&["record=1"], "record", "expected a table with fields"),
        (&["vms.1.pv=1"], "vms.1.pv", "expected a table with fields eoi, sched_yield"),
    ];
    for (sets, field, msg) in cases {
        let e = parse(MIN, sets).expect_err(field);
        assert_eq!(e.field, *field, "{e}");
        assert!(e.message.contains(msg), "{field}: {e}");
        for rust in ["struct ", "enum ", "u32", "u64", "f64", "sequence", "Spec"] {
            assert!(!e.message.contains(rust), "{field}: '{rust}' in {e}");
        }
    }
}

/// Issue 21 item 17: sizes are bounded, with the field, the value and the maximum.
#[test]
fn sizes_have_documented_maxima() {
    let many_seeds = format!("{MIN}seeds = [{}]\n", (1..=10_001).map(|i| i.to_string()).collect::<Vec<_>>().join(","));
    let cases: Vec<(String, Vec<&str>, &str, &str)> = vec![
        (MIN.into(), vec!["experiment.threads=10000000"], "experiment.threads", "1..=4096 (threads per instance) (got 10000000)"),
        (MIN.into(), vec!["experiment.oc_vms=100000"], "experiment.oc_vms", "2..=64 co-running VMs (got 100000)"),
        (many_seeds, vec![], "experiment.seeds", "at most 10000 seeds (got 10001)"),
        (MIN.into(), vec!["machine.sockets=100"], "machine.sockets", "1..=64 (got 100)"),
        (MIN.into(), vec!["machine.cores_per_socket=2000"], "machine.cores_per_socket", "1..=1024 (got 2000)"),
        (MIN.into(), vec!["machine.sockets=64", "machine.cores_per_socket=128"], "machine.sockets", "8192 CPUs"),
        (MIN.into(), vec!["workloads.lock.threads=5000"], "workloads.lock.threads", "5000 threads per instance"),
    ];
    for (text, sets, field, msg) in &cases {
        let e = parse(text, sets).expect_err(field);
        assert_eq!(e.field, *field, "{e}");
        assert!(e.message.contains(msg), "{field}: {e}");
    }
    parse(MIN, &["experiment.threads=4096", "experiment.oc_vms=64"]).unwrap();
}

#[test]
fn a_platform_preset_is_the_base_and_the_spec_overrides_it() {
    let s = parse(MIN, &[]).unwrap();
    assert_eq!(s.platform, crate::platform::DEFAULT_PRESET);
    assert!(s.materialized.contains("preset = \"TPDS-4S\""), "{}", s.materialized);
    let text = format!("{MIN}vcpus = [4]\n[platform]\npreset = \"DIS-R720\"\n");
    let s = parse(&text, &[]).unwrap();
    assert_eq!(s.platform, "DIS-R720");
    assert_eq!((s.machine.sockets, s.machine.cores_per_socket), (2, 8));
    // A field of the spec (or --set) replaces the preset's.
    let s = parse(&format!("{text}[machine]\nsockets = 1\n"), &[]).unwrap();
    assert_eq!((s.machine.sockets, s.machine.cores_per_socket), (1, 8));
    let s = parse(&text, &["machine.cores_per_socket=4"]).unwrap();
    assert_eq!(s.machine.cores_per_socket, 4);
    // --set selects a preset too, and names are case-insensitive.
    let s = parse(MIN, &["platform.preset=\"dis-r720\"", "experiment.vcpus=[4]"]).unwrap();
    assert_eq!(s.platform, "DIS-R720");
}

#[test]
fn a_bad_platform_is_a_one_line_error() {
    let e = parse(&format!("{MIN}[platform]\npreset = \"DIS-R72\"\n"), &[]).unwrap_err();
    assert_eq!(e.field, "platform.preset");
    assert!(e.message.contains("unknown platform preset 'DIS-R72'") && e.message.contains("did you mean 'DIS-R720'"), "{e}");
    let e = parse(&format!("{MIN}[platform]\npreset = 3\n"), &[]).unwrap_err();
    assert_eq!(e.field, "platform.preset");
    let e = parse(&format!("{MIN}[platform]\nprest = \"DIS-R720\"\n"), &[]).unwrap_err();
    assert!(e.message.contains("unknown field 'prest'") && e.message.contains("did you mean 'preset'"), "{e}");
    let e = parse(&format!("platform = \"DIS-R720\"\n{MIN}"), &[]).unwrap_err();
    assert_eq!(e.field, "platform");
    assert!(!e.to_string().contains('\n'));
}

#[test]
fn published_rules_need_their_fields() {
    let entry = |body: &str| format!("{MIN}[[published]]\nmetric = \"delta_eta_t\"\n{body}\n");
    let ok = parse(&entry("rule = \"value\"\nvalue = 0.5\ntolerance = \"20%\""), &[]).unwrap();
    assert_eq!(ok.published[0].tolerance, Some(Tolerance::Relative(0.2)));
    let ok = parse(&entry("rule = \"value\"\nvalue = 0.5\ntolerance = 0.1"), &[]).unwrap();
    assert_eq!(ok.published[0].tolerance, Some(Tolerance::Absolute(0.1)));
    for (body, field, words) in [
        ("rule = \"value\"\nvalue = 0.5", "published[0].tolerance", "needs a tolerance"),
        ("rule = \"value\"\ntolerance = 0.1", "published[0].value", "needs the published value"),
        ("rule = \"value\"\nvalue = 0.5\ntolerance = \"abc\"", "published[0].tolerance", "expected a positive number"),
        ("rule = \"value\"\nvalue = 0.5\ntolerance = -0.1", "published[0].tolerance", "expected a positive number"),
        ("rule = \"value\"\nvalue = 0.5\ntolerance = \"0%\"", "published[0].tolerance", "expected a positive number"),
        ("rule = \"sign\"", "published[0].sign", "needs sign"),
        ("rule = \"order\"\norder = [{ vcpus = 4 }]", "published[0].order", "at least two"),
        ("rule = \"peak\"\nover = \"vcpus\"", "published[0].at", "the value of `over`"),
        ("rule = \"trend\"", "published[0].over", "the field varied"),
        ("value = 1\ntolerance = 0.1", "published[0].tolerance", "only applies to rule = \"value\""),
        ("rule = \"sign\"\nsign = \"up\"", "published[0].sign", "unknown value 'up'"),
        ("rule = \"valeu\"", "published[0].rule", "did you mean 'value'"),
        ("compare = \"change\"", "published[0].compare", "needs relative_to"),
    ] {
        let e = parse(&entry(body), &[]).unwrap_err();
        assert_eq!(e.field, field, "{body}: {e}");
        assert!(e.message.contains(words), "{body}: {e}");
        assert!(!e.to_string().contains('\n'), "{e}");
    }
    // Without a rule a value is only shown: no tolerance is needed (the examples' use).
    assert!(parse(&entry("value = 1"), &[]).is_ok());
}

#[test]
fn a_reproduce_table_is_checked() {
    let ok = format!("{MIN}[reproduce]\nid = \"TPDS-F4\"\ntitle = \"t\"\nstatus = \"visible\"\nquick = {{ \"experiment.seeds\" = [1] }}\n");
    let s = parse(&ok, &[]).unwrap();
    assert_eq!(s.reproduce.as_ref().map(|r| r.id.as_str()), Some("TPDS-F4"));
    let e = parse(&ok.replace("visible", "secret"), &[]).unwrap_err();
    assert_eq!(e.field, "reproduce.status");
    let e = parse(&ok.replace("TPDS-F4", " "), &[]).unwrap_err();
    assert_eq!(e.field, "reproduce.id");
    let e = parse(&format!("{ok}not_expressible = \"MISSING MECHANISM: x\"\n"), &[]).unwrap_err();
    assert_eq!(e.field, "reproduce.not_expressible");
    assert!(e.message.contains("cannot be run by the model yet (MISSING MECHANISM: x)"), "{e}");
}

#[test]
fn every_way_in_has_the_same_nesting_bound() {
    use super::depth::{too_deep, MAX_DEPTH};
    let keys = |n: usize| vec!["a"; n].join(".");
    // The file: at the bound the fields are judged (no `vm.a`), one level more is the bound.
    let at = parse(&format!("{MIN}[vm]\n{} = 1\n", keys(MAX_DEPTH - 1)), &[]).unwrap_err();
    assert!(at.message.contains("unknown field"), "{at}");
    let past = parse(&format!("{MIN}[vm]\n{} = 1\n", keys(MAX_DEPTH)), &[]).unwrap_err();
    assert_eq!((past.source.as_str(), past.message.as_str()), ("t.toml", too_deep().as_str()), "{past}");
    // An override, its path and value together.
    let at = parse(MIN, &[&format!("vm.{}=[1]", keys(MAX_DEPTH - 2))]).unwrap_err();
    assert!(at.message.contains("unknown field"), "{at}");
    let past = parse(MIN, &[&format!("vm.{}=[[1]]", keys(MAX_DEPTH - 2))]).unwrap_err();
    assert_eq!(past.message, too_deep(), "{past}");
    // A key of experiment.vary or of a variant's set (each becomes an override), named short.
    let deep = keys(20_000);
    let vary = format!("[experiment]\nworkloads = [\"lock\"]\nvary = {{ \"{deep}\" = [1] }}\n");
    let e = parse(&vary, &[]).unwrap_err();
    assert_eq!(e.message, too_deep(), "{e}");
    assert!(e.field.starts_with("experiment.vary.\"a.a.a") && e.field.len() < 120, "{e}");
    let variant = format!("[experiment]\nworkloads = [\"lock\"]\nvariants = [{{ name = \"v\", set = {{ \"{deep}\" = 1 }} }}]\n");
    let e = parse(&variant, &[]).unwrap_err();
    assert!(e.message == too_deep() && e.field.starts_with("experiment.variants[0].set.\"a.a"), "{e}");
}

/// Traced programs by name (`traced.<suite>.<program>`), under a traces directory of tiny
/// traces ([`crate::workload::traced::tests::traces_dir`]): `parsec.dedup` at 1 (plain) and 2
/// (xz) threads, `splash2x.fft` at 4, `raytrace` in both suites.
mod traced {
    use super::*;
    use crate::api::Plan;
    use std::path::PathBuf;

    /// The traces directory, one for every test process (its files are the same each time,
    /// written atomically, and left for the next run), named by `VCPULAB_TRACES`: every test
    /// sets the same value, so tests sharing a process do not race.
    fn root() -> &'static PathBuf {
        static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
        ROOT.get_or_init(|| {
            let root = std::env::temp_dir().join("vcpulab-traced-spec-tests");
            crate::workload::traced::tests::fill(&root);
            std::env::set_var(crate::workload::traced::ENV, &root);
            root
        })
    }

    fn spec(body: &str) -> String {
        root();
        format!("[experiment]\n{body}\nseeds = [1]\n[limits]\nmax_virtual_time = \"10s\"\n")
    }

    #[test]
    fn a_traced_program_replays_its_trace_at_the_run_s_thread_count() {
        let plan =
            Plan::new(&spec("workloads = [\"traced.parsec.dedup\"]\nvcpus = [1, 2]\nscenarios = [\"native\", \"OC\"]"), "t.toml", &[])
                .expect("valid");
        let threads: Vec<(String, u32, u32)> = plan.cells().iter().map(|c| (c.workload.clone(), c.vcpus, c.threads)).collect();
        assert_eq!(threads[0], ("traced.parsec.dedup".to_string(), 1, 1));
        assert!(threads.iter().all(|(_, v, t)| v == t), "{threads:?}");
        let hash =
            |i: usize| plan.run_config(&plan.cells()[i], crate::scenario::Layout::Native { instances: 1 }).workload.meta.hash.clone();
        let (one, two) = (hash(0), hash(plan.cells().iter().position(|c| c.vcpus == 2).expect("a cell at 2")));
        assert_ne!(one, two, "t1.vtrace and t2.vtrace.xz are different files");
        // `experiment.threads` chooses the trace as it does a built-in's thread count.
        let at1 =
            Plan::new(&spec("workloads = [\"traced.parsec.dedup\"]\nvcpus = [2]\nthreads = 1\nscenarios = [\"native\"]"), "t.toml", &[])
                .expect("valid");
        assert_eq!(at1.cells()[0].threads, 1);
        assert_eq!(at1.run_config(&at1.cells()[0], crate::scenario::Layout::Native { instances: 1 }).workload.meta.hash, one);
    }

    #[test]
    fn it_runs_as_the_same_trace_named_by_file_does() {
        let file = root().join("parsec/dedup/t2.vtrace.xz");
        let by_name = spec("workloads = [\"traced.dedup\"]\nvcpus = [2]\nscenarios = [\"UC\"]");
        let by_file = format!(
            "{}[workloads.mine]\ntrace = \"{}\"\n",
            spec("workloads = [\"mine\"]\nvcpus = [2]\nscenarios = [\"UC\"]"),
            file.display()
        );
        let run = |text: &str| {
            let mut plan = Plan::new(text, "t.toml", &[]).expect("valid");
            plan.run_cell(0).expect("runs")
        };
        let (a, b) = (run(&by_name), run(&by_file));
        assert_eq!(a.workload, "traced.dedup");
        assert_eq!(
            (a.threads, a.t_native_s, a.t_virt_s, a.events, a.guest_ns),
            (b.threads, b.t_native_s, b.t_virt_s, b.events, b.guest_ns)
        );
        assert_eq!(a.instances.iter().map(|i| i.finish_s).collect::<Vec<_>>(), b.instances.iter().map(|i| i.finish_s).collect::<Vec<_>>());
        // Same files, same results.
        let again = run(&by_name);
        assert_eq!((again.t_virt_s, again.events, &again.workload_hash), (a.t_virt_s, a.events, &a.workload_hash));
    }

    #[test]
    fn a_traced_co_runner_and_a_varied_one() {
        let text = spec("workloads = [\"lock\"]\nvcpus = [2]\nscenarios = [\"OC\"]\ncorunner = \"traced.fft\"\ncorunner_threads = 4");
        let plan = Plan::new(&text, "t.toml", &[]).expect("valid");
        let c = plan.run_config(&plan.cells()[0], crate::scenario::Layout::Vms { vms: 2 }).corunner.expect("a co-runner");
        assert_eq!((c.workload.name.as_str(), c.threads, c.threads_set), ("traced.fft", 4, true));
        // Without corunner_threads, the run's vCPU count: fft has no trace at 2 threads.
        let e = Plan::new(&text.replace("corunner_threads = 4", ""), "t.toml", &[]).expect_err("no trace at 2");
        assert_eq!((e.source.as_str(), e.field.as_str()), ("t.toml", "experiment.corunner"));
        assert_eq!(
            e.message,
            "workload 'traced.fft' has no trace at 2 threads (traced at 4; `vcpulab workloads show traced.splash2x.fft`)"
        );
        // A variant's co-runner.
        let varied = spec("workloads = [\"lock\"]\nvcpus = [2]\nscenarios = [\"OC\"]\ncorunner_threads = 4\nvary = { \"experiment.corunner\" = [\"none\", \"traced.splash2x.fft\"] }");
        let plan = Plan::new(&varied, "t.toml", &[]).expect("valid");
        let cfgs: Vec<_> = plan
            .cells()
            .iter()
            .map(|c| plan.run_config(c, crate::scenario::Layout::Vms { vms: 2 }).corunner.map(|c| c.workload.name.clone()))
            .collect();
        assert_eq!(cfgs, [None, Some("traced.splash2x.fft".to_string())]);
    }

    #[test]
    fn names_that_do_not_resolve_are_one_line_errors_naming_the_field() {
        let e = parse(&spec("workloads = [\"lock\", \"traced.raytrace\"]"), &[]).expect_err("ambiguous");
        assert_eq!((e.source.as_str(), e.field.as_str()), ("t.toml", "experiment.workloads[1]"));
        assert_eq!(
            e.message,
            "workload 'traced.raytrace' is ambiguous: it can mean traced.parsec.raytrace or traced.splash2x.raytrace (write the full name)"
        );
        let e = parse(&spec("workloads = [\"traced.parsec.dedupp\"]"), &[]).expect_err("unknown");
        assert!(e.message.starts_with("unknown traced program 'traced.parsec.dedupp' (did you mean 'traced.parsec.dedup'?)"), "{e}");
        let e = parse(&spec("workloads = [\"traced.dedup\"]\nvcpus = [32]"), &[]).expect_err("no trace at 32");
        assert_eq!(e.field, "experiment.workloads[0]");
        assert_eq!(
            e.message,
            "workload 'traced.dedup' has no trace at 32 threads (traced at 1, 2; `vcpulab workloads show traced.parsec.dedup`)"
        );
        assert!(!e.to_string().contains('\n'));
        // A value of --set is blamed on the flag.
        let e = parse(&spec("workloads = [\"lock\"]"), &["experiment.workloads=[\"traced.nope\"]"]).expect_err("unknown");
        assert_eq!(e.source, "--set experiment.workloads=[\"traced.nope\"]");
        // Settings for a traced program are not read: refused.
        let e = parse(&format!("{}[workloads.\"traced.dedup\"]\npid = 3\n", spec("workloads = [\"traced.dedup\"]\nvcpus = [2]")), &[])
            .expect_err("no settings");
        assert_eq!(e.field, "workloads.traced.dedup");
        assert!(e.message.contains("is a traced program: it takes no settings"), "{e}");
        // A workload of the spec's own under such a name is the spec's.
        let own = format!(
            "{}[workloads.\"traced.mine\"]\nprogram = [{{ compute = \"1us\" }}]\n",
            spec("workloads = [\"traced.mine\"]\nvcpus = [2]")
        );
        assert!(!parse(&own, &[]).expect("its own").is_traced("traced.mine"));
    }

    #[test]
    fn each_trace_is_read_once_per_plan() {
        let text =
            spec("workloads = [\"traced.dedup\"]\nvcpus = [1, 2]\nscenarios = [\"native\"]\nvary = { \"vm.tlb\" = [\"ipi\", \"pv\"] }");
        let mut cache = crate::workload::traced::TraceCache::default();
        let a = Spec::parse_with(&text, "t.toml", &[], &mut cache).expect("valid");
        let b = Spec::parse_with(&text, "t.toml", &["vm.tlb=\"pv\"".into()], &mut cache).expect("valid");
        assert_eq!(cache.len(), 2);
        assert!(std::sync::Arc::ptr_eq(&a.traced["traced.dedup"][&2], &b.traced["traced.dedup"][&2]));
        assert!(std::sync::Arc::ptr_eq(&a.workloads[0], &a.traced["traced.dedup"][&1]));
        let plan = Plan::new(&text, "t.toml", &[]).expect("valid");
        assert_eq!(plan.cells().len(), 4);
    }
}
