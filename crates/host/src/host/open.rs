//! Opening a knot file: one read for the fixed header, one for the metadata, one for the
//! tokenizer and resident tensors (two if they are not adjacent); layers come later. With a
//! memory budget, the plan is checked right after the metadata, before any tensor is read.

use super::layers::{LayerStore, Resident};
use crate::cache::LayerCache;
use crate::error::HostError;
use crate::index::{fits_in_memory, read_index, MAX_TOKENIZER_BYTES};
use crate::memory::{self, MemoryPlan, PlanInput};
use crate::options::{HostOptions, SequenceCount, AUTO_SEQUENCES, MAX_AUTO_SEQUENCES};
use crate::reader::Reader;
use crate::source::ByteSource;
use engine::draft::MAX_DRAFT;
use engine::model::ConfigExt;
use engine::tokenizer::Tokenizer;
use engine::{LayerLayout, ResidentLayout, Session};
use knot::Knot;
use std::ops::Range;
use std::rc::Rc;

/// What open read and built.
pub(crate) struct Opened {
    pub knot: Knot,
    pub tokenizer: Rc<Tokenizer>,
    pub resident: Resident,
    pub layers: LayerStore,
    /// A session with no KV of its own (an explicit prefill window's is swapped in to prefill
    /// it); its shape is every session's.
    pub scratch: Session,
    pub planned: Planned,
}

/// What one forward pass may hold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PassLimits {
    /// Positions per forward pass (prefill chunks, verify passes).
    pub max_batch: usize,
    /// The most draft tokens a verify pass checks (bounded under a memory budget: each row
    /// keeps a vocabulary of logits).
    pub max_verify: usize,
}

pub(crate) async fn open(
    source: Rc<dyn ByteSource>,
    opts: &HostOptions,
) -> Result<Opened, HostError> {
    let reader = Reader::new(source, opts.read_policy);
    let knot = read_index(&reader, &opts.read).await?;

    let (tok, res) = (knot.tokenizer_range(), knot.resident_range());
    fits_in_memory(|| "the tokenizer blob".into(), &tok, MAX_TOKENIZER_BYTES)?;
    fits_in_memory(|| "the resident tensors".into(), &res, u64::MAX)?;
    for l in 0..knot.n_layers() {
        // Spans are tight (the reader checks), so this is the layer's tensors' size.
        let range = knot.layer_range(l).ok_or(HostError::NoSuchLayer(l))?;
        fits_in_memory(|| format!("layer {l}"), &range, u64::MAX)?;
    }
    let config = knot.meta.config.clone();
    // Sizes from the file are bounded before anything is located or allocated from them.
    config.validate()?;
    let planned = plan_memory(&knot, opts)?;
    let max_context = planned.context;

    // Writers put the resident tensors right after the tokenizer blob (plus alignment
    // padding), so one read usually fetches both. The tokenizer is parsed from the front of
    // that buffer, then the tensors are moved down in place: no second copy of them, ever
    // (in wasm, memory taken once is never given back).
    let adjacent = res.start >= tok.end
        && res.start - tok.end < knot::TENSOR_ALIGNMENT
        && res.end - tok.start <= isize::MAX as u64;
    // A long span comes in pieces of `max_read_bytes` (see `Reader::read_span`).
    let read_span = |start: u64, end: u64| reader.read_span(start, end, opts.max_read_bytes);
    let (tokenizer, resident) = if adjacent {
        let mut both = read_span(tok.start, res.end).await?;
        let tokenizer = Tokenizer::from_data(&Knot::parse_tokenizer(
            &both[..(tok.end - tok.start) as usize],
        )?)?;
        both.drain(..(res.start - tok.start) as usize);
        (tokenizer, both)
    } else {
        let tok_bytes = read_span(tok.start, tok.end).await?;
        let tokenizer = Tokenizer::from_data(&Knot::parse_tokenizer(&tok_bytes)?)?;
        drop(tok_bytes);
        (tokenizer, read_span(res.start, res.end).await?)
    };

    // Locate and check every tensor now, so a bad file fails at open, not at some token.
    let resident = Resident {
        layout: ResidentLayout::locate(&config, &knot.resident_tensors())?,
        bytes: resident,
    };
    resident.weights()?;
    let n = config.n_layers;
    let ranges: Vec<Range<u64>> = (0..n)
        .map(|l| knot.layer_range(l).ok_or(HostError::NoSuchLayer(l)))
        .collect::<Result<_, _>>()?;
    let layouts = (0..n)
        .map(|l| {
            let tensors = knot.layer_tensors(l).ok_or(HostError::NoSuchLayer(l))?;
            Ok(LayerLayout::locate(&config, l, &tensors)?)
        })
        .collect::<Result<Vec<_>, HostError>>()?;
    let spans = ranges.iter().map(|r| r.end - r.start).collect();
    let cache = LayerCache::new(spans, opts.lru_capacity, opts.max_resident_bytes);
    let prefetch_depth = match (opts.prefetch, opts.prefetch_depth) {
        (false, _) => 0,
        (true, Some(d)) => d.min(n.saturating_sub(1)),
        (true, None) => opts
            .lru_capacity
            .saturating_sub(1)
            .clamp(1, n.saturating_sub(1).max(1)),
    };
    let scratch = Session::with_kv(&config, max_context, opts.kv_type)?;
    Ok(Opened {
        knot,
        tokenizer: Rc::new(tokenizer),
        resident,
        layers: LayerStore::new(reader, ranges, layouts, cache, prefetch_depth),
        scratch,
        planned,
    })
}

