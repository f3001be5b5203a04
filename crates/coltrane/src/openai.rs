//! OpenAI's `response_format` mapped onto COLTRANE presets, in one place the Worker can call:
//! `{ "type": "text" }` → no structure, `{ "type": "json_object" }` → `json`,
//! `{ "type": "json_schema", "json_schema": { "name": …, "schema": {…}, "strict": … } }` →
//! `json_schema` with that schema (checked when the constraint is built).

use crate::config::{ColtraneError, Preset};
use serde_json::Value;

pub fn preset_from_response_format(rf: &Value) -> Result<Option<Preset>, ColtraneError> {
    let bad = |m: &str| Err(ColtraneError::ResponseFormat(m.to_string()));
    let Some(obj) = rf.as_object() else {
        return bad("it must be an object with a type");
    };
    match obj.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(Preset::Json)),
        Some("json_schema") => {
            let Some(js) = obj.get("json_schema").and_then(Value::as_object) else {
                return bad("type json_schema needs json_schema: { name, schema }");
            };
            match js.get("schema") {
                Some(schema @ (Value::Object(_) | Value::Bool(_))) => {
                    Ok(Some(Preset::JsonSchema(schema.clone())))
                }
                Some(_) => bad("json_schema.schema must be a JSON Schema object"),
                // OpenAI: no schema means any JSON object.
                None => Ok(Some(Preset::JsonSchema(
                    serde_json::json!({"type": "object"}),
                ))),
            }
        }
        Some(other) => Err(ColtraneError::ResponseFormat(format!(
            "unknown type {other:?} (text, json_object or json_schema)"
        ))),
        None => bad("it must have a string type"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_three_shapes() {
        assert_eq!(
            preset_from_response_format(&json!({"type": "text"})).unwrap(),
            None
        );
        assert_eq!(
            preset_from_response_format(&json!({"type": "json_object"})).unwrap(),
            Some(Preset::Json)
        );
        let s = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        assert_eq!(
            preset_from_response_format(&json!({"type": "json_schema", "json_schema": {"name": "x", "schema": s, "strict": true}}))
                .unwrap(),
            Some(Preset::JsonSchema(s))
        );
        for bad in [
            json!(3),
            json!({"type": "xml"}),
            json!({"type": "json_schema"}),
            json!({}),
            json!({"type": "json_schema", "json_schema": {"schema": 5}}),
        ] {
            assert!(preset_from_response_format(&bad).is_err(), "{bad}");
        }
    }
}
