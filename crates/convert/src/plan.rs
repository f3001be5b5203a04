//! [`ConversionPlan`]: a knot file as its header bytes and an ordered list of [`Piece`]s, laid
//! out by `knot::KnotBuilder` before any tensor byte is read.

use knot::{DType, KnotBuilder, KnotPlan, WriteError};

use crate::gguf::GgufFile;
use crate::{
    gguf_model_source, requant, ConvertError, ConvertOptions, ModelSource, SourceRange,
    SourceTensor, Summary,
};

/// One stretch of the knot payload, in file order.
#[derive(Debug, Clone)]
pub enum Piece {
    /// Bytes to write as they are: the tokenizer blob, zero padding before a tensor.
    Literal(Vec<u8>),
    /// A tensor: its source bytes, through [`ConversionPlan::transform`].
    Tensor(TensorPiece),
}

#[derive(Debug, Clone)]
pub struct TensorPiece {
    pub name: String,
    /// Index into [`ConversionPlan::sources`].
    pub source: usize,
    /// Where its bytes are in the source file (GGUF); `None` for a driver-fetched source (HF).
    pub range: Option<SourceRange>,
    pub from: DType,
    pub to: DType,
    /// Bytes it takes in the knot file.
    pub len: u64,
}

impl TensorPiece {
    /// Whether its bytes change on the way (a requantization).
    pub fn transformed(&self) -> bool {
        self.from != self.to
    }
}

/// The whole output: [`header`](Self::header), then every piece in order, is the knot file.
#[derive(Debug, Clone)]
pub struct ConversionPlan {
    knot: KnotPlan,
    pieces: Vec<Piece>,
    sources: Vec<SourceTensor>,
}

impl ConversionPlan {
    /// Plans the conversion of a parsed GGUF; `fallback_name` names the model when the file
    /// has no `general.name` (the CLI passes the input's file stem).
    pub fn from_gguf(
        g: &GgufFile,
        opts: &ConvertOptions,
        fallback_name: &str,
    ) -> Result<ConversionPlan, ConvertError> {
        ConversionPlan::new(gguf_model_source(g, fallback_name)?, opts)
    }

    /// Chooses output dtypes and lays the file out.
    pub fn new(source: ModelSource, opts: &ConvertOptions) -> Result<ConversionPlan, ConvertError> {
        // The engine's bounds (layer count, sizes, finite floats) before anything is planned or
        // allocated from the source's numbers: a file the engine would refuse is not written.
        if let Err(e) = engine::model::ConfigExt::validate(&source.config) {
            return Err(ConvertError::InvalidConfig(match e {
                engine::EngineError::BadConfig(m) => m,
                other => other.to_string(),
            }));
        }
        let mut builder = KnotBuilder::new(
            opts.name.clone().unwrap_or(source.name),
            source.architecture,
            source.config,
            source.tokenizer,
        );
        builder.chat_template = source.chat_template;
        let by_name: std::collections::HashMap<&str, usize> = source
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.as_str(), i))
            .collect();
        for t in &source.tensors {
            builder.add_tensor(
                t.name.clone(),
                requant::output_dtype(t, opts.dtype),
                t.shape.clone(),
            );
        }
        let knot = builder.plan()?;

        let mut pieces = Vec::with_capacity(2 * knot.tensors().len() + 1);
        pieces.push(Piece::Literal(knot.tokenizer_blob().to_vec()));
        let mut pos = knot.tokenizer_blob().len() as u64;
        for entry in knot.tensors() {
            // The plan was built from `source.tensors`, so every entry has a source, and its
            // dtype is one `requant::output_dtype` chose.
            let index = by_name[entry.name.as_str()];
            let src = &source.tensors[index];
            let to = DType::from_name(&entry.dtype).expect("plan dtypes are valid");
            // The plan places each tensor at or after the previous one's end, less than one
            // alignment further.
            let pad = entry.offset - pos;
            if pad > 0 {
                pieces.push(Piece::Literal(vec![0; pad as usize]));
            }
            pieces.push(Piece::Tensor(TensorPiece {
                name: entry.name.clone(),
                source: index,
                range: src.range,
                from: src.dtype,
                to,
                len: entry.size,
            }));
            pos = entry.offset + entry.size;
        }
        Ok(ConversionPlan {
            knot,
            pieces,
            sources: source.tensors,
        })
    }

    /// Fixed header, metadata JSON, its padding and the codec byte: everything before the
    /// pieces.
    pub fn header(&self) -> &[u8] {
        self.knot.prefix()
    }

    /// The payload, in file order.
    pub fn pieces(&self) -> &[Piece] {
        &self.pieces
    }

    /// The source tensors, as [`TensorPiece::source`] indexes them.
    pub fn sources(&self) -> &[SourceTensor] {
        &self.sources
    }

    pub fn file_len(&self) -> u64 {
        self.knot.file_len()
    }

    /// Bytes of tensor data in the output (what a progress bar counts).
    pub fn tensor_bytes(&self) -> u64 {
        self.knot.tensors().iter().map(|t| t.size).sum()
    }

    /// The largest source tensor in bytes: with the header, the most a driver holds at once.
    pub fn largest_source_tensor(&self) -> u64 {
        self.pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Tensor(t) => Some(t.range.map_or(t.len, |r| r.len).max(t.len)),
                Piece::Literal(_) => None,
            })
            .max()
            .unwrap_or(0)
    }

    /// Piece `index`'s output bytes from its source bytes: unchanged, or re-encoded in its
    /// output dtype. Refuses bytes of the wrong length and an index that is not a tensor.
    pub fn transform(&self, index: usize, bytes: Vec<u8>) -> Result<Vec<u8>, ConvertError> {
        let Some(Piece::Tensor(t)) = self.pieces.get(index) else {
            return Err(ConvertError::NotATensor(index));
        };
        let out = if t.transformed() {
            requant::convert(&self.sources[t.source], &bytes, t.to)?
        } else {
            bytes
        };
        if out.len() as u64 != t.len {
            return Err(ConvertError::Write(WriteError::WrongSize {
                tensor: t.name.clone(),
                expected: t.len,
                actual: out.len() as u64,
            }));
        }
        Ok(out)
    }

    pub fn summary(&self) -> Summary {
        let meta = &self.knot.meta;
        Summary {
            name: meta.name.clone(),
            architecture: meta.architecture.clone(),
            n_layers: meta.layers.len(),
            n_tensors: meta.tensors.len(),
            converted_tensors: self
                .pieces
                .iter()
                .filter(|p| matches!(p, Piece::Tensor(t) if t.transformed()))
                .count(),
            payload_offset: self.knot.payload_offset(),
            file_len: self.knot.file_len(),
        }
    }
}
