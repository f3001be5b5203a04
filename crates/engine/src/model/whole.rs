//! A whole model held in memory, run through every layer at once: what tests and the CLI's
//! `logits` use. Hosts stream layers through a [`Session`] instead.

use super::config::ConfigExt;
use super::error::EngineError;
use super::layout::{LayerWeights, ResidentWeights, TensorSource};
use super::session::Session;
use knot::ModelConfig;

/// A whole model held in memory: resident tensors plus every layer.
pub struct Model<'a> {
    pub config: ModelConfig,
    pub resident: ResidentWeights<'a>,
    pub layers: Vec<LayerWeights<'a>>,
}

impl<'a> Model<'a> {
    pub fn load(config: &ModelConfig, src: &impl TensorSource<'a>) -> Result<Self, EngineError> {
        config.validate()?;
        Ok(Model {
            config: config.clone(),
            resident: ResidentWeights::load(config, src)?,
            layers: (0..config.n_layers)
                .map(|l| LayerWeights::load(config, l, src))
                .collect::<Result<_, _>>()?,
        })
    }

    /// Runs `tokens` through every layer; returns the last position's logits (or all of them).
    pub fn forward<'s>(
        &self,
        session: &'s mut Session,
        tokens: &[u32],
        all_positions: bool,
    ) -> Result<&'s [f32], EngineError> {
        session.begin(tokens, &self.resident)?;
        for (l, layer) in self.layers.iter().enumerate() {
            session.run_layer(l, layer)?;
        }
        session.finish(&self.resident, all_positions)
    }
}
