//! VM settings (`[vm]`, and per-VM overrides `[vms.N]`): APIC virtualization, pinning,
//! weights, halt polling, pause-loop exiting and directed yield, paravirtual features, the
//! TLB-flush policy and the guest timer path.
//!
//! Defaults describe the TPDS testbed: Linux 4.15 host and guest, APICv on, IPIv absent,
//! PLE on with KVM's adaptive window, host halt polling on, no PV TLB flush (it arrived in
//! 4.16), PV EOI on (QEMU's default), the other PV features off (QEMU named CPU models do
//! not enable them; Linux arch/x86/kernel/kvm.c, QEMU `kvm_default_props`).

use serde::{Deserialize, Serialize};

use super::types::Dur;
use crate::policy::kvm_yield::Generation;

/// Host halt polling (`kvm.halt_poll_ns` and friends; Linux virt/kvm/kvm_main.c `kvm_vcpu_halt`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HaltPollSpec {
    /// Halt polling on. `false` = `halt_poll_ns = 0` (or `KVM_CAP_HALT_POLL` with 0 for
    /// one VM via `[vms.N]`).
    pub enabled: bool,
    /// Maximum per-vCPU window (`halt_poll_ns`): 200 µs, the x86 default.
    pub max: Dur,
    /// Grow factor (`halt_poll_ns_grow`, 2; 0 = never grow).
    pub grow: u32,
    /// First non-zero window (`halt_poll_ns_grow_start`, 10 µs).
    pub grow_start: Dur,
    /// Shrink divisor (`halt_poll_ns_shrink`): 0 = reset to 0, KVM's default before v6.11
    /// and the TPDS kernel's behaviour; 2 since v6.11.
    pub shrink: u32,
}

impl Default for HaltPollSpec {
    fn default() -> Self {
        HaltPollSpec { enabled: true, max: Dur(200_000), grow: 2, grow_start: Dur(10_000), shrink: 0 }
    }
}

/// Pause-loop exiting and directed yield (`kvm_intel.ple_*`; Linux arch/x86/kvm/vmx/vmx.c, Intel SDM Vol. 3C).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PleSpec {
    /// PLE on (`ple_gap` > 0) or off (`ple_gap = 0` / `KVM_X86_DISABLE_EXITS_PAUSE`).
    pub enabled: bool,
    /// Base window in TSC cycles (`ple_window`, 4096).
    pub window_cycles: u64,
    /// Grow modifier (`ple_window_grow`, 2): < 1 resets to the base, < base multiplies,
    /// otherwise adds.
    pub grow: u64,
    /// Shrink modifier (`ple_window_shrink`, 0 = reset to the base on sched-in).
    pub shrink: u64,
    /// Window cap (`ple_window_max`, UINT_MAX).
    pub max_cycles: u64,
    /// Window policy: `kvm` (grow on every PLE exit, shrink when scheduled in) or `fixed`
    /// (always `window_cycles`). `vcpulab policies` lists them.
    pub window_policy: String,
    /// Candidate-selection policy on a PLE exit: `kvm` (`kvm_vcpu_on_spin` directed yield),
    /// `none` (exit and re-enter), `hvs` or an HVS ablation.
    pub yield_policy: String,
    /// Which vCPUs `kvm_vcpu_on_spin` (`yield_policy = "kvm"`) takes as candidates, by the
    /// kernel generation that introduced the rule: `v3.10` (any preempted vCPU), `v4.14`
    /// (preempted in guest kernel mode), `v5.3` (also vCPUs being woken), `v5.13` (also
    /// preempted user-mode vCPUs with an interrupt pending; the default).
    pub yield_candidates: Generation,
    /// APLE's parameters (`window_policy = "aple"`).
    pub aple: ApleSpec,
}

/// APLE's parameters (DIS ch.3), in TSC cycles and PLE exits.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ApleSpec {
    /// PLE exits of the VM per epoch (1,000 in DIS).
    pub epoch_exits: u64,
    /// The first threshold T_0 (8,192).
    pub initial: u64,
    /// The lowest threshold T_l (4,096).
    pub min: u64,
    /// The highest threshold T_u (32,768).
    pub max: u64,
    /// The probe step δ (1,024; DIS: 512–2,048 works).
    pub delta: u64,
}

