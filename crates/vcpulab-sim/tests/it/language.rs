//! The workload language of the benchmark profiles: groups, queues, spin budgets, modifiers,
//! requests, transforms (docs/profiles.md).

use vcpulab_sim::api::Plan;

use super::{run_inline, run_text, try_run_inline};

const NATIVE4: &str = "scenarios = [\"native\"]\nvcpus = [4]";

/// User-mode busy-waiting of a run (ns): spin barriers, spinning mutexes, user spinlocks. The
/// instances' `spin_ns` also counts kernel spinning (the futex hash-bucket lock of a contended
/// futex, for instance).
fn user_spin_ns(r: &vcpulab_sim::api::ScenarioResult) -> u64 {
    r.run.ledger.iter().filter(|l| l.layer == "user" && l.cause == "spin_user").map(|l| l.ns).sum()
}

fn spec_error(workload: &str) -> String {
    let text = format!("[experiment]\nworkloads = [\"w\"]\nvcpus = [4]\n[workloads.w]\n{workload}\n");
    match Plan::new(&text, "t.toml", &[]) {
        Ok(_) => panic!("accepted: {workload}"),
        Err(e) => e.to_string(),
    }
}

const PIPELINE: &str = r#"
description = "reader -> n workers -> writer"
model = "pipeline"
params = { items = { value = 200, estimate = true, source = "test" } }
objects = { raw = { kind = "queue", capacity = 4 }, done = "queue" }
[[workloads.w.groups]]
name = "reader"
threads = 1
program = [ { repeat = { times = "$items", body = [ { compute = "20us" }, { push = "raw" } ] } } ]
[[workloads.w.groups]]
name = "worker"
threads = "n"
program = [ { drain = { queue = "raw", body = [ { compute = "100us" }, { push = "done" } ] } } ]
[[workloads.w.groups]]
name = "writer"
threads = 1
program = [ { drain = { queue = "done", body = [ { compute = "5us" } ] } } ]
"#;

#[test]
fn a_pipeline_moves_every_item_through_its_stages_and_ends() {
    let r = run_inline(NATIVE4, PIPELINE, &[]);
    let inst = &r[0].run.instances[0];
    assert_eq!(inst.threads, 6, "1 reader + n=4 workers + 1 writer");
    // Every item costs the workers 100 µs: 200 items over 4 workers ≥ 5 ms.
    assert!(r[0].t_native_s > 0.005 && r[0].t_native_s < 0.02, "{}", r[0].t_native_s);
    assert!(inst.counters.blocks > 0, "a bounded queue makes the reader block");
    assert_eq!(r[0].workload_version, 0);
    assert_eq!(r[0].workload_hash.len(), 16);
}

#[test]
fn pipeline_errors_name_the_place() {
    let cyc = r#"objects = { a = "queue", b = "queue" }
        [[workloads.w.groups]]
        name = "x"
        program = [ { push = "a" }, { drain = { queue = "b", body = [] } } ]
        [[workloads.w.groups]]
        name = "y"
        program = [ { drain = { queue = "a", body = [ { push = "b" } ] } } ]"#;
    let e = spec_error(cyc);
    assert!(e.contains("cycle in the pipeline stages: x -> y -> x"), "{e}");
    let e = spec_error("objects = { q = \"queue\" }\nprogram = [ { push = \"q\" } ]");
    assert!(e.contains("no group drains queue 'q'"), "{e}");
    let e = spec_error("objects = { q = \"queue\" }\nprogram = [ { respond = \"q\" } ]");
    assert!(e.contains("inside a drain"), "{e}");
    let e = spec_error("params = { k = { value = 3, estimate = true } }\nprogram = [ { compute = \"1us\" } ]");
    assert!(e.contains("params.k.source"), "{e}");
    let e = spec_error("program = [ { compute = \"1us\", skew = 2.0 } ]");
    assert!(e.contains("skew") && e.contains("between 0 and 1"), "{e}");
    let e = spec_error("program = [ { sleep = \"1us\", skew = 0.5 } ]");
    assert!(e.contains("takes no modifiers"), "{e}");
    let e = spec_error("[[workloads.w.groups]]\nthreads = \"2q\"\nprogram = []");
    assert!(e.contains("groups[0].threads"), "{e}");
    let e = spec_error("model = \"bogus\"\nprogram = []");
    assert!(e.contains("unknown model"), "{e}");
    let e = spec_error("objects = { b = { kind = \"barrier\", parties = 9 } }\nprogram = [ { barrier = \"b\" } ]");
    assert!(e.contains("9 parties"), "{e}");
}

