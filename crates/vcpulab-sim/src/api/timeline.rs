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

/// The timeline recorded up to a simulation's failure (a run limit or a deadlock).
#[derive(Clone, Debug)]
pub struct PartialTimeline {
    /// Trace Event Format JSON, as [`TimelineRun::json`].
    pub json: String,
    /// Events in it (metadata not counted).
    pub events: u64,
    /// Where the event cap stopped recording (ns of virtual time), if it did.
    pub truncated_at_ns: Option<u64>,
}

/// A failed timeline run: the cell's error and, when the simulation itself failed, the
/// timeline up to the failure (what led to a run limit is what a user wants to see).
#[derive(Clone, Debug)]
pub struct TimelineError {
    /// The error, as [`Plan::run_cell`] reports it.
    pub error: CellError,
    /// The timeline recorded until the simulation failed (None for a bad window, an
    /// interruption, or a failure of a baseline simulation).
    pub partial: Option<PartialTimeline>,
}

impl std::fmt::Display for TimelineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}
impl std::error::Error for TimelineError {}

impl From<CellError> for TimelineError {
    fn from(error: CellError) -> Self {
        TimelineError { error, partial: None }
    }
}

impl Plan {
    /// Runs cell `i` recording a timeline of its own scenario simulation (not of its
    /// baselines, which are simulated or reused as usual). Recording does not change the
    /// simulation: the result equals [`Plan::run_cell`]'s. Errors: a bad window (`to_ns` not
    /// after `from_ns`, or no event allowed), or a failed simulation (with the timeline up to
    /// the failure when the recorded simulation itself failed).
    pub fn run_cell_with_timeline(&mut self, i: usize, opts: TimelineOptions) -> Result<TimelineRun, TimelineError> {
        self.run_cell_with_timeline_checked(i, opts, &mut || false)
    }

    /// Like [`Plan::run_cell_with_timeline`], asking `check` every few thousand events whether to stop.
    pub fn run_cell_with_timeline_checked(
        &mut self,
        i: usize,
        opts: TimelineOptions,
        check: &mut dyn FnMut() -> bool,
    ) -> Result<TimelineRun, TimelineError> {
        opts.check().map_err(|m| CellError { message: format!("timeline: {m}"), interrupted: false })?;
        let cell = self.cells[i].clone();
        let layout = Layout::for_scenario(cell.scenario, cell.oc_vms);
        let cfg = self.run_config(&cell, layout);
        let key = jobs::job_key(&cfg, &cell.workload);
        let start = Instant::now();
        let (rec, tl) = simulate_run_with_timeline(&cfg, opts, check).map_err(|(e, tl)| TimelineError {
            error: cell_error(&cell, layout, e),
            partial: tl.map(|tl| Self::recorded(&tl, &cell, layout)),
        })?;
        let main = self.remember(key, rec, start.elapsed().as_secs_f64());
        let result = self.pair(&cell, &main, check)?;
        let PartialTimeline { json, events, truncated_at_ns } = Self::recorded(&tl, &cell, layout);
        Ok(TimelineRun { json, events, truncated_at_ns, result })
    }

    /// Timeline `tl` of `cell` as written out: its JSON, with the run's labels in its
    /// metadata, and its counts.
    fn recorded(tl: &crate::account::Timeline, cell: &super::Cell, layout: Layout) -> PartialTimeline {
        PartialTimeline { json: tl.to_json(Self::timeline_labels(cell, layout)), events: tl.events(), truncated_at_ns: tl.truncated_at() }
    }

    /// The run's labels in the timeline's metadata.
    fn timeline_labels(cell: &super::Cell, layout: Layout) -> Map<String, Value> {
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
        other
    }
}
