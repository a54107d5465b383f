//! The physical machine: topology (sockets → NUMA nodes → cores → hardware threads) and the
//! cost table every mechanism draws its latencies from.

pub mod costs;
pub mod memory;
pub mod topology;

pub use costs::Costs;
pub use memory::MemorySpec;
pub use topology::{MachineSpec, Placement, Topology};
