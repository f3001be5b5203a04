//! `dependentRequired` and `dependentSchemas` (draft 7's `dependencies`, in either form): where
//! an object has a key, it also has the listed keys, or meets the schema. Each is a union the
//! value must fall in: every non-object, the objects without the key, and the objects with it
//! that meet the rest. Exact; the branches exclude each other, so the matcher's threads for them
//! part at the key.

use super::{escape_pointer, Compiler, MAX_PROPS};
use crate::schema::{ByteTrie, NodeId, Prop, SchemaError, Shape};
use serde_json::{Map, Value};

impl<'a> Compiler<'a> {
    /// One union per dependency of `obj`, added to `parts`.
    pub(super) fn dependents(
        &mut self,
        path: &str,
        obj: &'a Map<String, Value>,
        parts: &mut Vec<NodeId>,
    ) -> Result<(), SchemaError> {
        for keyword in ["dependentRequired", "dependentSchemas", "dependencies"] {
            let Some(map) = obj.get(keyword) else {
                continue;
            };
            let map = map
                .as_object()
                .ok_or_else(|| Self::invalid(path, format!("{keyword} must be an object")))?;
            for (name, v) in map {
                let then = match v {
                    Value::Array(names) if keyword != "dependentSchemas" => {
                        self.requiring(path, keyword, names)?
                    }
                    v if keyword != "dependentRequired" => {
                        let at = format!("{path}/{keyword}/{}", escape_pointer(name));
                        self.compile_at(&at, v)?
                    }
                    _ => {
                        return Err(Self::invalid(
                            path,
                            format!("{keyword}: {name:?} must list key names"),
                        ))
                    }
                };
                let key = json_key(name);
                let mut alts = self.non_objects()?;
                let never = self.add(Shape::Never)?;
                alts.push(self.object_with(&key, never, false)?);
                let any = self.add(Shape::Any)?;
                let present = self.object_with(&key, any, true)?;
                alts.push(self.intersect(present, then, path)?);
                parts.push(self.add(Shape::Union(alts))?);
            }
        }
        Ok(())
    }

    /// Objects with every key in `names`, any values, any other keys.
    fn requiring(
        &mut self,
        path: &str,
        keyword: &str,
        names: &[Value],
    ) -> Result<NodeId, SchemaError> {
        let mut props: Vec<Prop> = Vec::new();
        for n in names {
            let n = n
                .as_str()
                .ok_or_else(|| Self::invalid(path, format!("{keyword} lists key names")))?;
            let key = json_key(n);
            if props.iter().any(|p| p.key == key) {
                continue;
            }
            if props.len() >= MAX_PROPS {
                return Err(SchemaError::TooLarge(format!(
                    "{path}: {keyword} lists more than {MAX_PROPS} keys"
                )));
            }
            let node = self.add(Shape::Any)?;
            props.push(Prop { key, node });
        }
        let required = match props.len() {
            64 => u64::MAX,
            n => (1u64 << n) - 1,
        };
        let additional = Some(self.add(Shape::Any)?);
        let keys = ByteTrie::new(props.iter().map(|p| p.key.as_slice()));
        self.add(Shape::Object {
            props,
            required,
            additional,
            keys,
            min_props: 0,
            max_props: u32::MAX,
        })
    }
}

/// A key as it appears between the quotes of compact JSON.
pub(super) fn json_key(name: &str) -> Vec<u8> {
    let quoted = serde_json::to_vec(&Value::String(name.to_string())).unwrap_or_default();
    quoted[1..quoted.len().saturating_sub(1).max(1)].to_vec()
}
