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
fn overrides_reach_builtin_workloads_and_blame_the_flag() {
    let s = parse(MIN, &["workloads.lock.params.iterations=7", "experiment.vcpus=[2,4]"]).unwrap();
    assert_eq!(s.experiment.vcpus.0, vec![2, 4]);
    assert_eq!(s.workloads[0].program.instrs[0], crate::workload::Instr::LoopStart { count: 7, end: 5 });
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
