//! Building a world from a run configuration.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use crate::account::{Attr, Cause, Layer, Ledger, OwnerKind};
use crate::engine::{stream_seed, EventQueue, SimTime, Stream};
use crate::kernel::bandwidth::BwOwner;
use crate::kernel::sync::{Instance, Obj};
use crate::kernel::thread::{Act, Thread, ThreadStats};
use crate::kernel::{Kernel, KernelId, KernelKind, Task, TaskKind, TaskState, HOST};
use crate::policy::numad::Numad;
use crate::policy::VmPolicies;
use crate::scenario::{Layout, RunConfig};
use crate::virt::allocation::{Periods, VcpuAlloc};
use crate::virt::vcpu::{Vcpu, Vm};
use crate::workload::dist::Dist;
use crate::workload::heap::ProcessHeap;
use crate::workload::program::{Instr, Program, Share, Times, Workload};

use super::{Core, Leaf, Limits, Rem, World};

/// Stream-path tags, so that streams of different entity kinds never collide.
const STREAM_THREAD: u64 = 1;
const STREAM_OBJECT: u64 = 2;
const STREAM_TASK: u64 = 3;
const STREAM_KERNEL: u64 = 4;
const STREAM_PLACE: u64 = 5;
const STREAM_GROUP: u64 = 6;