#[test]
fn barrier_parties_default_to_the_threads_that_use_it() {
    let w = r#"objects = { b = "barrier" }
        [[workloads.w.groups]]
        name = "pool"
        threads = "n"
        program = [ { repeat = { times = 50, body = [ { compute = "100us" }, { barrier = "b" } ] } } ]
        [[workloads.w.groups]]
        name = "loner"
        threads = 1
        program = [ { compute = "1ms" } ]"#;
    let r = run_inline(NATIVE4, w, &[]);
    assert!(r[0].t_native_s < 0.02, "the loner is not a party: {}", r[0].t_native_s);
}

#[test]
fn spin_budget_spins_then_blocks() {
    // Thread 0 arrives 2 ms late at every episode: with a 50 µs budget the others spin 50 µs
    // and then block; forever-spinning never blocks; no budget blocks at once.
    let w = |spin: &str| {
        format!(
            "objects = {{ b = {{ kind = \"barrier\"{spin} }} }}\n\
             program = [ {{ repeat = {{ times = 20, body = [ {{ single = {{ body = [ {{ compute = \"2ms\" }} ] }} }}, {{ barrier = \"b\" }} ] }} }} ]"
        )
    };
    let stats = |spin: &str| {
        let r = run_inline(NATIVE4, &w(spin), &[]);
        (user_spin_ns(&r[0]), r[0].run.instances[0].counters.blocks)
    };
    let (s_budget, b_budget) = stats(", spin = \"50us\"");
    let (s_forever, b_forever) = stats(", spin = \"forever\"");
    let (s_block, b_block) = stats("");
    assert_eq!(s_block, 0);
    assert_eq!(b_block, 60, "3 waiters × 20 episodes block");
    assert_eq!(b_forever, 0);
    assert!(s_forever > 3 * 20 * 1_900_000, "{s_forever}");
    assert_eq!(b_budget, 60);
    let budget_spin = 3 * 20 * 50_000;
    assert!(s_budget >= budget_spin && s_budget < budget_spin + budget_spin / 10, "{s_budget}");
}

#[test]
fn transforms_turn_user_spinning_into_blocking() {
    let spec = "[experiment]\nworkloads = [\"spinbarrier\"]\nscenarios = [\"native\"]\nvcpus = [4]\n\
                [workloads.spinbarrier.params]\nsteps = 100\n";
    let keep = run_text(spec, &[]);
    let block = run_text(spec, &["workloads.spinbarrier.transform.spin=\"block\""]);
    let stb = run_text(spec, &["workloads.spinbarrier.transform={ spin = \"spin_then_block\", spin_budget = \"5us\" }"]);
    let c = |r: &Vec<vcpulab_sim::api::ScenarioResult>| r[0].run.instances[0].counters.clone();
    assert!(user_spin_ns(&keep[0]) > 0 && c(&keep).blocks == 0);
    assert!(user_spin_ns(&block[0]) == 0 && c(&block).blocks > 0);
    assert!(user_spin_ns(&stb[0]) > 0 && c(&stb).blocks > 0);
    assert_ne!(keep[0].workload_hash, block[0].workload_hash, "the hash covers the transform");
    let e = match Plan::new(spec, "t.toml", &["workloads.spinbarrier.transform.spin=\"never\"".to_string()]) {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("transform.spin") && e.contains("unknown transform"), "{e}");
}

