//! VM settings (`[vm]`): APIC virtualization, pinning, weights, pause-loop exiting.

use serde::{Deserialize, Serialize};

/// Pause-loop exiting settings. This issue implements a fixed window with a simple handler
/// (exit, then yield the core if another task is runnable on it); KVM's adaptive window and
/// directed yield are separate policies.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PleSpec {
    /// PLE on (`ple_gap` > 0) or off.
    pub enabled: bool,
    /// The window in TSC cycles (`kvm_intel.ple_window`, default 4096; ref §2.2).
    pub window_cycles: u64,
}

impl Default for PleSpec {
    fn default() -> Self {
        PleSpec { enabled: true, window_cycles: 4096 }
    }
}

/// The `[vm]` table (applies to every VM of a run).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct VmSpec {
    /// APICv (posted interrupts, virtualized EOI). Default on (`enable_apicv`=Y, ref §4.4).
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
    /// Per-vCPU weights (default 1024 each).
    pub vcpu_weights: Option<Vec<u32>>,
    /// Pause-loop exiting.
    pub ple: PleSpec,
}

impl Default for VmSpec {
    fn default() -> Self {
        VmSpec { apicv: true, ipiv: false, pin: true, weight: 1024, vcpu_weights: None, ple: PleSpec::default() }
    }
}

impl VmSpec {
    /// Checks values; returns (field, message).
    pub fn check(&self) -> Result<(), (String, String)> {
        if self.weight == 0 || self.weight > 262_144 {
            return Err(("weight".into(), format!("expected 1..=262144 (got {})", self.weight)));
        }
        if let Some(w) = &self.vcpu_weights {
            if let Some(i) = w.iter().position(|&x| x == 0 || x > 262_144) {
                return Err((format!("vcpu_weights[{i}]"), format!("expected 1..=262144 (got {})", w[i])));
            }
        }
        if self.ple.enabled && self.ple.window_cycles == 0 {
            return Err(("ple.window_cycles".into(), "expected a positive cycle count (or ple.enabled = false)".into()));
        }
        Ok(())
    }

    /// Host scheduler weight of vCPU `i`.
    pub fn vcpu_weight(&self, i: u32) -> u64 {
        let w = self.vcpu_weights.as_ref().and_then(|v| v.get(i as usize)).copied().unwrap_or(1024);
        (u64::from(w) * u64::from(self.weight) / 1024).max(2)
    }
}