impl<'i> World<'i> {
    /// Builds the world of one run: the host kernel on `cfg.cores` cores, and either native
    /// instances in the host kernel or VMs (each with a guest kernel and one instance).
    pub fn new(cfg: &RunConfig) -> World<'i> {
        let n = cfg.cores;
        let mut w = World {
            now: SimTime::ZERO,
            q: EventQueue::new(),
            costs: cfg.machine.costs.clone(),
            cores: Vec::new(),
            // The host's CFS tunables scale with the machine's online CPUs, not the cores used.
            kernels: vec![Kernel::new(KernelKind::Host, n, cfg.host.params(cfg.machine.total_pcpus()))],
            tasks: Vec::new(),
            threads: Vec::new(),
            vcpus: Vec::new(),
            vms: Vec::new(),
            insts: Vec::new(),
            owners: vec![OwnerKind::Host],
            ledger: Ledger::new(1, 1),
            limits: Limits {
                max_time: SimTime(cfg.limits.max_virtual_time.0),
                max_events: cfg.limits.max_events,
                max_steps: cfg.limits.max_steps,
            },
            dirty: vec![false; n as usize],
            worklist: VecDeque::new(),
            live: 0,
            fault: None,
            steps: 0,
            interrupt: None,
            events: 0,
            remote_calls: Vec::new(),
            free_remote_calls: Vec::new(),
            record_tlb_samples: cfg.record.tlb_samples,
            record_ple_window: cfg.record.ple_window.then_some(cfg.record.ple_window_interval.0),
            freq_ghz: cfg.machine.freq_ghz,
            record_wait_chains: cfg.record.wait_chains,
            waits: Default::default(),
            timeline: None,
            periods: None,
            mem: super::memory::MemState::new(&cfg.machine, n).map(Box::new),
            numad: None,
        };
        if let Ok(topo) = cfg.machine.select(n) {
            w.kernels[HOST as usize].llc = topo.pcpus.iter().map(|p| p.socket).collect();
        }
        w.kernels[HOST as usize].llc_size = cfg.machine.cores_per_socket * cfg.machine.threads_per_core;
        match cfg.layout {
            Layout::Native { instances } => {
                let grouped = cfg.host.native_groups && cfg.host.cgroups == crate::spec::kernel::Cgroups::Libvirt;
                for i in 0..instances {
                    let owner = w.owners.len() as u32;
                    w.owners.push(OwnerKind::Native { instance: i });
                    let first = w.threads.len();
                    w.add_instance(cfg, HOST, None, owner, format!("native{i}"), cfg.corunner.is_some() && i > 0);
                    // `native_groups`: the instance's threads in a task group of their own.
                    if grouped {
                        let g = w.kernels[HOST as usize].add_group(1024);
                        w.group_threads_from(first, Some(g));
                    }
                }
            }
            Layout::Vms { vms } => {
                let mut vm_inst = Vec::new();
                let mut vm_groups = Vec::new();
                for vm in 0..vms {
                    let spec = cfg.vm_spec(vm);
                    // A co-running VM may have fewer vCPUs than the run's cores (`vms.N.vcpus`),
                    // on cores 0..m.
                    let n = spec.vcpus.filter(|_| vm > 0).unwrap_or(n);
                    let k = w.kernels.len() as KernelId;
                    let mut guest = Kernel::new(KernelKind::Guest { vm }, n, cfg.guest.params(n));
                    guest.tick_phase = Stream::new(stream_seed(cfg.seed, &[STREAM_KERNEL, u64::from(vm)])).below(guest.params.tick_ns);
                    if spec.llc == crate::spec::vm::GuestLlc::Shared {
                        guest.llc = vec![0; n as usize];
                        guest.llc_size = n;
                    }
                    w.kernels.push(guest);
                    let mut ids = Vec::new();
                    // libvirt's layout: the VM's vCPU threads in a task group of their own.
                    let grouped = cfg.host.cgroups == crate::spec::kernel::Cgroups::Libvirt;
                    let group = grouped.then(|| w.kernels[HOST as usize].add_group(spec.shares()));
                    for i in 0..n {
                        let owner = w.owners.len() as u32;
                        w.owners.push(OwnerKind::Vcpu { vm, vcpu: i });
                        let vid = w.vcpus.len() as u32;
                        let task = w.new_task(TaskKind::Vcpu(vid), HOST, owner, i, spec.vcpu_weight(i, grouped));
                        w.tasks[task as usize].pinned = spec.pin.then_some(i);
                        w.tasks[task as usize].group = group;
                        w.vcpus.push(Vcpu::new(vm, i, task, k, owner));
                        w.vcpus[vid as usize].alloc = VcpuAlloc::new(n, spec.vcpu_weight(i, grouped));
                        if let Some(q) = spec.vcpu_quota(i) {
                            w.add_bandwidth(BwOwner::Task(task), q, spec.period.0);
                        }
                        ids.push(vid);
                    }
                    if let (Some(g), Some(q)) = (group, spec.global_quota) {
                        w.add_bandwidth(BwOwner::Group(g), q.0, spec.global_period.0);
                    }
                    vm_groups.push(group);
                    let first_owner = w.vcpus[ids[0] as usize].owner;
                    w.vms.push(Vm {
                        kernel: k,
                        vcpus: ids,
                        policies: VmPolicies::new(spec, n),
                        spec: spec.clone(),
                        ple_series: Vec::new(),
                        spin: Default::default(),
                    });
                    if let Some(mem) = w.mem.as_mut() {
                        let first: Vec<u32> = (0..n).collect();
                        mem.add_vm(spec.numa, spec.memory, spec.memory_node, &first);
                    }
                    let background = cfg.corunner.is_some() && vm > 0;
                    vm_inst.push(w.insts.len());
                    w.add_instance(cfg, k, Some(vm), first_owner, format!("vm{vm}"), background);
                }
                // After every VM's instance: the measured and co-runner instances keep their
                // indices (0 = VM 0's), as the host daemons do.
                for (vm, group) in vm_groups.into_iter().enumerate() {
                    w.add_emulator(cfg, vm as u32, group);
                }
                w.periods = Some(Periods::new(w.kernels[HOST as usize].params.latency, &cfg.host.asymmetric, vm_inst));
                if cfg.host.numad.enabled && w.mem.is_some() {
                    w.numad = Some(Numad::new(cfg.host.numad.clone(), vms as usize));
                }
            }
        }
        w.add_host_daemons(cfg);
        w.ledger = Ledger::new(w.owners.len(), n as usize);
        let (threads, insts, owners) = (w.threads.len(), w.insts.len(), w.owners.len());
        if let Some(mem) = w.mem.as_mut() {
            mem.size(threads, insts, owners);
        }
        let idle = Leaf { attr: Attr { owner: 0, layer: Layer::Host, cause: Cause::Idle }, rem: Rem::Inf, thread: None };
        w.cores = (0..n).map(|_| Core { leaf: idle, since: SimTime::ZERO, gen: 0, ple_switch_from: None }).collect();
        // Tasks start with a random virtual runtime below one minimum slice, so that which of
        // the tasks sharing a CPU runs first is arbitrary (as on a real host, where VMs and
        // threads never start in lockstep) instead of every core picking the same VM first.
        // The same for the host's group entities: a VM's entity on each core starts at its own
        // random virtual runtime, so the VMs sharing the cores do not alternate in lockstep.
        let spread = w.kernels[HOST as usize].params.min_gran;
        let host = &mut w.kernels[HOST as usize];
        for (c, kc) in host.cpus.iter_mut().enumerate() {
            for (g, gr) in kc.groups.iter_mut().enumerate() {
                gr.se_vr = Stream::new(stream_seed(cfg.seed, &[STREAM_GROUP, g as u64, c as u64])).below(spread);
            }
        }
        for t in 0..w.tasks.len() as u32 {
            let k = w.tasks[t as usize].kernel as usize;
            let spread = w.kernels[k].params.min_gran;
            w.tasks[t as usize].vr = Stream::new(stream_seed(cfg.seed, &[STREAM_TASK, u64::from(t)])).below(spread);
            w.enqueue_initial(t);
        }
        w.live = w.insts.iter().filter(|i| !i.background).count() as u32;
        w.start_periods();
        w.start_numad();
        w
    }

    fn new_task(&mut self, kind: TaskKind, kernel: KernelId, owner: u32, cpu: u32, weight: u64) -> u32 {
        let id = self.tasks.len() as u32;
        self.tasks.push(Task {
            kind,
            kernel,
            owner,
            state: TaskState::Blocked,
            cpu,
            vr: 0,
            weight,
            group: None,
            bw_pool: None,
            bw: Default::default(),
            exec_start: SimTime::ZERO,
            sum_exec: 0,
            prev_sum_exec: 0,
            pinned: None,
            wakeup_gran: None,
            woken_at: None,
            nvcsw: 0,
            nivcsw: 0,
            wakee_flips: 0,
            last_wakee: None,
            wakee_flip_decay: SimTime::ZERO,
            newborn: false,
        });
        id
    }

    fn add_instance(&mut self, cfg: &RunConfig, k: KernelId, vm: Option<u32>, owner: u32, name: String, background: bool) {
        let (wl, threads) = match (&cfg.corunner, background) {
            // In a VM with its own vCPU count, one thread per vCPU unless a count was set.
            (Some(c), true) if !c.threads_set => (Arc::clone(&c.workload), self.kernels[k as usize].cpus.len() as u32),
            (Some(c), true) => (Arc::clone(&c.workload), c.threads),
            _ => (Arc::clone(&cfg.workload), cfg.threads),
        };
        self.add_instance_of(cfg, k, vm, owner, name, background, wl, threads);
    }

    /// The host's daemon threads (`[host.daemons]`) as a background instance owned by the host.
    fn add_host_daemons(&mut self, cfg: &RunConfig) {
        let d = &cfg.host.daemons;
        if d.count == 0 {
            return;
        }
        let wl = daemon_workload("host-daemons", "host daemon threads", d);
        self.add_instance_of(cfg, HOST, None, 0, "host-daemons".into(), true, Arc::new(wl), d.count);
    }

    /// VM `vm`'s QEMU emulator threads (`vm.emulator`), in the VM's task group when it has one
    /// (libvirt's `emulator` child, folded into the threads as `vcpuN` is).
    fn add_emulator(&mut self, cfg: &RunConfig, vm: u32, group: Option<u32>) {
        let d = &cfg.vm_spec(vm).emulator;
        if d.count == 0 {
            return;
        }
        let first = self.threads.len();
        let wl = daemon_workload("qemu-emulator", "QEMU emulator threads of a VM", d);
        self.add_instance_of(cfg, HOST, None, 0, format!("vm{vm}-emulator"), true, Arc::new(wl), d.count);
        self.group_threads_from(first, group);
    }

    /// Puts the host tasks of threads `first..` (an instance just added) in task group `group`.
    fn group_threads_from(&mut self, first: usize, group: Option<u32>) {
        for th in first..self.threads.len() {
            let t = self.threads[th].task;
            self.tasks[t as usize].group = group;
        }
    }
}

