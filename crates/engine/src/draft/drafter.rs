//! The drafter interface and the cost model drafts are sized by.

use super::MAX_DRAFT;

/// Guesses the tokens that follow a context.
pub trait Drafter {
    /// Up to `max` tokens guessed to follow `context` (the whole conversation, ending with the
    /// token about to enter the KV cache), written into `out` (cleared first).
    fn draft(&mut self, context: &[u32], max: usize, out: &mut Vec<u32>);

    /// How the last draft fared: its first `accepted` tokens were kept; `drafted` were proposed
    /// (after any trimming).
    fn observe(&mut self, _drafted: usize, _accepted: usize) {}

    /// What verify passes cost now (the host measures how much of a pass is I/O).
    fn set_cost(&mut self, _cost: PassCost) {}
}

/// What a verify pass of `b` positions costs, in single-token decode steps: as measured
/// (`measured[b]`, 0 when not yet), else `1 + per_row · (b − 1 + groups − 1)`. Each position past
/// the first adds its dot products (the weights are shared), and each further group of `group`
/// positions ([`crate::quant::TOKEN_GROUP`]) costs about one position more, since the kernels
/// unpack every weight block once per group. The host measures passes as it decodes; the model
/// is what native SmolLM2-135M Q4_1 measures with every layer resident (a pass of 4 costs ≈1.9
/// steps, of 5 ≈2.5), and stays optimistic for sizes not yet tried, so they get tried. Layers
/// streaming through a small LRU make passes relatively cheaper: their reads do not grow with
/// the batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PassCost {
    pub per_row: f32,
    pub group: usize,
    pub measured: [f32; MAX_DRAFT + 2],
}

impl Default for PassCost {
    fn default() -> Self {
        PassCost {
            per_row: 0.3,
            group: crate::quant::TOKEN_GROUP,
            measured: [0.0; MAX_DRAFT + 2],
        }
    }
}

impl PassCost {
    /// Rows' worth of extra work in a pass of `b ≥ 1` positions.
    pub fn units(&self, b: usize) -> usize {
        let b = b.max(1);
        (b - 1) + (b.div_ceil(self.group.max(1)) - 1)
    }

    /// The cost of a pass of `b ≥ 1` positions.
    pub fn of(&self, b: usize) -> f32 {
        match self.measured.get(b) {
            Some(&c) if c > 0.0 => c,
            _ => 1.0 + self.per_row * self.units(b) as f32,
        }
    }
}

/// Running mean wall time of a forward pass by its number of positions (0: not measured): what
/// a verify pass costs where it runs (a host on this source and cache, or a chain of stations),
/// which sizes drafts ([`PassTimes::cost`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PassTimes {
    ms: [f64; MAX_DRAFT + 2],
}

impl Default for PassTimes {
    fn default() -> Self {
        PassTimes {
            ms: [0.0; MAX_DRAFT + 2],
        }
    }
}

impl PassTimes {
    /// A pass of `positions` took `ms`.
    pub fn record(&mut self, positions: usize, ms: f64) {
        if let Some(mean) = self.ms.get_mut(positions) {
            *mean = match *mean {
                0.0 => ms,
                m => m + 0.3 * (ms - m),
            };
        }
    }

    /// What verify passes cost as measured so far, relative to a one-position pass (the cost
    /// model's guess for sizes not timed yet).
    pub fn cost(&self) -> PassCost {
        let mut cost = PassCost::default();
        let one = self.ms[1];
        if one > 0.0 {
            for (c, &ms) in cost.measured.iter_mut().zip(&self.ms).skip(2) {
                *c = (ms / one) as f32;
            }
        }
        cost
    }
}
