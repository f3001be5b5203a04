//! Reading an options object (JSON, camelCase keys as in the JS API): each field checked once,
//! every error naming the field and the rule. The keys an object may hold are the ones its parser
//! reads: [`Fields::finish`] refuses any other, so a new option is one line where it is read, not
//! also an entry in a list.

use crate::draft::DraftError;
use crate::pipeline::PipelineError;
use serde_json::{Map, Value};
use std::cell::RefCell;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OptionsError {
    #[error("options must be a JSON object: {0}")]
    NotAnObject(String),
    #[error("unknown option '{0}'")]
    Unknown(String),
    #[error("{name} must be {rule}, got {got}")]
    Invalid {
        name: String,
        rule: String,
        got: String,
    },
    #[error("{0} does not apply with moa: MOA sets its own temperatures and candidates (moa.baseTemperature, moa.topK)")]
    MoaConflict(&'static str),
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    #[error(transparent)]
    Draft(#[from] DraftError),
}

/// A value as an error message shows it. JS sends NaN and ±Infinity (which JSON cannot hold)
/// as the strings "NaN", "Infinity", "-Infinity"; they are shown bare.
pub(crate) fn shown(v: &Value) -> String {
    match v {
        Value::String(s) if matches!(s.as_str(), "NaN" | "Infinity" | "-Infinity") => s.clone(),
        other => other.to_string(),
    }
}

/// Reads the fields of one JSON object, each checked once, with errors that name the field.
/// It remembers the keys asked for, so [`Fields::finish`] can refuse the others.
pub struct Fields<'a> {
    map: &'a Map<String, Value>,
    prefix: &'static str,
    read: RefCell<Vec<&'static str>>,
}

impl<'a> Fields<'a> {
    /// The fields of `v`, which must be an object; `prefix` names it in errors (`moa.`).
    pub fn new(v: &'a Value, prefix: &'static str) -> Result<Self, OptionsError> {
        let map = v
            .as_object()
            .ok_or_else(|| OptionsError::NotAnObject(shown(v)))?;
        Ok(Fields {
            map,
            prefix,
            read: RefCell::new(Vec::new()),
        })
    }

    /// Refuses the first key no parser asked for.
    pub fn finish(self) -> Result<(), OptionsError> {
        let read = self.read.into_inner();
        match self.map.keys().find(|k| !read.contains(&k.as_str())) {
            Some(k) => Err(OptionsError::Unknown(format!("{}{k}", self.prefix))),
            None => Ok(()),
        }
    }

    /// The error for field `name` holding `v`, which breaks `rule`.
    pub fn invalid(&self, name: &str, rule: impl Into<String>, v: &Value) -> OptionsError {
        OptionsError::Invalid {
            name: format!("{}{name}", self.prefix),
            rule: rule.into(),
            got: shown(v),
        }
    }

    /// The value of `name`; absent and null are the same.
    pub fn get(&self, name: &'static str) -> Option<&'a Value> {
        self.read.borrow_mut().push(name);
        self.map.get(name).filter(|v| !v.is_null())
    }

    /// A number that passes `ok`.
    pub fn number(
        &self,
        name: &'static str,
        rule: &'static str,
        ok: impl Fn(f64) -> bool,
    ) -> Result<Option<f64>, OptionsError> {
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        match v.as_f64() {
            Some(x) if ok(x) => Ok(Some(x)),
            _ => Err(self.invalid(name, rule, v)),
        }
    }

    /// A whole number ≥ `min`; a decimal string too when `strings` (JS BigInts arrive so).
    pub fn integer(
        &self,
        name: &'static str,
        rule: &'static str,
        min: u64,
        strings: bool,
    ) -> Result<Option<u64>, OptionsError> {
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        let n = match v {
            Value::Number(n) => n.as_u64().or_else(|| {
                n.as_f64()
                    .filter(|x| x.fract() == 0.0 && *x >= 0.0 && *x < u64::MAX as f64)
                    .map(|x| x as u64)
            }),
            Value::String(s) if strings => s.parse::<u64>().ok(),
            _ => None,
        };
        match n {
            Some(n) if n >= min => Ok(Some(n)),
            _ => Err(self.invalid(name, rule, v)),
        }
    }

    /// A whole number in `[min, max]` that a JS number holds exactly (at most 2^53), the rule
    /// worded from the bounds.
    pub fn integer_in(
        &self,
        name: &'static str,
        min: u64,
        max: u64,
    ) -> Result<Option<u64>, OptionsError> {
        const MAX_SAFE: f64 = 9_007_199_254_740_991.0;
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        match v.as_f64() {
            Some(x) if x.fract() == 0.0 && x >= min as f64 && x <= MAX_SAFE && x <= max as f64 => {
                Ok(Some(x as u64))
            }
            _ => {
                let rule = match max {
                    u64::MAX => format!("an integer >= {min}"),
                    _ => format!("an integer in [{min}, {max}]"),
                };
                Err(self.invalid(name, rule, v))
            }
        }
    }

    pub fn boolean(&self, name: &'static str) -> Result<Option<bool>, OptionsError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.invalid(name, "true or false", v)),
        }
    }
}

/// A count as a `usize` (one past what this platform holds means "all").
pub fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_no_parser_read_are_unknown_and_named() {
        let v = json!({ "a": 1, "b": null, "c": true });
        let f = Fields::new(&v, "x.").unwrap();
        assert_eq!(f.integer("a", "an integer", 0, false).unwrap(), Some(1));
        // Null is absent, but the key was asked for.
        assert_eq!(f.boolean("b").unwrap(), None);
        assert_eq!(f.finish(), Err(OptionsError::Unknown("x.c".into())));
        let f = Fields::new(&v, "").unwrap();
        for k in ["a", "b", "c"] {
            f.get(k);
        }
        assert_eq!(f.finish(), Ok(()));
        assert!(matches!(
            Fields::new(&json!([1]), ""),
            Err(OptionsError::NotAnObject(_))
        ));
    }

    #[test]
    fn bounded_integers_word_their_rule() {
        let v = json!({ "n": 17, "m": 1.5, "big": 1e300 });
        let f = Fields::new(&v, "").unwrap();
        let msg = |r: Result<Option<u64>, OptionsError>| r.unwrap_err().to_string();
        assert_eq!(
            msg(f.integer_in("n", 1, 16)),
            "n must be an integer in [1, 16], got 17"
        );
        assert_eq!(
            msg(f.integer_in("m", 1, u64::MAX)),
            "m must be an integer >= 1, got 1.5"
        );
        assert!(msg(f.integer_in("big", 1, u64::MAX)).starts_with("big must be an integer >= 1"));
        assert_eq!(f.integer_in("n", 0, 17).unwrap(), Some(17));
    }
}