#[test]
fn servers_record_response_times_and_qos() {
    let w = r#"model = "server"
        qos = { good = "1ms", tolerable = "5ms" }
        objects = { req = "queue", db = "mutex" }
        [[workloads.w.groups]]
        name = "clients"
        threads = 1
        program = [ { repeat = { times = 1000, body = [ { sleep = { exp = "100us" } }, { push = "req" } ] } } ]
        [[workloads.w.groups]]
        name = "pool"
        threads = "n"
        program = [ { drain = { queue = "req", body = [ { compute = { exp = "250us" } }, { lock = "db" }, { compute = "10us" }, { unlock = "db" }, { respond = "req" } ] } } ]"#;
    // About 2.6 busy CPUs per instance: natively 4 CPUs serve it with a short tail; in OC
    // two such VMs share the 4 CPUs (about 5.2 CPUs of demand), so requests queue.
    let r = run_inline("scenarios = [\"native\", \"OC\"]\nvcpus = [4]\nseeds = [1, 2, 3]", w, &[]);
    for s in 1..=3 {
        let cell = |sc: &str| &r.iter().find(|c| c.seed == s && c.scenario.name() == sc).unwrap().metrics;
        let (m, oc) = (cell("native"), cell("OC"));
        assert_eq!(m["requests"], 1000.0);
        assert!(m["resp_p50_us"] >= 250.0 * 0.3 && m["resp_p99_us"] >= m["resp_p50_us"], "{m:?}");
        assert!(m["qos_good_frac"] > 0.9, "{m:?}");
        assert!(oc["resp_p99_us"] > 1.5 * m["resp_p99_us"], "overcommit lengthens the tail: {oc:?} vs {m:?}");
    }
}

#[test]
fn skew_and_subset_shape_per_thread_work() {
    // skew 1: thread i of 4 computes (1 + (2i/3 - 1)) × 3 ms = 0, 2, 4, 6 ms.
    let r = run_inline(NATIVE4, "program = [ { compute = \"3ms\", skew = 1.0 } ]", &[]);
    let ts: Vec<u64> = r[0].run.instances[0].thread_stats.iter().map(|t| t.counters.compute_ns / 1_000_000).collect();
    assert_eq!(ts, vec![0, 2, 4, 6]);
    let r = run_inline(NATIVE4, "program = [ { subset = { threads = \"n/2\", body = [ { compute = \"1ms\" } ] } } ]", &[]);
    let ts: Vec<u64> = r[0].run.instances[0].thread_stats.iter().map(|t| t.counters.compute_ns / 1_000).collect();
    assert_eq!(ts, vec![1000, 1000, 0, 0]);
}

#[test]
fn overrides_reach_suite_prefixed_workloads() {
    // `workloads.parsec.dedup.…` is written as a nested table; it must patch "parsec.dedup"
    // instead of vanishing.
    let spec = "[experiment]\nworkloads = [\"splash2x.volrend\"]\nscenarios = [\"native\"]\nvcpus = [4]\n";
    let keep = run_text(spec, &[]);
    let block = run_text(spec, &["workloads.splash2x.volrend.transform.spin=\"block\""]);
    assert_ne!(keep[0].workload_hash, block[0].workload_hash);
    assert!(user_spin_ns(&keep[0]) > 0);
    assert_eq!(user_spin_ns(&block[0]), 0, "the transform applied");
}

#[test]
fn split_shares_work_and_iterations_among_the_group() {
    // 10 ms of compute split over 4 threads; 10 iterations of 1 ms split: 3, 3, 2, 2.
    let r = run_inline(NATIVE4, "program = [ { compute = \"10ms\", split = true } ]", &[]);
    let ts: Vec<u64> = r[0].run.instances[0].thread_stats.iter().map(|t| t.counters.compute_ns / 1_000).collect();
    assert_eq!(ts, vec![2500; 4]);
    let r = run_inline(NATIVE4, "program = [ { repeat = { times = 10, split = true, body = [ { compute = \"1ms\" } ] } } ]", &[]);
    let ts: Vec<u64> = r[0].run.instances[0].thread_stats.iter().map(|t| t.counters.compute_ns / 1_000).collect();
    assert_eq!(ts, vec![3000, 3000, 2000, 2000]);
    // Strong scaling: the same total at every thread count, finished sooner by more threads.
    let wl = "program = [ { compute = \"16ms\", split = true } ]";
    let one = run_inline("scenarios = [\"native\"]\nvcpus = [1]", wl, &[]);
    let four = run_inline(NATIVE4, wl, &[]);
    let total = |r: &vcpulab_sim::api::ScenarioResult| r.run.instances[0].thread_stats.iter().map(|t| t.counters.compute_ns).sum::<u64>();
    assert_eq!(total(&one[0]), total(&four[0]));
    assert!(four[0].t_native_s < one[0].t_native_s / 3.0);
    let e = spec_error("program = [ { compute = \"1ms\", split = 1 } ]");
    assert!(e.contains("program[0].split") && e.contains("expected true or false"), "{e}");
}