/// A program of `d.count` threads that each sleep an exponential time of mean `d.interval`,
/// then run an exponential time of mean `d.run`, forever.
fn daemon_workload(name: &str, description: &str, d: &crate::spec::kernel::DaemonSpec) -> Workload {
    let instrs = vec![
        Instr::LoopStart { count: Times::Fixed(u64::MAX), end: 3, share: Share::Each },
        Instr::Sleep(Dist::Exp { mean: d.interval.0 as f64 }),
        Instr::Compute { dist: Dist::Exp { mean: d.run.0 as f64 }, skew: 0.0, mem: 0.0, split: false },
        Instr::LoopEnd { start: 0 },
        Instr::End,
    ];
    Workload {
        name: name.into(),
        description: description.into(),
        model: "daemon".into(),
        threads: Some(d.count),
        objects: Vec::new(),
        program: Program { instrs },
        groups: vec![crate::workload::program::Group {
            name: "main".into(),
            threads: crate::workload::program::CountExpr::N,
            entry: 0,
            pushes: Vec::new(),
            drains: Vec::new(),
            created: false,
            fault_budget: None,
        }],
        meta: Default::default(),
        memory: Default::default(),
        qos: None,
        stochastic: true,
        heap: Default::default(),
        processes: true,
        main_thread: None,
    }
}