impl Default for ApleSpec {
    fn default() -> Self {
        ApleSpec { epoch_exits: 1000, initial: 8192, min: 4096, max: 32768, delta: 1024 }
    }
}

impl Default for PleSpec {
    fn default() -> Self {
        PleSpec {
            enabled: true,
            window_cycles: 4096,
            grow: 2,
            shrink: 0,
            max_cycles: u64::from(u32::MAX),
            window_policy: "kvm".into(),
            yield_policy: "kvm".into(),
            yield_candidates: Generation::default(),
            aple: ApleSpec::default(),
        }
    }
}

/// Paravirtual features the guest uses (Linux arch/x86/kernel/kvm.c).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PvSpec {
    /// PV spinlocks (`KVM_FEATURE_PV_UNHALT`): a kernel-lock waiter spins
    /// `spin_threshold` PAUSEs, then halts; the releaser kicks it with a hypercall.
    pub spinlocks: bool,
    /// PAUSE iterations before a PV spinlock waiter halts (`SPIN_THRESHOLD` = 1 << 15).
    pub spin_threshold: u64,
    /// PV sched yield (`KVM_FEATURE_PV_SCHED_YIELD`): after multi-target call-function IPIs,
    /// yield to the first preempted target with a hypercall.
    pub sched_yield: bool,
    /// PV send-IPI (`KVM_FEATURE_PV_SEND_IPI`): one hypercall per multi-target IPI instead of
    /// one ICR write per target.
    pub send_ipi: bool,
    /// PV EOI (`KVM_FEATURE_PV_EOI`): no EOI exit when APICv is off. QEMU enables it by default.
    pub eoi: bool,
}

impl Default for PvSpec {
    fn default() -> Self {
        PvSpec { spinlocks: false, spin_threshold: 1 << 15, sched_yield: false, send_ipi: false, eoi: true }
    }
}

/// How the guest flushes remote TLBs (TPDS §2, §7; S4U).
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum TlbPolicy {
    /// Native shootdown: call-function IPIs to every target and busy-wait for all acks.
    Ipi,
    /// PV TLB flush (Linux ≥ 4.16, "kvmtlb" in S4U): preempted targets get a flush-on-entry
    /// flag instead of an IPI.
    Pv,
    /// Shoot4U: one hypercall; the hypervisor invalidates every target's TLB itself.
    Shoot4u,
}

impl TlbPolicy {
    /// Name used in specs.
    pub fn name(self) -> &'static str {
        match self {
            TlbPolicy::Ipi => "ipi",
            TlbPolicy::Pv => "pv",
            TlbPolicy::Shoot4u => "shoot4u",
        }
    }
}