#[test]
fn a_dynamic_loop_hands_iterations_to_whichever_thread_is_free() {
    // Thread 0 arrives 6 ms late: a static split still gives it 3 of the 10 iterations (done
    // at 9 ms); a dynamic pool lets threads 1-3 take the iterations while it is away, so it
    // finds none left and the loop ends sooner.
    let late = |split: &str| {
        format!(
            "program = [ {{ single = {{ thread = 0, body = [ {{ compute = \"6ms\" }} ] }} }}, \
             {{ repeat = {{ times = 10, split = {split}, body = [ {{ compute = \"1ms\" }} ] }} }} ]"
        )
    };
    let iterations = |r: &vcpulab_sim::api::ScenarioResult| -> Vec<u64> {
        r.run.instances[0].thread_stats.iter().map(|t| t.counters.compute_ns / 1_000_000).collect()
    };
    let st = run_inline(NATIVE4, &late("true"), &[]);
    let dy = run_inline(NATIVE4, &late("\"dynamic\""), &[]);
    assert_eq!(iterations(&st[0]), vec![6 + 3, 3, 2, 2]);
    let per = iterations(&dy[0]);
    assert_eq!(per.iter().sum::<u64>(), 6 + 10, "every iteration runs exactly once: {per:?}");
    // Threads 1-3 have taken all 10 (3 or 4 each) by 4 ms, before thread 0 comes back.
    assert!(per[0] == 6 && per[1..].iter().all(|&i| (3..=4).contains(&i)), "{per:?}");
    assert!(dy[0].t_native_s < st[0].t_native_s, "{} vs {}", dy[0].t_native_s, st[0].t_native_s);
    // Each time the threads reach the loop they share a fresh pool: 4 rounds of 8 iterations
    // separated by a barrier give 2 each per round on equal threads.
    let rounds = "objects = { b = \"barrier\" }\nprogram = [ { repeat = { times = 4, body = [ \
                  { repeat = { times = 8, split = \"dynamic\", body = [ { compute = \"1ms\" } ] } }, { barrier = \"b\" } ] } } ]";
    let r = run_inline(NATIVE4, rounds, &[]);
    assert_eq!(iterations(&r[0]), vec![8; 4]);
    let e = spec_error("program = [ { repeat = { times = 2, split = \"stolen\", body = [ { compute = \"1ms\" } ] } } ]");
    assert!(e.contains("program[0].repeat.split") && e.contains("dynamic"), "{e}");
    let e = spec_error(
        "objects = { q = \"queue\" }\nprogram = [ { drain = { queue = \"q\", body = [ \
         { repeat = { times = 2, split = \"dynamic\", body = [ { compute = \"1ms\" } ] } } ] } } ]",
    );
    assert!(e.contains("split") && e.contains("drain body"), "{e}");
}

#[test]
fn a_rotating_serial_part_visits_every_thread() {
    let wl = |t: &str| {
        format!(
            "objects = {{ b = \"barrier\" }}\nprogram = [ {{ repeat = {{ times = 8, body = [ {{ serial = {{ barrier = \"b\", thread = {t}, body = [ {{ compute = \"1ms\" }} ] }} }} ] }} }} ]"
        )
    };
    let per_thread = |t: &str| -> Vec<u64> {
        let r = run_inline(NATIVE4, &wl(t), &[]);
        r[0].run.instances[0].thread_stats.iter().map(|t| t.counters.compute_ns / 1_000_000).collect()
    };
    assert_eq!(per_thread("0"), vec![8, 0, 0, 0]);
    assert_eq!(per_thread("\"rotate\""), vec![2, 2, 2, 2]);
    let e = spec_error("objects = { b = \"barrier\" }\nprogram = [ { serial = { barrier = \"b\", thread = \"rotate\", body = [] } } ]");
    assert!(e.contains("program[0].serial.thread") && e.contains("no"), "{e}");
}

