//! `WasmGgufConverter`: `knot-convert`'s sans-I/O GGUF → knot plan for JS. The JS driver
//! (`pkg/src/convert-gguf.js`) reads what [`wanted`](WasmGgufConverter::wanted) names and feeds
//! it until the GGUF's header, metadata and tensor table parse, then writes the header and the
//! pieces in order, passing the tensors that change through
//! [`transform`](WasmGgufConverter::transform). Tensors that keep their bytes never enter wasm.

use super::convert::{check_count, check_index, to_js};
use super::errors::{host_error, invalid_argument, js_error};
use crate::error::{ErrorCode, HostError};
use knot_convert::gguf::PrefixReader;
use knot_convert::{ConversionPlan, ConvertOptions, Piece, TargetDType};
use serde::{Deserialize, Serialize};
use wasm_bindgen::prelude::*;

/// `{ dtype?, name?, fallbackName? }` from JS.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Options {
    dtype: Option<String>,
    name: Option<String>,
    /// The model's name when the GGUF has no `general.name` (the CLI uses the file stem).
    fallback_name: Option<String>,
}

/// One piece as JS sees it; `start`/`len` are the source range of a tensor.
#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
enum PieceView<'a> {
    #[serde(rename_all = "camelCase")]
    Literal { len: u64 },
    #[serde(rename_all = "camelCase")]
    Tensor {
        name: &'a str,
        start: u64,
        len: u64,
        out_len: u64,
        transform: bool,
    },
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SummaryView {
    name: String,
    architecture: String,
    n_layers: usize,
    n_tensors: usize,
    converted_tensors: usize,
    file_len: u64,
    tensor_bytes: u64,
    largest_source_tensor: u64,
}

#[wasm_bindgen]
pub struct WasmGgufConverter {
    opts: ConvertOptions,
    fallback_name: String,
    reader: PrefixReader,
    plan: Option<ConversionPlan>,
}

fn convert_error(e: impl Into<knot_convert::ConvertError>) -> JsValue {
    host_error(HostError::Convert(e.into()))
}

#[wasm_bindgen]
impl WasmGgufConverter {
    /// A converter for a GGUF of `file_len` bytes; `options_json` is `{ dtype?, name?,
    /// fallbackName? }`.
    #[wasm_bindgen(constructor)]
    pub fn new(file_len: f64, options_json: &str) -> Result<WasmGgufConverter, JsValue> {
        let file_len = check_count(file_len, "the GGUF's size")?;
        let o: Options = serde_json::from_str(options_json)
            .map_err(|e| js_error(ErrorCode::InvalidOption, format!("convert options: {e}")))?;
        let dtype = match o.dtype.as_deref() {
            None => TargetDType::Keep,
            Some(d) => d.parse::<TargetDType>().map_err(|e| {
                let err = js_error(ErrorCode::InvalidOption, format!("dtype: {e}"));
                let _ = js_sys::Reflect::set(&err, &"param".into(), &"dtype".into());
                err
            })?,
        };
        Ok(WasmGgufConverter {
            opts: ConvertOptions {
                dtype,
                name: o.name,
            },
            fallback_name: o.fallback_name.unwrap_or_default(),
            reader: PrefixReader::new(file_len),
            plan: None,
        })
    }

    /// `[start, end)` of the GGUF to read and `feed` next, or undefined once the plan is ready.
    pub fn wanted(&self) -> Option<Vec<f64>> {
        if self.plan.is_some() {
            return None;
        }
        let (start, end) = self.reader.wanted();
        Some(vec![start as f64, end as f64])
    }

    /// Hands over the bytes `wanted` named; true once the plan is ready. An invalid GGUF (or one
    /// the converter does not support) is an `invalid_model` error.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<bool, JsValue> {
        if self.plan.is_some() {
            return Ok(true);
        }
        let Some(g) = self.reader.feed(bytes).map_err(convert_error)? else {
            return Ok(false);
        };
        let plan = ConversionPlan::from_gguf(&g, &self.opts, &self.fallback_name)
            .map_err(convert_error)?;
        self.plan = Some(plan);
        Ok(true)
    }

    fn plan(&self) -> Result<&ConversionPlan, JsValue> {
        self.plan
            .as_ref()
            .ok_or_else(|| invalid_argument("the GGUF's header has not been fed yet"))
    }

    /// The knot file's first bytes: fixed header, metadata, codec byte.
    pub fn header(&self) -> Result<Vec<u8>, JsValue> {
        Ok(self.plan()?.header().to_vec())
    }

    /// The pieces after the header, in order: `{ kind: 'literal', len }` or
    /// `{ kind: 'tensor', name, start, len, outLen, transform }`.
    pub fn pieces(&self) -> Result<JsValue, JsValue> {
        let plan = self.plan()?;
        let views: Vec<PieceView> = plan
            .pieces()
            .iter()
            .map(|p| match p {
                Piece::Literal(b) => PieceView::Literal {
                    len: b.len() as u64,
                },
                Piece::Tensor(t) => {
                    // GGUF tensors always have a range (`knot_convert::gguf_model_source`).
                    let r = t
                        .range
                        .unwrap_or(knot_convert::SourceRange { offset: 0, len: 0 });
                    PieceView::Tensor {
                        name: &t.name,
                        start: r.offset,
                        len: r.len,
                        out_len: t.len,
                        transform: t.transformed(),
                    }
                }
            })
            .collect();
        to_js(&views)
    }

    /// A literal piece's bytes.
    pub fn literal(&self, index: f64) -> Result<Vec<u8>, JsValue> {
        let index = check_index(index, "piece index")?;
        match self.plan()?.pieces().get(index) {
            Some(Piece::Literal(b)) => Ok(b.clone()),
            _ => Err(invalid_argument(format!(
                "piece {index} is not a literal piece"
            ))),
        }
    }

    /// A tensor piece's output bytes from its source bytes (requantized when it changes dtype).
    pub fn transform(&self, index: f64, bytes: Vec<u8>) -> Result<Vec<u8>, JsValue> {
        let index = check_index(index, "piece index")?;
        self.plan()?.transform(index, bytes).map_err(convert_error)
    }

    /// `{ name, architecture, nLayers, nTensors, convertedTensors, fileLen, tensorBytes,
    /// largestSourceTensor }`.
    pub fn summary(&self) -> Result<JsValue, JsValue> {
        let plan = self.plan()?;
        let s = plan.summary();
        to_js(&SummaryView {
            name: s.name,
            architecture: s.architecture,
            n_layers: s.n_layers,
            n_tensors: s.n_tensors,
            converted_tensors: s.converted_tensors,
            file_len: s.file_len,
            tensor_bytes: plan.tensor_bytes(),
            largest_source_tensor: plan.largest_source_tensor(),
        })
    }
}
