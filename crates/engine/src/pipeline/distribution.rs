//! What a picker hands the draw: the tokens a step can produce and their weights.

use super::error::PipelineError;
use crate::sampler::Pcg32;

/// The tokens a pick can draw and their weights, in the order a draw walks them.
#[derive(Debug, Clone, Default)]
pub struct Distribution {
    entries: Vec<(u32, f32)>,
    /// One token, chosen without randomness (greedy): drawing it uses no random number.
    certain: bool,
}

impl Distribution {
    /// A single token picked without randomness.
    pub fn set_certain(&mut self, id: u32) {
        self.entries.clear();
        self.entries.push((id, 1.0));
        self.certain = true;
    }

    /// Weighted entries to fill (weights need not sum to 1).
    pub fn weighted(&mut self) -> &mut Vec<(u32, f32)> {
        self.certain = false;
        &mut self.entries
    }

    pub fn entries(&self) -> &[(u32, f32)] {
        &self.entries
    }

    /// Tokens with a nonzero chance.
    pub fn candidates(&self) -> usize {
        self.entries.iter().filter(|e| e.1 > 0.0).count()
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
}