#[test]
fn a_pool_joins_its_queue_once_per_fork_join() {
    // PhysBAM's THREAD_POOL: main enqueues one task per worker (`times = "n"`), then waits
    // until every task is done; the worker finishing the last one wakes it, once.
    let pool = r#"objects = { q = "queue" }
        [[workloads.w.groups]]
        name = "main"
        threads = 1
        program = [ { repeat = { times = 10, body = [
          { compute = "200us" }, { repeat = { times = "n", body = [ { push = "q" } ] } }, { join = "q" },
        ] } } ]
        [[workloads.w.groups]]
        name = "workers"
        threads = "n"
        program = [ { drain = { queue = "q", body = [ { compute = "100us" } ] } } ]"#;
    for n in [2u64, 4] {
        let r = run_inline(&format!("scenarios = [\"native\"]\nvcpus = [{n}]"), pool, &[]);
        let stats = &r[0].run.instances[0].thread_stats;
        assert_eq!(stats.len() as u64, 1 + n);
        assert_eq!(stats[0].counters.blocks, 10, "main sleeps once per join, however many tasks");
        let work: u64 = stats[1..].iter().map(|t| t.counters.compute_ns).sum();
        assert_eq!(work, 10 * n * 100_000, "n tasks of 100 µs per fork-join");
        // Main waited for its tasks every time: 10 × (200 µs serial + 100 µs of tasks).
        assert!(r[0].t_native_s >= 0.003, "{}", r[0].t_native_s);
    }
    let e = spec_error(
        "objects = { q = \"queue\" }\nprogram = [ { push = \"q\" }, { drain = { queue = \"q\", body = [ { join = \"q\" } ] } } ]",
    );
    assert!(e.contains("join must not be inside a drain of the same queue"), "{e}");
    let e = spec_error("program = [ { repeat = { times = \"2q\", body = [ { compute = \"1us\" } ] } } ]");
    assert!(e.contains("program[0].repeat.times") && e.contains("count of n"), "{e}");
}

#[test]
fn laned_queues_route_by_thread_and_rotate_strictly() {
    // PARSEC dedup's queues: one lane per 4 threads. With n = 8 there are 2 lanes; the single
    // fragment thread pushes in rotation (lanes 0, 1, 0, …), so 9 items give lane 0 five and
    // lane 1 four, and each stage thread drains only its own lane (index / 4).
    let w = r#"model = "pipeline"
        objects = { work = { kind = "queue", lane_threads = 4 }, out = { kind = "queue", lane_threads = 4 } }
        [[workloads.w.groups]]
        name = "fragment"
        threads = 1
        program = [ { repeat = { times = 9, body = [ { push = "work", lane = "rotate" } ] } } ]
        [[workloads.w.groups]]
        name = "stage"
        threads = "n"
        program = [
          { subset = { threads = 4, body = [ { sleep = "10ms" } ] } },
          { drain = { queue = "work", body = [ { compute = "100us" }, { push = "out" } ] } },
        ]
        [[workloads.w.groups]]
        name = "reorder"
        threads = 1
        program = [ { drain = { queue = "out", lane = "rotate", body = [ { compute = "1us" }, { respond = "out" } ] } } ]"#;
    let r = run_inline("scenarios = [\"native\"]\nvcpus = [8]", w, &[]);
    let stats = &r[0].run.instances[0].thread_stats;
    assert_eq!(stats.len(), 10);
    let lane_work = |lo: usize, hi: usize| stats[lo..hi].iter().map(|t| t.counters.compute_ns).sum::<u64>();
    assert_eq!(lane_work(1, 5), 5 * 100_000, "lane 0 gets items 0, 2, 4, 6, 8");
    assert_eq!(lane_work(5, 9), 4 * 100_000, "lane 1 gets items 1, 3, 5, 7");
    // Lane 0's stage threads sleep 10 ms before draining; lane 1's finish at once. The
    // reorder thread still takes lane 0 first and blocks on it, so lane 1's items wait ~10 ms.
    let m = &r[0].metrics;
    assert_eq!(m["requests"], 9.0, "every item reaches the rotating drainer, which then ends");
    assert!(m["resp_p99_us"] >= 9_000.0, "strict rotation holds lane 1's items behind lane 0: {m:?}");

    // n = 5, two threads per lane: 3 lanes, the last with one thread. Lane 1's producers push
    // nothing and exit at 3 ms, after the rotating drainer has taken lane 0's item and blocked
    // on lane 1: the lane's closing wakes it, it skips the closed lane and waits on lane 2,
    // whose single producer pushes at 6 ms; then every lane is closed and it ends.
    let w = r#"model = "pipeline"
        objects = { out = { kind = "queue", lane_threads = 2 } }
        [[workloads.w.groups]]
        name = "stage"
        threads = "n"
        program = [
          { single = { thread = 0, body = [ { push = "out" } ] } },
          { single = { thread = 2, body = [ { sleep = "3ms" } ] } },
          { single = { thread = 3, body = [ { sleep = "3ms" } ] } },
          { single = { thread = 4, body = [ { sleep = "6ms" }, { push = "out" } ] } },
        ]
        [[workloads.w.groups]]
        name = "reorder"
        threads = 1
        program = [ { drain = { queue = "out", lane = "rotate", body = [ { compute = "1us" }, { respond = "out" } ] } } ]"#;
    let r = run_inline("scenarios = [\"native\"]\nvcpus = [5]", w, &[]);
    assert_eq!(r[0].metrics["requests"], 2.0, "lane 0's and lane 2's items");
    assert!(r[0].t_native_s >= 0.006, "the drainer waited for lane 2: {}", r[0].t_native_s);
    // A lane that gets items but that no thread drains is an error, not lost items: n = 4
    // stage threads push to their own lanes of 2, but the one drainer drains its own lane 0.
    let w = r#"model = "pipeline"
        objects = { out = { kind = "queue", lane_threads = 2 } }
        [[workloads.w.groups]]
        name = "stage"
        threads = "n"
        program = [ { push = "out" } ]
        [[workloads.w.groups]]
        name = "reorder"
        threads = 1
        program = [ { drain = { queue = "out", body = [ { compute = "1us" } ] } } ]"#;
    let e = match try_run_inline(NATIVE4, w, &[]).next() {
        Some(Err(e)) => e.to_string(),
        other => panic!("accepted: {:?}", other.map(|r| r.map(|x| x.t_native_s))),
    };
    assert!(e.contains("lane 1 of queue 'out'") && e.contains("no thread drains it"), "{e}");

    let e = spec_error(
        "objects = { q = \"queue\" }\nprogram = [ { push = \"q\", lane = \"rotate\" }, { drain = { queue = \"q\", body = [] } } ]",
    );
    assert!(e.contains("program[0].lane") && e.contains("lane_threads"), "{e}");
    let e = spec_error(
        "objects = { q = { kind = \"queue\", lane_threads = 2 } }\nprogram = [ { push = \"q\", lane = \"next\" }, { drain = { queue = \"q\", body = [] } } ]",
    );
    assert!(e.contains("program[0].lane") && e.contains("\"own\" or \"rotate\""), "{e}");
    let e = spec_error(
        "objects = { q = { kind = \"queue\", lane_threads = 2 } }\nprogram = [ { push = \"q\" }, { push = \"q\", lane = \"rotate\" }, { drain = { queue = \"q\", body = [] } } ]",
    );
    assert!(e.contains("program[1].lane") && e.contains("not both"), "{e}");
    let e = spec_error("objects = { m = { kind = \"mutex\", lane_threads = 2 } }\nprogram = [ { lock = \"m\" }, { unlock = \"m\" } ]");
    assert!(e.contains("objects.m.lane_threads") && e.contains("only queues"), "{e}");
}