/// The `[vm]` table (applies to every VM of a run; `[vms.N]` overrides fields for VM N).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct VmSpec {
    /// APICv (posted interrupts, virtualized EOI). Default on (`enable_apicv`=Y, Linux arch/x86/kvm/vmx/vmx.c).
    pub apicv: bool,
    /// IPI virtualization: no exit on the sender's ICR write (Sapphire Rapids+). Default off
    /// (the TPDS testbed predates it).
    pub ipiv: bool,
    /// Pin vCPU i of every VM to core i (TPDS's layout, no vCPU stacking). `false` lets the
    /// host scheduler place and balance vCPU threads.
    pub pin: bool,
    /// CPU weight of each VM (cgroup `cpu.shares`, 1024 = default); multiplies each vCPU's
    /// weight in the flat host scheduler.
    pub weight: u32,
    /// A co-running VM's own vCPU count (`[vms.N]`, N ≥ 1), at most the run's cores: its vCPU i
    /// on core i. Unset: the experiment's `vcpus`, as every VM.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vcpus: Option<u32>,
    /// The VM group's cgroup v2 `cpu.weight` (1..=10000, 100 = default), instead of `weight`
    /// (v1 `cpu.shares`): the shares are `round(cpu_weight × 1024 / 100)`, as Linux converts it
    /// (kernel/sched/core.c `cpu_weight_write_u64`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_weight: Option<u32>,
    /// Per-vCPU weights (default 1024 each).
    pub vcpu_weights: Option<Vec<u32>>,
    /// libvirt `<cputune><quota>`: each vCPU thread's CFS bandwidth quota per `period`, the
    /// `cpu.max` of its `vcpuN` cgroup (Linux kernel/sched/fair.c `CONFIG_CFS_BANDWIDTH`).
    /// Unset: unlimited.
    pub quota: Option<Dur>,
    /// Per-vCPU quotas by vCPU index (each `vcpuN` cgroup's `cpu.max` written directly),
    /// overriding `quota`; missing entries take `quota`.
    pub vcpu_quotas: Option<Vec<Dur>>,
    /// libvirt `<period>`: the enforcement period of `quota` (default 100 ms, the kernel's).
    pub period: Dur,
    /// libvirt `<global_quota>`: the quota of the VM's whole group per `global_period`
    /// (needs `host.cgroups = "libvirt"`). Unset: unlimited.
    pub global_quota: Option<Dur>,
    /// libvirt `<global_period>` (default 100 ms).
    pub global_period: Dur,
    /// QEMU's emulator threads of the VM (main loop, I/O threads): `count` threads that wake
    /// now and then and run briefly, in the VM's task group (libvirt's `emulator` child) with
    /// `host.cgroups = "libvirt"`, root entities otherwise. Default none: no source gives their
    /// activity for the published workloads.
    pub emulator: crate::spec::kernel::DaemonSpec,
    /// Host halt polling.
    pub halt_poll: HaltPollSpec,
    /// Pause-loop exiting and directed yield.
    pub ple: PleSpec,
    /// Paravirtual features.
    pub pv: PvSpec,
    /// Remote TLB flush policy: `ipi`, `pv` or `shoot4u`.
    pub tlb: TlbPolicy,
    /// Back the guest's TSC-deadline timer with the VMX preemption timer while the vCPU runs
    /// (`kvm_intel.preemption_timer`, default Y): expiry is a PREEMPTION_TIMER exit. `false`:
    /// a host hrtimer fires on the core (EXTERNAL_INTERRUPT exit).
    pub preemption_timer: bool,
    /// The NUMA topology the guest sees (TPDS §6.1, §7.2): `hidden` (default; one flat node, as
    /// QEMU presents a VM without `-numa` options, so the guest places threads and pages
    /// without node knowledge) or `exposed` (one virtual node per host node the VM's vCPUs
    /// are laid out on, each bound to that host node; the guest kernel is NUMA-aware).
    pub numa: NumaView,
    /// Where the host puts the memory of a guest whose NUMA is hidden: `interleave`
    /// (default; a thread's private data lands on the node of the vCPU that first touches
    /// it, the host's first touch, and data shared between threads is spread over the nodes
    /// of the VM's vCPUs in proportion to them; `crate::world::memory` has the split),
    /// `first_touch` (all of a thread's data, shared too, follows the vCPU it first ran on)
    /// or `bind` (all on `memory_node`).
    pub memory: MemoryPlacement,
    /// The host node of `memory = "bind"`.
    pub memory_node: u32,
    /// KVM switches the FPU lazily, as before Linux 4.15: every `vcpu_put` saves the guest's
    /// FPU state and restores the host thread's (`kvm_put_guest_fpu`, cost
    /// `machine.costs.fpu_switch`) and deactivates the guest FPU, so the guest's first FPU
    /// use after the next entry exits with #NM (`EXCEPTION_NMI`, `exit_exception_nm`) (Linux
    /// v3.16/v3.19 arch/x86/kvm/x86.c `kvm_arch_vcpu_put`, vmx.c `vmx_fpu_deactivate`,
    /// `handle_exception`). From v4.15 ("x86,kvm: move qemu/guest FPU switching out to
    /// vcpu_run") the guest FPU stays loaded for the whole KVM_RUN: `false`, the default.
    pub lazy_fpu: bool,
    /// Which vCPUs the guest believes share a last-level cache, from the CPU topology the VM
    /// presents: `per_vcpu` (default: libvirt without a `<topology>` element starts QEMU with
    /// `-smp N,sockets=N,cores=1,threads=1`, so each vCPU is a socket of its own and the guest's
    /// `cpus_share_cache` is false between any two vCPUs) or `shared` (one socket with N cores:
    /// all vCPUs share one LLC). It decides where the guest scheduler looks for an idle CPU
    /// when it wakes a thread (`select_idle_sibling` scans the waker's target's LLC only) and
    /// whether a remote wake-up always sends an IPI (`ttwu_queue_remote`).
    pub llc: GuestLlc,
}

