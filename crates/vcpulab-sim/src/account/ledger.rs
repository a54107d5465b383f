//! The time ledger: nanoseconds per (owner, layer, cause), and per (core, layer, cause).

use super::attr::{Attr, Cause, Layer, OwnerId};

const SLOTS: usize = 3 * Cause::COUNT;

/// Attributed time. Both views are filled by every [`Ledger::add`], so per-owner and per-core
/// totals always agree.
#[derive(Clone, Debug)]
pub struct Ledger {
    by_owner: Vec<[u64; SLOTS]>,
    by_core: Vec<[u64; SLOTS]>,
}

impl Ledger {
    /// A ledger for `owners` owners and `cores` cores.
    pub fn new(owners: usize, cores: usize) -> Self {
        Ledger { by_owner: vec![[0; SLOTS]; owners], by_core: vec![[0; SLOTS]; cores] }
    }

    /// Charges `ns` nanoseconds of `core` to `attr`.
    #[inline]
    pub fn add(&mut self, core: usize, attr: Attr, ns: u64) {
        let s = attr.slot();
        self.by_owner[attr.owner as usize][s] += ns;
        self.by_core[core][s] += ns;
    }

    /// Time of `owner` in `layer` on `cause`.
    pub fn get(&self, owner: OwnerId, layer: Layer, cause: Cause) -> u64 {
        self.by_owner[owner as usize][Attr { owner, layer, cause }.slot()]
    }

    /// Every non-zero entry as (owner, layer, cause, ns), in a fixed order.
    pub fn entries(&self) -> impl Iterator<Item = (OwnerId, Layer, Cause, u64)> + '_ {
        self.by_owner.iter().enumerate().flat_map(|(o, row)| {
            row.iter()
                .enumerate()
                .filter(|(_, &ns)| ns > 0)
                .map(move |(s, &ns)| (o as OwnerId, Layer::ALL[s / Cause::COUNT], Cause::from_index(s % Cause::COUNT), ns))
        })
    }

    /// Total of one owner, optionally only busy causes.
    pub fn owner_total(&self, owner: OwnerId, busy_only: bool) -> u64 {
        Self::row_total(&self.by_owner[owner as usize], busy_only)
    }

    /// Total of one owner in one layer (busy causes only).
    pub fn owner_layer_busy(&self, owner: OwnerId, layer: Layer) -> u64 {
        let row = &self.by_owner[owner as usize];
        (0..Cause::COUNT).filter(|&c| Cause::from_index(c).is_busy()).map(|c| row[layer as usize * Cause::COUNT + c]).sum()
    }

    /// Total of one core, optionally only busy causes.
    pub fn core_total(&self, core: usize, busy_only: bool) -> u64 {
        Self::row_total(&self.by_core[core], busy_only)
    }

    /// Sum of everything attributed.
    pub fn grand_total(&self) -> u64 {
        self.by_owner.iter().map(|r| r.iter().sum::<u64>()).sum()
    }

    /// Number of owners.
    pub fn owners(&self) -> usize {
        self.by_owner.len()
    }

    fn row_total(row: &[u64; SLOTS], busy_only: bool) -> u64 {
        row.iter().enumerate().filter(|(s, _)| !busy_only || Cause::from_index(s % Cause::COUNT).is_busy()).map(|(_, &ns)| ns).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_agree() {
        let mut l = Ledger::new(2, 2);
        l.add(0, Attr { owner: 1, layer: Layer::User, cause: Cause::Compute }, 10);
        l.add(1, Attr { owner: 0, layer: Layer::Host, cause: Cause::Idle }, 5);
        assert_eq!(l.grand_total(), 15);
        assert_eq!(l.core_total(0, false) + l.core_total(1, false), 15);
        assert_eq!(l.owner_total(0, true), 0);
        assert_eq!(l.get(1, Layer::User, Cause::Compute), 10);
        assert_eq!(l.entries().count(), 2);
    }
}