/// What the memory plan settled: the context, the pass limits, the sequences run at once and
/// the KV caches (one per sequence, and the extra windows).
pub(crate) struct Planned {
    pub context: usize,
    pub limits: PassLimits,
    pub sequences: usize,
    pub windows: usize,
    pub plan: Option<MemoryPlan>,
}

/// The context, pass limits, sequences and windows a host opened with `opts` gets, and the
/// memory plan when a budget was given (refusing a model that does not fit it).
fn plan_memory(knot: &Knot, opts: &HostOptions) -> Result<Planned, HostError> {
    let config = &knot.meta.config;
    let context = opts.max_context.min(config.context_length.max(1));
    // A cache per sequence and the extra ones kept for conversations that ended.
    let windows = |sequences: usize| sequences + opts.prefix_windows;
    // Sequences run together prefill in chunks beside the others' decoding: a chunk is what a
    // long prompt delays them by, so it is bounded even without a budget. A lone sequence
    // delays nobody: with every layer cached its chunk only bounds the activations; streaming,
    // each chunk would read the layers again, so its prompt runs as one pass.
    let all_cached = opts.lru_capacity >= config.n_layers && opts.max_resident_bytes.is_none();
    let max_batch = |sequences: usize| match sequences {
        1 if all_cached => opts.max_batch.unwrap_or(memory::RESIDENT_PREFILL_CHUNK),
        1 => opts.max_batch.unwrap_or(usize::MAX),
        _ => opts.max_batch.unwrap_or(memory::DEFAULT_BUDGET_BATCH),
    };
    let Some(budget) = opts.memory_budget else {
        let sequences = match opts.max_sequences {
            SequenceCount::Fixed(n) => n,
            SequenceCount::Auto => AUTO_SEQUENCES,
        };
        return Ok(Planned {
            context,
            limits: PassLimits {
                max_batch: max_batch(sequences),
                max_verify: MAX_DRAFT,
            },
            sequences,
            windows: windows(sequences),
            plan: None,
        });
    };
    // Each verify row keeps a vocabulary of logits: drafts are bounded by the default's
    // length (or the default settings') under a budget.
    let drafts = opts.draft.clone().unwrap_or_default().max_draft;
    let input = |sequences: usize| PlanInput {
        lru_capacity: opts.lru_capacity.min(config.n_layers.max(1)),
        max_resident_bytes: opts.max_resident_bytes,
        kv_type: opts.kv_type,
        context,
        max_batch: opts.max_batch.unwrap_or(memory::DEFAULT_BUDGET_BATCH),
        logits_rows: drafts + 1,
        windows: windows(sequences),
        prefill_windows: opts.prefill_windows,
        prefill_window_tokens: opts.prefill_window_max_tokens,
        sequences,
    };
    // 'auto': the most sequences whose plan holds the whole context; one, with the context
    // that fits, when not even that does.
    let sequences = match opts.max_sequences {
        SequenceCount::Fixed(n) => n,
        SequenceCount::Auto => (1..=MAX_AUTO_SEQUENCES)
            .rev()
            .find(|&n| {
                // As the plan kept will be: a batch no longer than the context.
                let whole = PlanInput {
                    max_batch: input(n).max_batch.min(context),
                    ..input(n)
                };
                memory::plan(knot, config, whole).total <= budget
            })
            .unwrap_or(1),
    };
    match memory::fit_context(knot, config, input(sequences), budget) {
        Ok(plan) => Ok(Planned {
            context: plan.context,
            limits: PassLimits {
                max_batch: plan.max_batch,
                max_verify: drafts,
            },
            sequences,
            windows: windows(sequences),
            plan: Some(plan),
        }),
        Err(plan) => Err(HostError::OverBudget {
            budget,
            budget_mib: budget as f64 / (1 << 20) as f64,
            plan: format!(
                "its smallest context of {} positions it needs {}",
                plan.context,
                memory::describe(&plan)
            ),
        }),
    }
}