#[test]
fn a_lock_without_spinning_blocks_on_a_spinning_mutex() {
    // Thread 0 holds `m` for 2 ms at every episode while the others want it: with the
    // mutex's forever-spin they spin the whole time; `spin = false` (pthread_mutex_lock on a
    // mutex taken elsewhere with a trylock loop) makes the same waits futex sleeps.
    let w = |lock: &str| {
        format!(
            "objects = {{ m = {{ kind = \"mutex\", spin = \"forever\" }}, b = \"spin_barrier\" }}\n\
             program = [ {{ repeat = {{ times = 10, body = [\n\
               {{ single = {{ body = [ {{ lock = \"m\" }} ] }} }}, {{ barrier = \"b\" }},\n\
               {{ single = {{ body = [ {{ compute = \"2ms\" }}, {{ unlock = \"m\" }} ] }} }},\n\
               {{ {lock} }}, {{ compute = \"10us\" }}, {{ unlock = \"m\" }}, {{ barrier = \"b\" }},\n\
             ] }} }} ]"
        )
    };
    let stats = |lock: &str| {
        let r = run_inline(NATIVE4, &w(lock), &[]);
        let c = &r[0].run.instances[0].counters;
        (c.spin_ns, c.blocks)
    };
    // The barrier spins too, so every block is a futex wait on `m`.
    let (spin_spin, spin_blocks) = stats("lock = \"m\"");
    let (block_spin, block_blocks) = stats("lock = \"m\", spin = false");
    assert!(spin_spin > 3 * 10 * 1_900_000, "the waiters spin through the holder's 2 ms: {spin_spin}");
    assert_eq!(spin_blocks, 0, "a forever-spinning mutex never blocks");
    assert!(block_spin < 3 * 10 * 1_900_000, "only the barrier spins: {block_spin}");
    assert!(block_blocks >= 3 * 10, "each of the 3 waiters sleeps on the futex every episode: {block_blocks}");

    let e = spec_error("objects = { m = \"mutex\" }\nprogram = [ { lock = \"m\", spin = true }, { unlock = \"m\" } ]");
    assert!(e.contains("program[0].spin") && e.contains("expected false"), "{e}");
    let e = spec_error("objects = { s = \"spinlock\" }\nprogram = [ { spin_lock = \"s\", spin = false }, { spin_unlock = \"s\" } ]");
    assert!(e.contains("program[0].spin"), "{e}");
}

