//! One cell with a timeline of its own simulation (`vcpulab run --timeline`, docs/timeline.md).

use std::time::Instant;

use serde_json::{json, Map, Value};

use super::{cell_error, jobs, CellError, Plan, ScenarioResult};
use crate::account::TimelineOptions;
use crate::scenario::{simulate_run_with_timeline, Layout};

/// A cell's result and the timeline of its scenario simulation.
#[derive(Clone, Debug)]
pub struct TimelineRun {
    /// The cell's result, identical to [`Plan::run_cell`]'s.
    pub result: ScenarioResult,
    /// The timeline: Trace Event Format JSON (opens in ui.perfetto.dev).
    pub json: String,
    /// Events in it (metadata not counted).
    pub events: u64,
    /// Where the event cap stopped recording (ns of virtual time), if it did.
    pub truncated_at_ns: Option<u64>,
}

impl Plan {
    /// Runs cell `i` recording a timeline of its own scenario simulation (not of its
    /// baselines, which are simulated or reused as usual). Recording does not change the
    /// simulation: the result equals [`Plan::run_cell`]'s. Errors: a bad window (`to_ns` not
    /// after `from_ns`, or no event allowed), or a failed simulation.
    pub fn run_cell_with_timeline(&mut self, i: usize, opts: TimelineOptions) -> Result<TimelineRun, CellError> {
        self.run_cell_with_timeline_checked(i, opts, &mut || false)
    }

    /// Like [`Plan::run_cell_with_timeline`], asking `check` every few thousand events whether to stop.
    pub fn run_cell_with_timeline_checked(
        &mut self,
        i: usize,
        opts: TimelineOptions,
        check: &mut dyn FnMut() -> bool,
    ) -> Result<TimelineRun, CellError> {
        opts.check().map_err(|m| CellError { message: format!("timeline: {m}"), interrupted: false })?;
        let cell = self.cells[i].clone();
        let layout = Layout::for_scenario(cell.scenario, cell.oc_vms);
        let cfg = self.run_config(&cell, layout);
        let key = jobs::job_key(&cfg, &cell.workload);
        let start = Instant::now();
        let (rec, tl) = simulate_run_with_timeline(&cfg, opts, check).map_err(|e| cell_error(&cell, layout, e))?;
        let main = self.remember(key, rec, start.elapsed().as_secs_f64());
        let result = self.pair(&cell, &main, check)?;
        let mut other = Map::new();
        let fields: [(&str, Value); 9] = [
            ("vcpulab_version", json!(crate::VERSION)),
            ("build_id", json!(crate::build_id())),
            ("workload", json!(cell.workload)),
            ("scenario", json!(cell.scenario.name())),
            ("vcpus", json!(cell.vcpus)),
            ("threads", json!(cell.threads)),
            ("seed", json!(cell.seed)),
            ("variant", json!(cell.variant)),
            ("layout", json!(layout.describe())),
        ];
        for (k, v) in fields {
            other.insert(k.into(), v);
        }
        Ok(TimelineRun { json: tl.to_json(other), events: tl.events(), truncated_at_ns: tl.truncated_at(), result })
    }
}
