//! What a picker hands the draw: the tokens a step can produce and their weights.

use super::error::PipelineError;
use super::weights::draw_point;
use crate::sampler::Pcg32;

/// The tokens a pick can draw and their weights, in the order a draw walks them.
#[derive(Debug, Clone, Default)]
pub struct Distribution {
    entries: Vec<(u32, f32)>,
    /// The entries' weights as integers ([`super::weights`]), when the picker made them so: a
    /// draw then walks these, and `beyond` weighs what comes after the entries (tokens a pick
    /// from part of the logits does not know; 0 otherwise).
    exact: Vec<u128>,
    beyond: u128,
    /// How many tokens `beyond` weighs (each more than nothing).
    beyond_count: usize,
    /// One token, chosen without randomness (greedy): drawing it uses no random number.
    certain: bool,
}

impl Distribution {
    /// A single token picked without randomness.
    pub fn set_certain(&mut self, id: u32) {
        self.entries.clear();
        self.entries.push((id, 1.0));
        self.exact.clear();
        self.certain = true;
    }

    /// Weighted entries to fill (weights need not sum to 1).
    pub fn weighted(&mut self) -> &mut Vec<(u32, f32)> {
        self.certain = false;
        self.exact.clear();
        &mut self.entries
    }

    /// Entries with integer weights, in the order a draw walks them, and the weight of what
    /// follows them unknown (`beyond`).
    pub fn set_exact(
        &mut self,
        entries: impl Iterator<Item = (u32, u128)>,
        beyond: u128,
        beyond_count: usize,
    ) {
        self.certain = false;
        self.entries.clear();
        self.exact.clear();
        for (id, w) in entries {
            self.entries.push((id, w as f32));
            self.exact.push(w);
        }
        (self.beyond, self.beyond_count) = (beyond, beyond_count);
    }

    pub fn entries(&self) -> &[(u32, f32)] {
        &self.entries
    }

    /// Tokens with a nonzero chance.
    pub fn candidates(&self) -> usize {
        let beyond = match self.exact.is_empty() {
            true => 0,
            false => self.beyond_count,
        };
        self.entries.iter().filter(|e| e.1 > 0.0).count() + beyond
    }

    /// Normalized probability of `id` (0 if it cannot be drawn).
    pub fn probability(&self, id: u32) -> f32 {
        let total: f32 = self.entries.iter().map(|e| e.1).sum();
        match self.entries.iter().find(|e| e.0 == id) {
            Some(e) if total > 0.0 => e.1 / total,
            _ => 0.0,
        }
    }

    /// Draws a token: one uniform number scaled by the total weight, walked down the entries.
    pub fn draw(&self, rng: &mut Pcg32) -> Result<u32, PipelineError> {
        self.draw_at(rng).map(|(id, _)| id)
    }

    /// [`Distribution::draw`], with where the walk stopped: the entry's place, or the number
    /// of entries when rounding left a sliver the last entry took.
    pub fn draw_at(&self, rng: &mut Pcg32) -> Result<(u32, usize), PipelineError> {
        let last = self.entries.last().ok_or(PipelineError::NoCandidates)?.0;
        if self.certain {
            return Ok((last, 0));
        }
        if !self.exact.is_empty() {
            return Ok(self.walk(draw_point(rng, self.total())));
        }
        let total: f32 = self.entries.iter().map(|e| e.1).sum();
        let mut r = rng.next_f32() * total;
        for (i, e) in self.entries.iter().enumerate() {
            r -= e.1;
            if r < 0.0 {
                return Ok((e.0, i));
            }
        }
        // Rounding left a sliver: the last entry takes it.
        Ok((last, self.entries.len()))
    }

    /// The integer weights' total, what lies beyond the entries included.
    pub fn total(&self) -> u128 {
        self.exact.iter().sum::<u128>() + self.beyond
    }

    /// The entry a draw at `point` (below [`Distribution::total`]) stops at, and its place: the
    /// number of entries when it stops beyond them.
    pub fn walk(&self, point: u128) -> (u32, usize) {
        let mut cum = 0u128;
        for (i, &w) in self.exact.iter().enumerate() {
            cum += w;
            if point < cum {
                return (self.entries[i].0, i);
            }
        }
        let last = self.entries.last().map_or(0, |e| e.0);
        (last, self.exact.len())
    }
}
