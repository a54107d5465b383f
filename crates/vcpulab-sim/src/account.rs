//! Accounting: who spent each nanosecond of each core, on what, and the counters and metrics
//! derived from it.
//!
//! Every interval of every simulated core is closed into the [`Ledger`] under exactly one
//! [`Attr`] = (owner, layer, cause). All metrics (δη, ω, breakdowns) are computed from the
//! ledger and the counters; nothing is measured on the side.

pub mod attr;
pub mod histogram;
pub mod ledger;
pub mod metrics;
pub mod timeline;

pub use attr::{Attr, Cause, Layer, OwnerId, OwnerKind};
pub use histogram::{Log2Histogram, LogLinHistogram};
pub use ledger::Ledger;
pub use timeline::{Timeline, TimelineOptions};
