//! Tensor naming (GGUF names are kept in knot files).

/// The per-block tensors every supported architecture has, in the order the writer lays them
/// out inside a layer. Architectures may add more (q/k norms, biases, gemma sandwich norms).
pub const CANONICAL_LAYER_TENSORS: [&str; 9] = [
    "attn_norm",
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_output",
    "ffn_norm",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
];

pub const TOKEN_EMBD: &str = "token_embd.weight";
pub const OUTPUT_NORM: &str = "output_norm.weight";
pub const OUTPUT: &str = "output.weight";

/// `blk.{layer}.{name}.weight`
pub fn layer_tensor_name(layer: usize, name: &str) -> String {
    format!("blk.{layer}.{name}.weight")
}

/// The layer index of a `blk.N.*` tensor, `None` for resident tensors.
/// A `blk.` prefix with a malformed index is treated as resident so it is still covered
/// by validation (it then has to fit the resident span).
pub fn layer_of(name: &str) -> Option<usize> {
    let rest = name.strip_prefix("blk.")?;
    let (index, _) = rest.split_once('.')?;
    if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    index.parse().ok()
}

/// Sort key giving a stable, readable order: canonical tensors in their fixed order first,
/// then anything else by name.
pub(crate) fn order_key(name: &str) -> (usize, &str) {
    const RESIDENT: [&str; 3] = [TOKEN_EMBD, OUTPUT_NORM, OUTPUT];
    if let Some(i) = RESIDENT.iter().position(|r| *r == name) {
        return (i, name);
    }
    if let Some(rest) = name
        .strip_prefix("blk.")
        .and_then(|r| r.split_once('.'))
        .map(|(_, r)| r)
    {
        if let Some(i) = CANONICAL_LAYER_TENSORS
            .iter()
            .position(|c| rest.strip_suffix(".weight") == Some(*c))
        {
            return (i, name);
        }
    }
    (usize::MAX, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_index_parsing() {
        assert_eq!(layer_of("blk.0.attn_q.weight"), Some(0));
        assert_eq!(layer_of("blk.29.ffn_down.weight"), Some(29));
        assert_eq!(layer_of("token_embd.weight"), None);
        assert_eq!(layer_of("blk.x.attn_q.weight"), None);
        assert_eq!(layer_of("blk.+1.attn_q.weight"), None);
        assert_eq!(layer_of("blk.99999999999999999999999.a"), None);
        assert_eq!(layer_tensor_name(3, "attn_k"), "blk.3.attn_k.weight");
    }

    #[test]
    fn canonical_tensors_sort_first() {
        let mut names = vec![
            "blk.0.ffn_down.weight",
            "blk.0.attn_q_norm.weight",
            "blk.0.attn_norm.weight",
            "blk.0.attn_q.bias",
        ];
        names.sort_by_key(|n| order_key(n));
        assert_eq!(
            names,
            [
                "blk.0.attn_norm.weight",
                "blk.0.ffn_down.weight",
                "blk.0.attn_q.bias",
                "blk.0.attn_q_norm.weight"
            ]
        );
    }
}
