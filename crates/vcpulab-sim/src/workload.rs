//! Workloads: what the threads of an instance do, as data.
//!
//! A workload definition (TOML) has parameters, named synchronisation objects and a program
//! of operations that every thread runs; [`profile::parse_workload`] validates it into a
//! [`program::Workload`] whose program is compiled to flat instructions.

pub mod builtin;
pub mod dist;
pub mod heap;
pub mod profile;
pub mod program;
pub mod replay;
pub mod traced;

pub use dist::Dist;
pub use program::{Instr, ObjKind, Program, Share, Times, Workload};
