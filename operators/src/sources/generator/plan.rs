//! The checked settings of a `generator` vertex and its prepared key sampler
//! ([`GeneratorPlan`]), shared by its subtasks.

use super::config::GeneratorConfig;
use super::keys::KeySampler;
use crate::error::FieldError;

/// The checked settings and prepared key sampler, shared by all subtasks of a vertex.
#[derive(Debug)]
pub struct GeneratorPlan {
    pub(super) config: GeneratorConfig,
    pub(super) keys: KeySampler,
}

impl GeneratorPlan {
    /// Checks `config` and prepares the key distribution.
    pub fn new(config: GeneratorConfig) -> Result<Self, FieldError> {
        config.validate()?;
        let keys = KeySampler::new(&config).map_err(|m| FieldError::new("", m))?;
        Ok(GeneratorPlan { config, keys })
    }

    /// The settings.
    pub fn config(&self) -> &GeneratorConfig {
        &self.config
    }
}