#[test]
fn a_memory_operation_finishes_before_the_next_operation_starts() {
    // Thread 0 maps 4 MiB (an mmap and 1,024 page faults of kernel work), then takes `m`;
    // thread 1 computes 5 us, then takes `m`. The faults run before thread 0 reaches the lock,
    // so thread 1 gets it first and thread 0 waits - not the other way round, as if thread 0
    // had taken the lock at the instant it called malloc and faulted its pages in while
    // holding it.
    let w = r#"
        objects = { m = "mutex" }
        [[workloads.w.groups]]
        name = "mapper"
        threads = 1
        program = [ { malloc = "4MiB" }, { lock = "m" }, { compute = "1ms" }, { unlock = "m" } ]
        [[workloads.w.groups]]
        name = "other"
        threads = 1
        program = [ { compute = "5us" }, { lock = "m" }, { compute = "1ms" }, { unlock = "m" } ]"#;
    assert_eq!(native_blocks(2, w), vec![1, 0], "the mapper waits for the lock, the other thread does not");
}

#[test]
fn a_consumer_woken_by_a_push_waits_for_the_queue_mutex_its_producer_still_holds() {
    // One CPU. The consumer blocks on the empty queue; each push signals it while holding
    // the queue's mutex (queue_enqueue: signal, then unlock). The woken consumer preempts the
    // producer at the return of its futex wake and blocks on the mutex the producer still
    // holds; the producer then unlocks and wakes it again. So each of the 3 items costs the
    // consumer two blocks, plus the final wait that the queue's closing (the producer's exit,
    // 1 ms later) ends: 7. Without the mutex it would be 4.
    let w = r#"
        objects = { q = "queue" }
        [[workloads.w.groups]]
        name = "producer"
        threads = 1
        program = [ { repeat = { times = 3, body = [ { compute = "2ms" }, { push = "q" } ] } }, { compute = "1ms" } ]
        [[workloads.w.groups]]
        name = "consumer"
        threads = 1
        program = [ { drain = { queue = "q", body = [ { compute = "10us" } ] } } ]"#;
    assert_eq!(native_blocks(1, w), vec![0, 7], "producer never blocks; consumer: 2 per item + the close");
}

#[test]
fn a_thread_continues_only_after_its_futex_wake_returns() {
    // One CPU. The waiter blocks in cond_wait (it runs within the signaler's 20 ms, a tick
    // preempts it); the signaler then signals while holding `m`. Its futex wake is a system
    // call: the woken waiter preempts it at the call's return, before its `unlock`, and
    // blocks re-acquiring `m`; the unlock then wakes it again. Two blocks - one if the
    // signaler's unlock ran at the instant of the signal.
    let w = r#"
        objects = { m = "mutex", c = "condvar" }
        [[workloads.w.groups]]
        name = "waiter"
        threads = 1
        program = [ { lock = "m" }, { cond_wait = { cond = "c", mutex = "m" } }, { unlock = "m" } ]
        [[workloads.w.groups]]
        name = "signaler"
        threads = 1
        program = [ { compute = "20ms" }, { lock = "m" }, { cond_signal = "c" }, { unlock = "m" }, { compute = "1ms" } ]"#;
    assert_eq!(native_blocks(1, w), vec![2, 0], "the waiter blocks on the condvar, then on the mutex still held");
}

