//! What a drafter may do: [`DraftConfig`], its limits and its CLI spelling.

/// How drafts are made and how long they may be.
#[derive(Debug, Clone, PartialEq)]
pub struct DraftConfig {
    /// The longest n-gram matched (shorter matches are tried when it finds none).
    pub ngram: usize,
    /// The most tokens one draft may hold.
    pub max_draft: usize,
    /// Size each draft from the acceptance measured so far (per match length), instead of
    /// always proposing `max_draft`.
    pub adaptive: bool,
    /// The margin rule: keep going past an accepted draft token only when the verifier's top-1
    /// minus top-2 logit margin γ satisfies `2τ ≤ γ`, τ bounding how far the verify pass's logits
    /// may be from step-by-step decoding's. `None` (the default) trusts the verify pass: its
    /// rows are bit-identical to step-by-step decoding's here, so τ = 0.
    pub margin: Option<f32>,
}

/// The most tokens a draft may hold (a verify pass is `1 + max_draft` positions).
pub const MAX_DRAFT: usize = 32;
/// The longest n-gram a lookup matches.
pub const MAX_NGRAM: usize = 8;

impl Default for DraftConfig {
    fn default() -> Self {
        DraftConfig {
            ngram: 3,
            max_draft: 8,
            adaptive: true,
            margin: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DraftError {
    #[error("draft {name} must be {rule}, got {got}")]
    Invalid {
        name: &'static str,
        rule: &'static str,
        got: String,
    },
    #[error("unknown drafter '{0}': the one available is 'lookup' (prompt lookup)")]
    UnknownDrafter(String),
    #[error("unknown draft setting '{0}': use n, k, adaptive or margin")]
    UnknownSetting(String),
}

impl DraftConfig {
    pub fn validate(&self) -> Result<(), DraftError> {
        let bad = |name, rule, got: String| Err(DraftError::Invalid { name, rule, got });
        if !(1..=MAX_NGRAM).contains(&self.ngram) {
            return bad("ngram", "an integer in [1, 8]", self.ngram.to_string());
        }
        if !(1..=MAX_DRAFT).contains(&self.max_draft) {
            return bad(
                "maxDraft",
                "an integer in [1, 32]",
                self.max_draft.to_string(),
            );
        }
        if let Some(t) = self.margin {
            if !(t.is_finite() && t >= 0.0) {
                return bad("margin", "a finite number >= 0", t.to_string());
            }
        }
        Ok(())
    }

    /// The CLI's spelling: `lookup`, or `lookup:n=3,k=8,adaptive=1,margin=0.5` (any subset).
    pub fn parse_spec(spec: &str) -> Result<DraftConfig, DraftError> {
        let (name, settings) = spec.split_once(':').unwrap_or((spec, ""));
        if name != "lookup" {
            return Err(DraftError::UnknownDrafter(name.to_string()));
        }
        let mut cfg = DraftConfig::default();
        for item in settings.split(',').filter(|s| !s.is_empty()) {
            let (key, value) = item.split_once('=').unwrap_or((item, ""));
            let invalid = |name, rule| DraftError::Invalid {
                name,
                rule,
                got: value.to_string(),
            };
            match key {
                "n" => cfg.ngram = value.parse().map_err(|_| invalid("ngram", "an integer"))?,
                "k" => {
                    cfg.max_draft = value
                        .parse()
                        .map_err(|_| invalid("maxDraft", "an integer"))?
                }
                "adaptive" => {
                    cfg.adaptive = match value {
                        "1" | "true" => true,
                        "0" | "false" => false,
                        _ => return Err(invalid("adaptive", "1 or 0")),
                    }
                }
                "margin" => {
                    cfg.margin = Some(value.parse().map_err(|_| invalid("margin", "a number"))?)
                }
                other => return Err(DraftError::UnknownSetting(other.to_string())),
            }
        }
        cfg.validate()?;
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_bad_ones_are_named() {
        assert_eq!(
            DraftConfig::parse_spec("lookup").unwrap(),
            DraftConfig::default()
        );
        let c = DraftConfig::parse_spec("lookup:n=2,k=5,adaptive=0,margin=0.25").unwrap();
        assert_eq!(
            c,
            DraftConfig {
                ngram: 2,
                max_draft: 5,
                adaptive: false,
                margin: Some(0.25)
            }
        );
        for (spec, needle) in [
            ("model", "unknown drafter"),
            ("lookup:x=1", "unknown draft setting"),
            ("lookup:k=0", "maxDraft"),
            ("lookup:k=33", "maxDraft"),
            ("lookup:n=9", "ngram"),
            ("lookup:n=a", "ngram"),
            ("lookup:adaptive=yes", "adaptive"),
            ("lookup:margin=-1", "margin"),
            ("lookup:margin=inf", "margin"),
        ] {
            let e = DraftConfig::parse_spec(spec).unwrap_err().to_string();
            assert!(e.contains(needle), "{spec}: {e}");
        }
    }
}