/// The guest's view of shared last-level caches.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum GuestLlc {
    /// Each vCPU its own socket and LLC.
    #[default]
    PerVcpu,
    /// All vCPUs in one LLC.
    Shared,
}

/// The NUMA topology a guest sees.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum NumaView {
    /// One flat node.
    #[default]
    Hidden,
    /// Virtual nodes bound to the host nodes of the vCPUs.
    Exposed,
}

/// Host placement of a NUMA-hidden guest's memory.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum MemoryPlacement {
    /// Private data where the vCPU that first touches it runs, shared data spread over the
    /// vCPUs' nodes.
    #[default]
    Interleave,
    /// Where the vCPU that first touches it runs.
    FirstTouch,
    /// On one node.
    Bind,
}

impl Default for VmSpec {
    fn default() -> Self {
        VmSpec {
            apicv: true,
            lazy_fpu: false,
            llc: GuestLlc::PerVcpu,
            ipiv: false,
            pin: true,
            weight: 1024,
            vcpus: None,
            cpu_weight: None,
            vcpu_weights: None,
            quota: None,
            vcpu_quotas: None,
            period: Dur(100_000_000),
            global_quota: None,
            global_period: Dur(100_000_000),
            emulator: Default::default(),
            halt_poll: HaltPollSpec::default(),
            ple: PleSpec::default(),
            pv: PvSpec::default(),
            tlb: TlbPolicy::Ipi,
            preemption_timer: true,
            numa: NumaView::Hidden,
            memory: MemoryPlacement::Interleave,
            memory_node: 0,
        }
    }
}

impl VmSpec {
    /// Checks values; returns (field, message).
    pub fn check(&self) -> Result<(), (String, String)> {
        if self.weight == 0 || self.weight > 262_144 {
            return Err(("weight".into(), format!("expected 1..=262144 (got {})", self.weight)));
        }
        if let Some(w) = self.cpu_weight {
            if !(1..=10_000).contains(&w) {
                return Err(("cpu_weight".into(), format!("expected 1..=10000, cgroup v2's cpu.weight range (got {w})")));
            }
            if self.weight != 1024 {
                return Err((
                    "cpu_weight".into(),
                    format!("expected either weight (cgroup v1 cpu.shares, here {}) or cpu_weight (v2), not both", self.weight),
                ));
            }
        }
        if let Some(w) = &self.vcpu_weights {
            if let Some(i) = w.iter().position(|&x| x == 0 || x > 262_144) {
                return Err((format!("vcpu_weights[{i}]"), format!("expected 1..=262144 (got {})", w[i])));
            }
        }
        self.check_bandwidth()?;
        if self.emulator.count > 0 && (self.emulator.run.0 == 0 || self.emulator.interval.0 == 0) {
            return Err(("emulator".into(), "expected positive run and interval durations".into()));
        }
        let p = &self.ple;
        if p.enabled && p.window_cycles == 0 {
            return Err(("ple.window_cycles".into(), "expected a positive cycle count (or ple.enabled = false)".into()));
        }
        if p.max_cycles < p.window_cycles {
            return Err((
                "ple.max_cycles".into(),
                format!("expected at least ple.window_cycles ({}) (got {})", p.window_cycles, p.max_cycles),
            ));
        }
        let known = |kind: &str, name: &str| crate::policy::REGISTRY.iter().any(|e| e.kind == kind && e.name == name);
        for (field, kind, name) in
            [("ple.window_policy", "ple_window", &p.window_policy), ("ple.yield_policy", "ple_yield", &p.yield_policy)]
        {
            if !known(kind, name) {
                let names: Vec<&str> = crate::policy::REGISTRY.iter().filter(|e| e.kind == kind).map(|e| e.name).collect();
                return Err((field.into(), format!("unknown policy '{name}' (expected one of: {})", names.join(", "))));
            }
        }
        let a = &p.aple;
        if a.epoch_exits == 0 {
            return Err(("ple.aple.epoch_exits".into(), "expected a positive number of PLE exits per epoch".into()));
        }
        if a.min == 0 || a.min > a.max {
            return Err(("ple.aple.min".into(), format!("expected 1..=ple.aple.max ({}) cycles (got {})", a.max, a.min)));
        }
        if a.initial < a.min || a.initial > a.max {
            return Err((
                "ple.aple.initial".into(),
                format!("expected a threshold within [ple.aple.min, ple.aple.max] = [{}, {}] cycles (got {})", a.min, a.max, a.initial),
            ));
        }
        if a.delta == 0 {
            return Err(("ple.aple.delta".into(), "expected a positive step in cycles".into()));
        }
        if self.pv.spinlocks && self.pv.spin_threshold == 0 {
            return Err(("pv.spin_threshold".into(), "expected a positive number of PAUSE iterations".into()));
        }
        Ok(())
    }