#[test]
fn an_arrival_without_waiting_counts_and_only_the_waiter_blocks() {
    // RTTL's frame end (parsec.raytrace): 3 workers finish a frame every 1 ms and count
    // themselves done; the main thread waits until the count is full. The workers never block
    // (at a `barrier` the first two arrivals would), main blocks once per frame.
    for imp in ["futex", "condvar"] {
        let w = format!(
            r#"objects = {{ done = {{ kind = "barrier", impl = "{imp}" }} }}
            [[workloads.w.groups]]
            name = "main"
            threads = 1
            program = [ {{ repeat = {{ times = 5, body = [ {{ barrier = "done" }} ] }} }} ]
            [[workloads.w.groups]]
            name = "worker"
            threads = 3
            program = [ {{ repeat = {{ times = 5, body = [
              {{ compute = "1ms" }}, {{ arrive = "done" }},
            ] }} }} ]"#
        );
        assert_eq!(native_blocks(4, &w), vec![5, 0, 0, 0], "{imp}: main waits once per episode, the workers never");
        // The barrier opens only with every arrival: main leaves each time after the workers' 1 ms.
        let r = run_inline(NATIVE4, &w, &[]);
        assert!(r[0].t_native_s >= 5e-3, "{imp}: {}", r[0].t_native_s);
    }
    let e = spec_error("objects = { m = \"mutex\" }\nprogram = [ { arrive = \"m\" } ]");
    assert!(e.contains("arrive") && e.contains("barrier"), "{e}");
}

/// Runs workload `w` natively on `vcpus` CPUs (seed 1) and returns each thread's block count.
fn native_blocks(vcpus: u32, w: &str) -> Vec<u64> {
    let r = run_inline(&format!("scenarios = [\"native\"]\nvcpus = [{vcpus}]"), w, &[]);
    r[0].run.instances[0].thread_stats.iter().map(|t| t.counters.blocks).collect()
}

#[test]
fn an_impl_is_futex_or_condvar_for_barriers_pthread_or_socket_for_queues_spinlock_or_bit_for_kernel_spinlocks() {
    let prog = "program = [ { barrier = \"b\" } ]";
    let e = spec_error(&format!("objects = {{ b = {{ kind = \"barrier\", impl = \"ticket\" }} }}\n{prog}"));
    assert!(e.contains("objects.b.impl") && e.contains("\"futex\" or \"condvar\"") && e.contains("'ticket'"), "{e}");
    let e = spec_error(&format!("objects = {{ b = {{ kind = \"barrier\", impl = \"condvar\", spin = \"10us\" }} }}\n{prog}"));
    assert!(e.contains("objects.b.impl") && e.contains("no spin budget"), "{e}");
    let e = spec_error("objects = { m = { kind = \"mutex\", impl = \"condvar\" } }\nprogram = [ { lock = \"m\" }, { unlock = \"m\" } ]");
    assert!(e.contains("objects.m.impl") && e.contains("only blocking barriers, queues and kernel spinlocks"), "{e}");
    let e = spec_error(
        "objects = { k = { kind = \"kspinlock\", impl = \"ticket\" } }\nprogram = [ { kspin_lock = \"k\" }, { kspin_unlock = \"k\" } ]",
    );
    assert!(e.contains("objects.k.impl") && e.contains("\"spinlock\" or \"bit\"") && e.contains("'ticket'"), "{e}");
    let e = spec_error("objects = { q = { kind = \"queue\", impl = \"tcp\" } }\nprogram = [ { push = \"q\" } ]");
    assert!(e.contains("objects.q.impl") && e.contains("\"pthread\" or \"socket\"") && e.contains("'tcp'"), "{e}");
    // Both kinds of barrier let every thread through every episode, natively and in a VM.
    for imp in ["futex", "condvar"] {
        let w = format!(
            "objects = {{ b = {{ kind = \"barrier\", impl = \"{imp}\" }} }}\n\
             program = [ {{ repeat = {{ times = 50, body = [ {{ compute = {{ uniform = [\"10us\", \"40us\"] }} }}, {{ barrier = \"b\" }} ] }} }} ]"
        );
        for r in run_inline("scenarios = [\"native\", \"UC\"]\nvcpus = [4]", &w, &[]) {
            assert!(r.t_native_s > 50.0 * 25e-6, "{imp}: each episode waits for the slowest of 4 draws of 10-40 us: {}", r.t_native_s);
        }
    }
}