impl World<'_> {
    #[allow(clippy::too_many_arguments)]
    fn add_instance_of(
        &mut self,
        cfg: &RunConfig,
        k: KernelId,
        vm: Option<u32>,
        owner: u32,
        name: String,
        background: bool,
        wl: Arc<crate::workload::Workload>,
        n: u32,
    ) {
        let inst = self.insts.len() as u32;
        let ncpus = self.kernels[k as usize].cpus.len() as u32;
        let threads = wl.thread_count(n);
        if let Some(msg) = undrained_lane(&wl, n) {
            self.fail(msg);
        }
        let objs = wl
            .objects
            .iter()
            .enumerate()
            .map(|(o, d)| {
                let producers = lane_users(&wl, o as u32, n, false);
                Obj::new(
                    d,
                    wl.users(o as u32, n),
                    &producers,
                    Stream::new(stream_seed(cfg.seed, &[STREAM_OBJECT, u64::from(inst), o as u64])),
                )
            })
            .collect();
        let mut ids = Vec::new();
        // A program starts on whichever CPU its launcher ran on (exec balancing leaves an idle
        // machine's task where it is), and fork balancing spreads its threads over the idle
        // CPUs from there: thread i starts on CPU (first + i) mod n, `first` drawn per
        // instance. A fixed first CPU would put every instance's main thread on CPU 0, so two
        // VMs' serial phases would always share one core.
        let first = Stream::new(stream_seed(cfg.seed, &[STREAM_PLACE, u64::from(inst)])).below(u64::from(ncpus)) as u32;
        // `pin_threads`: thread i bound to CPU i mod n (`sched_setaffinity`).
        let pin_threads = if k == HOST { cfg.host.pin_threads } else { cfg.guest.pin_threads };
        // The C library of the kernel the threads run on decides when their heaps trim, and
        // what creates their arenas.
        let libc = if k == HOST { &cfg.host } else { &cfg.guest };
        let heap = crate::workload::heap::HeapParams {
            trim_always: libc.arena_trim == crate::spec::kernel::ArenaTrim::Always,
            tcache: u64::from(libc.tcache_bytes),
            ..wl.heap
        };
        let slots = wl.groups.iter().enumerate().flat_map(|(g, grp)| (0..grp.threads.value(n)).map(move |j| (g as u32, j, grp.entry)));
        for (i, (group, idx, entry)) in slots.enumerate() {
            let i = i as u32;
            let tid = self.threads.len() as u32;
            let cpu = if pin_threads { i % ncpus } else { (first + i) % ncpus };
            let task = self.new_task(TaskKind::Thread(tid), k, owner, cpu, 1024);
            self.tasks[task as usize].pinned = pin_threads.then_some(cpu);
            // A thread its program creates during the run (a replay's traced threads) waits
            // for its creation; that wake-up places it as a new task.
            self.tasks[task as usize].newborn = wl.groups[group as usize].created;
            self.threads.push(Thread {
                inst,
                idx,
                group,
                task,
                pc: entry,
                loops: Vec::new(),
                pool_entries: Vec::new(),
                act: Act::Fresh,
                compute_rem: 0,
                mem: 0.0,
                spin_window: 0,
                ple_epoch: 0,
                pv_left: u64::MAX,
                pmt: crate::kernel::thread::PmtWait::RACING,
                process: if wl.processes { i } else { 0 },
                arena: (wl.processes || wl.main_thread == Some(i)).then_some(ProcessHeap::MAIN),
                allocs: 0,
                faults_left: wl.groups[group as usize].fault_budget.unwrap_or(u64::MAX),
                mm_queue: VecDeque::new(),
                mm_held: None,
                kpath: VecDeque::new(),
                blocking: None,
                rng: Stream::new(stream_seed(cfg.seed, &[STREAM_THREAD, u64::from(inst), u64::from(i)])),
                kdepth: 0,
                ticket: 0,
                bgen: 0,
                pending_lock: None,
                held_lock: None,
                bphase: Default::default(),
                spin_budget: u64::MAX,
                item: crate::engine::SimTime::ZERO,
                stats: ThreadStats::default(),
            });
            ids.push(tid);
        }
        // glibc's arenas for the CPUs this kernel has (what `get_nprocs` tells the C library).
        let processes = if wl.processes { threads as usize } else { 1 };
        self.insts.push(Instance {
            name,
            kernel: k,
            vm,
            wl,
            threads: ids,
            objs,
            live: threads,
            finish: None,
            background,
            tlb: Default::default(),
            membarrier: Default::default(),
            n,
            responses: Vec::new(),
            pools: BTreeMap::new(),
            mmap_sem: Default::default(),
            vmas: Vec::new(),
            mm_locks: Default::default(),
            sync: Default::default(),
            heaps: vec![ProcessHeap::new(heap, ncpus); processes],
        });
    }
}