    /// The kernel's limits on `cpu.max` (`tg_set_cfs_bandwidth`: quota and period at least
    /// `min_cfs_quota_period`, 1 ms; period at most `max_cfs_quota_period`, 1 s).
    fn check_bandwidth(&self) -> Result<(), (String, String)> {
        use crate::kernel::bandwidth::{MAX_PERIOD_NS, MIN_QUOTA_PERIOD_NS};
        for (field, p) in [("period", self.period), ("global_period", self.global_period)] {
            if !(MIN_QUOTA_PERIOD_NS..=MAX_PERIOD_NS).contains(&p.0) {
                return Err((field.into(), format!("expected a period of 1ms..=1s, the kernel's cpu.max bounds (got {} ns)", p.0)));
            }
        }
        let quotas = self.vcpu_quotas.iter().flatten().enumerate().map(|(i, q)| (format!("vcpu_quotas[{i}]"), *q));
        for (field, q) in [("quota".to_string(), self.quota), ("global_quota".to_string(), self.global_quota)]
            .into_iter()
            .filter_map(|(f, q)| q.map(|q| (f, q)))
            .chain(quotas)
        {
            if q.0 < MIN_QUOTA_PERIOD_NS {
                return Err((field, format!("expected a quota of at least 1ms, the kernel's cpu.max minimum (got {} ns)", q.0)));
            }
        }
        Ok(())
    }

    /// Checks the fields that depend on the host's cgroup layout; returns (field, message).
    pub fn check_host(&self, host: &crate::spec::kernel::KernelSpec) -> Result<(), (String, String)> {
        if self.global_quota.is_some() && host.cgroups == crate::spec::kernel::Cgroups::None {
            return Err(("global_quota".into(), "expected host.cgroups = \"libvirt\": a VM-wide quota needs the VM's group".into()));
        }
        Ok(())
    }

    /// The `cpu.max` quota of vCPU `i`'s `vcpuN` group, if it has one.
    pub fn vcpu_quota(&self, i: u32) -> Option<u64> {
        self.vcpu_quotas.as_ref().and_then(|v| v.get(i as usize)).copied().or(self.quota).map(|q| q.0)
    }

    /// Checks the fields that depend on the machine; returns (field, message).
    pub fn check_machine(&self, m: &crate::machine::MachineSpec) -> Result<(), (String, String)> {
        if self.memory == MemoryPlacement::Bind && self.memory_node >= m.nodes() {
            return Err((
                "memory_node".into(),
                format!("expected a NUMA node of the machine, 0..={} (got {})", m.nodes().saturating_sub(1), self.memory_node),
            ));
        }
        Ok(())
    }

    /// The VM group's `cpu.shares`: `weight`, or `cpu_weight` converted
    /// (`DIV_ROUND_CLOSEST(cpu_weight × 1024, 100)`).
    pub fn shares(&self) -> u64 {
        match self.cpu_weight {
            Some(w) => (u64::from(w) * 1024 + 50) / 100,
            None => u64::from(self.weight),
        }
    }

    /// Host scheduler weight of vCPU `i`'s thread. In the VM's task group (`grouped`) it is the
    /// vCPU's own weight, its `vcpuN` child's `cpu.shares`, the VM's `weight` being the group's;
    /// without groups the VM's weight multiplies it.
    pub fn vcpu_weight(&self, i: u32, grouped: bool) -> u64 {
        let w = self.vcpu_weights.as_ref().and_then(|v| v.get(i as usize)).copied().unwrap_or(1024);
        if grouped {
            u64::from(w)
        } else {
            (u64::from(w) * self.shares() / 1024).max(2)
        }
    }
}
