//! The package's pure helpers, usable without a model: MOA's `createMoaAgents` and
//! `deficitWeightedMerge`, COLTRANE's `coltraneFromResponseFormat`. JSON in, values out, every
//! argument checked here.

use crate::error::ErrorCode;
use coltrane::openai::preset_from_response_format;
use coltrane::{ColtraneError, Preset};
use engine::decode::{moa_from_value, OptionsError};
use moa::{agent_temperatures, merge_distributions, Merge, Merged, MoaError};
use serde_json::{json, Value};

#[derive(Debug, thiserror::Error)]
pub enum MoaApiError {
    #[error(transparent)]
    Options(#[from] OptionsError),
    #[error(transparent)]
    Moa(#[from] MoaError),
    #[error(transparent)]
    Coltrane(#[from] ColtraneError),
    #[error("{0}")]
    Argument(String),
}

impl MoaApiError {
    /// The code this failure carries across the JS boundary.
    pub fn code(&self) -> ErrorCode {
        match self {
            MoaApiError::Moa(MoaError::Distributions(_) | MoaError::NoCandidates)
            | MoaApiError::Coltrane(_)
            | MoaApiError::Argument(_) => ErrorCode::InvalidArgument,
            MoaApiError::Options(_) | MoaApiError::Moa(_) => ErrorCode::InvalidOption,
        }
    }
}

/// `coltraneFromResponseFormat(response_format)`: the `coltrane` options for OpenAI's
/// `response_format` (`null` for plain text). The schema itself is checked when generation
/// starts, with the other options.
pub fn response_format(rf_json: &str) -> Result<Value, MoaApiError> {
    let rf = parse(rf_json)?;
    Ok(match preset_from_response_format(&rf)? {
        None => Value::Null,
        Some(Preset::Json) => json!({ "preset": "json" }),
        Some(Preset::JsonSchema(schema)) => json!({ "preset": "json", "schema": schema }),
        Some(Preset::Balanced) => json!({ "preset": "balanced" }),
    })
}

/// `schemaProblem(schema)`: why COLTRANE cannot enforce a JSON Schema (the compile error, naming
/// the keyword and its path), or `None` when it can: what the agentic loop leaves a tool out for.
pub fn schema_problem(schema_json: &str) -> Option<String> {
    match serde_json::from_str::<Value>(schema_json) {
        Err(e) => Some(format!("not JSON: {e}")),
        Ok(v) => coltrane::compile_schema(&v).err().map(|e| e.to_string()),
    }
}

fn parse(json: &str) -> Result<Value, MoaApiError> {
    serde_json::from_str(json).map_err(|e| OptionsError::NotAnObject(e.to_string()).into())
}

/// `createMoaAgents({ k, baseTemperature, temperatureSpread, minTemperature })`: the agents'
/// temperatures (MOA's defaults for keys not given).
pub fn agents(options_json: &str) -> Result<Vec<f64>, MoaApiError> {
    let v = parse(options_json)?;
    if let Some(key) = v.as_object().and_then(|m| {
        m.keys().find(|k| {
            ![
                "k",
                "baseTemperature",
                "temperatureSpread",
                "minTemperature",
            ]
            .contains(&k.as_str())
        })
    }) {
        return Err(OptionsError::Unknown(key.clone()).into());
    }
    let cfg = moa_from_value(&v)?;
    Ok(agent_temperatures(
        cfg.k,
        cfg.base_temperature,
        cfg.temperature_spread,
        cfg.min_temperature,
    ))
}

/// A number as JS sends it: NaN and ±Infinity arrive as strings (JSON has no such numbers).
fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

/// `deficitWeightedMerge(dists, { strategy: 'deficit' | 'uniform', useKl })` as
/// `{ "dists": [[…]], "strategy": …, "useKl": … }`.
pub fn merge(request_json: &str) -> Result<Merged, MoaApiError> {
    let v = parse(request_json)?;
    let bad = |m: &str| MoaApiError::Argument(m.to_string());
    let map = v
        .as_object()
        .ok_or_else(|| bad("options must be an object"))?;
    if let Some(key) = map
        .keys()
        .find(|k| !["dists", "strategy", "useKl"].contains(&k.as_str()))
    {
        return Err(OptionsError::Unknown(key.clone()).into());
    }
    let dists_shape = "dists must be an array of arrays of numbers";
    let dists = map
        .get("dists")
        .and_then(Value::as_array)
        .ok_or_else(|| bad(dists_shape))?
        .iter()
        .map(|d| {
            d.as_array()
                .ok_or_else(|| bad(dists_shape))?
                .iter()
                .map(|p| number(p).ok_or_else(|| bad(dists_shape)))
                .collect::<Result<Vec<f64>, _>>()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let merge = match map.get("strategy") {
        None | Some(Value::Null) => Merge::DeficitWeighted,
        Some(Value::String(s)) if s == "deficit" => Merge::DeficitWeighted,
        Some(Value::String(s)) if s == "uniform" => Merge::Uniform,
        Some(other) => {
            return Err(bad(&format!(
                "strategy must be 'deficit' or 'uniform', got {other}"
            )))
        }
    };
    let use_kl = match map.get("useKl") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => return Err(bad(&format!("useKl must be true or false, got {other}"))),
    };
    Ok(merge_distributions(&dists, merge, use_kl)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_with_defaults_and_overrides() {
        assert_eq!(agents("{}").unwrap(), [0.5, 0.7, 0.9]);
        assert_eq!(
            agents(r#"{"temperatureSpread": 0.6}"#).unwrap(),
            [0.4, 0.7, 1.0]
        );
        assert_eq!(agents(r#"{"k": 1}"#).unwrap(), [0.7]);
        let err = |j: &str| agents(j).unwrap_err().to_string();
        assert!(err(r#"{"k": 0}"#).contains("moa.k must be an integer in [1, 32], got 0"));
        assert!(err(r#"{"merge": "vote"}"#).contains("unknown option 'merge'"));
        assert!(err("[]").contains("must be a JSON object"));
    }

    #[test]
    fn schema_problems_name_the_keyword() {
        assert_eq!(schema_problem(r#"{"type":"integer","minimum":1}"#), None);
        assert_eq!(
            schema_problem(r#"{"properties":{"a":{"type":"array","uniqueItems":true}}}"#)
                .as_deref(),
            Some("unsupported JSON Schema keyword \"uniqueItems\" at #/properties/a")
        );
        assert!(schema_problem("{").unwrap().starts_with("not JSON"));
    }

    #[test]
    fn response_formats() {
        assert_eq!(response_format(r#"{"type":"text"}"#).unwrap(), Value::Null);
        assert_eq!(
            response_format(r#"{"type":"json_object"}"#).unwrap(),
            json!({"preset": "json"})
        );
        assert_eq!(
            response_format(
                r#"{"type":"json_schema","json_schema":{"name":"p","schema":{"type":"integer"}}}"#
            )
            .unwrap(),
            json!({"preset": "json", "schema": {"type": "integer"}})
        );
        assert!(response_format(r#"{"type":"yaml"}"#)
            .unwrap_err()
            .to_string()
            .contains("invalid response_format"));
    }

    #[test]
    fn merge_vectors_and_errors() {
        let m = merge(r#"{"dists": [[1, 0], [1, 0], [0, 1]]}"#).unwrap();
        assert_eq!(m.weights, [0.25, 0.25, 0.5]);
        assert_eq!(m.merged, [0.5, 0.5]);
        assert_eq!(m.deficit, 2);
        let raced = merge(r#"{"dists": [[1, 0], ["NaN", 1], [0, 1]], "strategy": "uniform"}"#);
        assert_eq!(raced.unwrap().weights, [0.5, 0.0, 0.5]);
        assert!(merge(r#"{"dists": [[0.7, 0.2, 0.1], [0.2, 0.3, 0.5]], "useKl": true}"#).is_ok());
        let err = |j: &str| merge(j).unwrap_err().to_string();
        assert!(err(r#"{"dists": [[1, "a"]]}"#).contains("arrays of numbers"));
        assert!(err(r#"{"dists": 3}"#).contains("arrays of numbers"));
        assert!(err(r#"{"dists": [[1]], "strategy": "vote"}"#).contains("'deficit' or 'uniform'"));
        assert!(err(r#"{"dists": [[1]], "useKl": 1}"#).contains("useKl must be true or false"));
        assert!(err(r#"{"dists": [[1], [1, 2]]}"#).contains("same length"));
        assert!(err(r#"{"dists": [], "x": 1}"#).contains("unknown option 'x'"));
    }
}