/// Threads of each lane of queue `q` for thread parameter `n` that push to it (`drains` =
/// false) or drain it (true). A queue has one lane unless it is declared with `lane_threads`:
/// then `ceil(n / lane_threads)` lanes. A group using its own lane adds each thread to the
/// lane its index maps to; a group using every lane in rotation adds each thread to all.
fn lane_users(wl: &crate::workload::Workload, q: u32, n: u32, drains: bool) -> Vec<u32> {
    use crate::workload::program::Lane;
    let decl = &wl.objects[q as usize];
    let (lanes, per) = (decl.lanes(n), decl.lane_threads.unwrap_or(u32::MAX));
    let mut users = vec![0u32; lanes];
    for g in &wl.groups {
        let uses = if drains { &g.drains } else { &g.pushes };
        // A group may drain one queue both ways (pushes are one way per queue, checked at parse).
        for &(_, lane) in uses.iter().filter(|(p, _)| *p == q) {
            for idx in 0..g.threads.value(n) {
                match lane {
                    Lane::Own => users[Lane::own(idx, per, lanes)] += 1,
                    Lane::Rotate => users.iter_mut().for_each(|u| *u += 1),
                }
            }
        }
    }
    users
}

/// A lane that gets items but that no thread drains (its items would be lost and a `join`
/// would never return): the message naming it, if any.
fn undrained_lane(wl: &crate::workload::Workload, n: u32) -> Option<String> {
    for (q, d) in wl.objects.iter().enumerate().filter(|(_, d)| d.lane_threads.is_some()) {
        let (producers, consumers) = (lane_users(wl, q as u32, n, false), lane_users(wl, q as u32, n, true));
        if let Some(l) = (0..producers.len()).find(|&l| producers[l] > 0 && consumers[l] == 0) {
            return Some(format!(
                "workload '{}': lane {l} of queue '{}' ({} lanes at n = {n}, lane_threads = {}) gets items but no thread drains it (drain it with lane = \"rotate\", or with a group of enough threads)",
                wl.name,
                d.name,
                producers.len(),
                d.lane_threads.unwrap_or(1)
            ));
        }
    }
    None
}
