//! The discrete-event engine: integer virtual time, a totally ordered event queue,
//! seeded per-entity random streams and run limits.
//!
//! Guarantees (see `docs/semantics.md`): time is a `u64` count of nanoseconds and never
//! goes backwards; events scheduled for the same instant come out in the order they were
//! scheduled (first in, first out); every random number comes from a stream derived from the
//! run seed and the identity of the entity that draws it.

pub mod queue;
pub mod rng;
pub mod time;

pub use queue::{EventQueue, TimerHandle};
pub use rng::{stream_seed, Stream};
pub use time::SimTime;
