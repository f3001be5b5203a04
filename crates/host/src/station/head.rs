//! A head station: the final norm and the LM head over one contiguous slice of the vocabulary,
//! and the same slice's rows of the embedding table (the coordinator embeds from them: when
//! embeddings are tied they are the LM head's rows themselves).

use std::ops::Range;

use engine::quant::MatmulScratch;
use engine::{HeadBuffers, LmHead};

use super::bundle::{self, SumsAsk};
use super::layers::StationError;
use super::rows;
use super::wire;
use engine::health::HealthSums;
use engine::pipeline::{exponent, LevelSums};

/// The most rows one `/rows` request may ask for (a prompt's distinct ids fit many times over).
pub const MAX_ROWS_PER_REQUEST: usize = 1 << 16;
/// The most rows a logits answer carries.
pub const MAX_TOP_ROWS: usize = 64;
/// The most conversations one bundle carries (a host's most sequences at once).
pub const MAX_BUNDLE_PARTS: usize = 64;

/// A head station's rows of the embedding table: rows `first..first + n` of it, as the file
/// stores them.
#[derive(Clone, Copy)]
pub struct EmbeddingSlice<'a> {
    pub first: usize,
    pub row_bytes: usize,
    pub bytes: &'a [u8],
}

impl<'a> EmbeddingSlice<'a> {
    /// Row `id` of the table, when this slice holds it.
    pub fn row(&self, id: u32) -> Option<&'a [u8]> {
        let i = (id as usize).checked_sub(self.first)?;
        let at = i.checked_mul(self.row_bytes)?;
        self.bytes.get(at..at.checked_add(self.row_bytes)?)
    }

    fn rows(&self) -> usize {
        self.bytes.len() / self.row_bytes.max(1)
    }
}

/// A sampled part sends the rows of its top ids within this many levels (powers of two of
/// weight at the pick's temperature) of its largest: a token 32 times less likely than the
/// slice's top is rarely picked, and when it is, one `/rows` round fetches its row (rows only
/// embed: which ride changes no token). Measured on Gemma-3-270M 4 + 4 at T 0.8 with 16 rows
/// a shard: 178.7 KiB back a token instead of 269, the same `/rows` rounds (1 in 16 tokens).
pub const ROW_LEVELS: f64 = 5.0;

/// The ids whose embedding rows ride with a part's answer: its `top` largest (greedy's order),
/// and for a sampled part (`sums` says its temperature) only those not removed by the pick's
/// mask and within [`ROW_LEVELS`] of the largest such.
fn riding_ids(part: &[f32], first: usize, top: usize, sums: Option<&SumsAsk>) -> Vec<u32> {
    let Some(s) = sums else {
        return top_ids(part, first, top);
    };
    // With removed ids, a copy with them at −inf (which `largest` skips): one pass, where a
    // lookup in the ranges per id would be one per id. Without, the part itself.
    let mut open = std::borrow::Cow::Borrowed(part);
    for &(a, b) in &s.excluded {
        let (a, b) = (a as usize, b as usize);
        let (a, b) = (
            a.max(first) - first,
            b.min(first + part.len()).saturating_sub(first),
        );
        (open.to_mut().get_mut(a..b.max(a)))
            .into_iter()
            .flatten()
            .for_each(|l| *l = f32::NEG_INFINITY);
    }
    let kept = largest(&open, first, top);
    let reach = kept.first().map_or(f64::INFINITY, |&(_, l)| {
        exponent(l, s.temperature) - ROW_LEVELS
    });
    kept.into_iter()
        .filter(|&(_, l)| exponent(l, s.temperature) >= reach)
        .map(|(id, _)| id)
        .collect()
}

/// The most candidates a first answer carries per part.
pub const MAX_CANDIDATES: usize = 1 << 10;
/// Steps a head station keeps the hidden states of, to answer them again.
pub const KEPT_STEPS: usize = 8;

/// What a head station answers of a step's logits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LogitsAsk {
    /// Every logit of the slice.
    Every,
    /// The largest `n` (at most [`MAX_CANDIDATES`]) and a bound on the rest.
    Largest(usize),
    /// Every logit at least this large and a bound on the rest (every logit of the slice when
    /// that is fewer bytes).
    Above(f32),
}

/// One part of a kept step asked again (`/again`).
#[derive(Debug, Clone, PartialEq)]
pub struct Again {
    /// Its place among the step's answers.
    pub part: usize,
    pub logits: LogitsAsk,
    /// When given, what the part's sums are taken for from now on, in place of what the step
    /// asked (a draft's later row, whose pick has moved on from the step's first).
    pub sums: Option<Option<SumsAsk>>,
}

impl Again {
    /// Part `part` as `logits` says, with the sums the step asked for.
    pub fn of(part: usize, logits: LogitsAsk) -> Self {
        Again {
            part,
            logits,
            sums: None,
        }
    }
}

/// The `k` ids of `logits` (offset by `first`) that a greedy pick would take first: largest
/// first, lowest id on ties, NaN and −inf never (as `engine::sampler::greedy` compares).
pub fn top_ids(logits: &[f32], first: usize, k: usize) -> Vec<u32> {
    largest(logits, first, k)
        .into_iter()
        .map(|(id, _)| id)
        .collect()
}

/// [`top_ids`] with their logits.
pub fn largest(logits: &[f32], first: usize, k: usize) -> Vec<(u32, f32)> {
    let mut top: Vec<(usize, f32)> = Vec::with_capacity(k.min(logits.len()).saturating_add(1));
    for (i, &l) in logits.iter().enumerate() {
        if k == 0 || l.is_nan() || l == f32::NEG_INFINITY {
            continue;
        }
        if top.len() == k && top.last().is_some_and(|&(_, w)| l <= w) {
            continue;
        }
        // After every kept value at least as large: ties keep the lower id ahead.
        let at = top.iter().position(|&(_, v)| l > v).unwrap_or(top.len());
        top.insert(at, (i, l));
        top.truncate(k);
    }
    top.into_iter()
        .filter_map(|(i, l)| Some((u32::try_from(first + i).ok()?, l)))
        .collect()
}

/// The candidates `ask` names of one part's logits (`first` the slice's first id), as
/// `(ids, values, bound)`, or `None` for every logit.
fn candidates(logits: &[f32], first: usize, ask: LogitsAsk) -> Option<(Vec<u32>, Vec<f32>, f32)> {
    let (sent, bound) = match ask {
        LogitsAsk::Every => return None,
        LogitsAsk::Largest(n) => {
            let mut sent = largest(logits, first, n.saturating_add(1));
            let bound = match sent.len() > n {
                true => sent.pop().map_or(f32::NEG_INFINITY, |(_, l)| l),
                false => f32::NEG_INFINITY,
            };
            (sent, bound)
        }
        LogitsAsk::Above(t) => {
            let mut sent = Vec::new();
            let mut bound = f32::NEG_INFINITY;
            for (i, &l) in logits.iter().enumerate() {
                if l >= t {
                    sent.push((u32::try_from(first + i).ok()?, l));
                } else if l > bound {
                    bound = l;
                }
            }
            // Eight bytes a candidate against four a logit: past half the slice, every logit.
            if 2 * sent.len() >= logits.len() {
                return None;
            }
            (sent, bound)
        }
    };
    Some((
        sent.iter().map(|e| e.0).collect(),
        sent.iter().map(|e| e.1).collect(),
        bound,
    ))
}

/// One part's logits as `ask` names them (every one, or candidates — with the level sums and
/// the watched ids' logits when `sums` asks), with `rows`.
fn encode_logits(
    part: &[f32],
    first: usize,
    ask: LogitsAsk,
    sums: Option<&SumsAsk>,
    rows: Vec<(u32, &[u8])>,
    row_bytes: usize,
) -> Result<Vec<u8>, rows::RowsError> {
    match candidates(part, first, ask) {
        None => rows::encode(part, rows.into_iter(), row_bytes),
        Some((mut ids, mut values, bound)) => {
            // Temperature 0: the pick does not sample (the block is there for the health sums).
            let level_sums = (sums.filter(|s| s.temperature > 0.0))
                .and_then(|s| LevelSums::of_except(part, first, s.temperature, &s.excluded));
            // The watched ids' logits: as values alone beside the sums (the asker holds the ids);
            // without sums, as candidates.
            let watched = (sums.map_or(&[][..], |s| &s.watched).iter())
                .filter_map(|&id| Some((id, *part.get((id as usize).checked_sub(first)?)?)));
            let values_alone: Vec<f32> = match level_sums {
                Some(_) => watched.map(|(_, l)| l).collect(),
                None => {
                    for (id, l) in watched {
                        if !ids.contains(&id) {
                            ids.push(id);
                            values.push(l);
                        }
                    }
                    Vec::new()
                }
            };
            let with_sums = level_sums.as_ref().map(|s| (s, values_alone.as_slice()));
            let msg = rows::encode_candidates(
                &ids,
                &values,
                bound,
                with_sums,
                rows.into_iter(),
                row_bytes,
            )?;
            match sums.filter(|s| s.health) {
                Some(s) => rows::with_health(msg, &HealthSums::of(part, first, &s.excluded)),
                None => Ok(msg),
            }
        }
    }
}

/// A step's hidden states of the parts wanting logits, kept to answer them again.
struct Kept {
    step: u64,
    hidden: Vec<f32>,
    sums: Vec<Option<SumsAsk>>,
}

/// The buffers of a head station; the weights (the output norm and its slice of the output
/// matrix) are passed in, borrowed from wherever the station keeps them.
pub struct HeadStation {
    slice: Range<usize>,
    dim: usize,
    eps: f32,
    max_batch: usize,
    norm_w: Vec<f32>,
    xb: Vec<f32>,
    logits: Vec<f32>,
    scratch: MatmulScratch,
    /// The last steps' hidden states of the parts wanting logits (`dim` each) and what each
    /// asked of its sums, by step.
    kept: std::collections::VecDeque<Kept>,
}

impl HeadStation {
    pub fn new(slice: Range<usize>, dim: usize, eps: f32, max_batch: usize) -> Self {
        HeadStation {
            slice,
            dim,
            eps,
            max_batch: max_batch.max(1),
            norm_w: Vec::new(),
            xb: Vec::new(),
            logits: Vec::new(),
            scratch: MatmulScratch::default(),
            kept: std::collections::VecDeque::new(),
        }
    }

    pub fn slice(&self) -> Range<usize> {
        self.slice.clone()
    }

    /// The logits of this slice for the last position of the batch in `msg` (what decoding
    /// samples from); `head.output` must hold exactly the slice's rows.
    pub fn logits(&mut self, msg: &[u8], head: &LmHead) -> Result<&[f32], StationError> {
        let h = wire::decode(msg, self.max_batch.saturating_mul(self.dim))?;
        self.check(h.dim, head)?;
        self.logits_of(&h.values[h.values.len() - self.dim..], head)
    }

    fn check(&self, dim: u32, head: &LmHead) -> Result<(), StationError> {
        if dim as usize != self.dim || head.output.cols() != self.dim {
            return Err(StationError::Width {
                got: dim,
                want: self.dim,
            });
        }
        if head.output.rows() != self.slice.len() {
            return Err(StationError::Weights {
                got: head.output.rows(),
                start: self.slice.start,
                end: self.slice.end,
            });
        }
        Ok(())
    }

    /// The slice's logits (`[m, slice]`) of the `m` rows of `hidden`, in one matmul.
    fn logits_of(&mut self, hidden: &[f32], head: &LmHead) -> Result<&[f32], StationError> {
        head.logits(
            self.eps,
            hidden,
            HeadBuffers {
                norm_w: &mut self.norm_w,
                xb: &mut self.xb,
                logits: &mut self.logits,
                scratch: &mut self.scratch,
            },
        )?;
        Ok(&self.logits)
    }

    /// The answer to `/logits`: the slice's logits for the last position of `msg` — every one,
    /// or the candidates `ask` names — and the embedding rows of its `top` largest (at most
    /// [`MAX_TOP_ROWS`]), so that the token the coordinator picks is almost always embedded
    /// without another round trip (greedy: always). For a bundle of several conversations'
    /// hidden states ([`bundle`]), a bundle of such answers, one for each part that wants
    /// logits — one for each of its positions when it asks for every row — in order, their rows
    /// in one matmul. The hidden states are kept as `step`'s, for [`HeadStation::again`].
    pub fn answer(
        &mut self,
        msg: &[u8],
        head: &LmHead,
        embedding: EmbeddingSlice,
        top: usize,
        ask: LogitsAsk,
        step: u64,
    ) -> Result<Vec<u8>, StationError> {
        if top > MAX_TOP_ROWS {
            return Err(StationError::TooManyRows {
                got: top,
                max: MAX_TOP_ROWS,
            });
        }
        if let LogitsAsk::Largest(n) = ask {
            if n > MAX_CANDIDATES {
                return Err(StationError::TooManyCandidates {
                    got: n,
                    max: MAX_CANDIDATES,
                });
            }
        }
        let mut last = Vec::new();
        // What each part wanting logits is answered with.
        let (mut asks, mut sums) = (Vec::new(), Vec::new());
        let bundled = bundle::is(msg, bundle::HIDDEN);
        if bundled {
            for (flags, bytes) in bundle::decode(msg, bundle::HIDDEN, MAX_BUNDLE_PARTS)? {
                let (sums_ask, bytes) = SumsAsk::split(flags, bytes)?;
                let h = wire::decode(bytes, self.max_batch.saturating_mul(self.dim))?;
                self.check(h.dim, head)?;
                if flags & bundle::WANTS_LOGITS != 0 {
                    let rows = match flags & bundle::EVERY_ROW != 0 {
                        true => h.rows(),
                        false => 1,
                    };
                    last.extend_from_slice(&h.values[h.values.len() - rows * self.dim..]);
                    for _ in 0..rows {
                        asks.push(match flags & bundle::EVERY_LOGIT != 0 {
                            true => LogitsAsk::Every,
                            false => ask,
                        });
                        sums.push(sums_ask.clone());
                    }
                }
            }
            if last.is_empty() {
                return Err(StationError::NoLogits);
            }
        } else {
            let h = wire::decode(msg, self.max_batch.saturating_mul(self.dim))?;
            self.check(h.dim, head)?;
            last.extend_from_slice(&h.values[h.values.len() - self.dim..]);
            asks.push(ask);
            sums.push(None);
        }
        let (first, width, row_bytes) = (self.slice.start, self.slice.len(), embedding.row_bytes);
        let logits = self.logits_of(&last, head)?;
        let answers = (logits.chunks_exact(width).zip(asks).zip(&sums))
            .map(|((part, ask), sums)| {
                let ids = riding_ids(part, first, top, sums.as_ref());
                let rows = Self::rows_of(&ids, embedding, first..first + width)?;
                Ok(encode_logits(
                    part,
                    first,
                    ask,
                    sums.as_ref(),
                    rows,
                    row_bytes,
                )?)
            })
            .collect::<Result<Vec<_>, StationError>>()?;
        if self.kept.len() == KEPT_STEPS {
            self.kept.pop_front();
        }
        self.kept.push_back(Kept {
            step,
            hidden: last,
            sums,
        });
        if !bundled {
            return Ok(answers.into_iter().next().unwrap_or_default());
        }
        Ok(bundle::encode(
            bundle::ANSWERS,
            answers.iter().map(|a| (0, a.as_slice())),
        ))
    }

    /// The answer to `/again`: each part of `step` asked for answered again as its ask says
    /// (no rows: they rode with the first answer), a bundle in the order asked. An ask that
    /// names sums replaces what the part's sums are taken for.
    pub fn again(
        &mut self,
        step: u64,
        asks: &[Again],
        head: &LmHead,
        row_bytes: usize,
    ) -> Result<Vec<u8>, StationError> {
        if asks.len() > MAX_BUNDLE_PARTS {
            return Err(StationError::Conversations {
                got: asks.len(),
                max: MAX_BUNDLE_PARTS,
            });
        }
        let at =
            (self.kept.iter().rposition(|k| k.step == step)).ok_or(StationError::StepGone(step))?;
        let parts = self.kept[at].hidden.len() / self.dim.max(1);
        let mut rows = Vec::with_capacity(asks.len() * self.dim);
        for a in asks {
            let part = a.part;
            if part >= parts {
                return Err(StationError::PartOutside { part, parts });
            }
            if let LogitsAsk::Largest(n) = a.logits {
                if n > MAX_CANDIDATES {
                    return Err(StationError::TooManyCandidates {
                        got: n,
                        max: MAX_CANDIDATES,
                    });
                }
            }
            if let (Some(s), Some(kept)) = (&a.sums, self.kept[at].sums.get_mut(part)) {
                *kept = s.clone();
            }
            rows.extend_from_slice(&self.kept[at].hidden[part * self.dim..(part + 1) * self.dim]);
        }
        let (first, width) = (self.slice.start, self.slice.len());
        // Sums ride again: the pick replaces a slot's first answer with this one.
        let sums: Vec<Option<SumsAsk>> = (asks.iter())
            .map(|a| self.kept[at].sums.get(a.part).cloned().flatten())
            .collect();
        let logits = self.logits_of(&rows, head)?;
        let answers = (logits.chunks_exact(width).zip(asks).zip(&sums))
            .map(|((part, a), sums)| {
                encode_logits(part, first, a.logits, sums.as_ref(), Vec::new(), row_bytes)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(bundle::encode(
            bundle::ANSWERS,
            answers.iter().map(|a| (0, a.as_slice())),
        ))
    }

    /// The answer to `/rows`: the embedding rows of `ids` (each in this station's slice).
    pub fn rows(&self, ids: &[u32], embedding: EmbeddingSlice) -> Result<Vec<u8>, StationError> {
        if ids.len() > MAX_ROWS_PER_REQUEST {
            return Err(StationError::TooManyRows {
                got: ids.len(),
                max: MAX_ROWS_PER_REQUEST,
            });
        }
        let rows = Self::rows_of(ids, embedding, self.slice.clone())?;
        Ok(rows::encode(&[], rows.into_iter(), embedding.row_bytes)?)
    }

    fn rows_of<'e>(
        ids: &[u32],
        embedding: EmbeddingSlice<'e>,
        slice: Range<usize>,
    ) -> Result<Vec<(u32, &'e [u8])>, StationError> {
        if embedding.first != slice.start || embedding.rows() != slice.len() {
            return Err(StationError::Weights {
                got: embedding.rows(),
                start: slice.start,
                end: slice.end,
            });
        }
        ids.iter()
            .map(|&id| {
                let row = embedding.row(id).ok_or(StationError::RowOutside {
                    id,
                    start: slice.start,
                    end: slice.end,
                })?;
                Ok((id, row))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_ids_are_what_greedy_takes_first() {
        let l = [
            0.5,
            2.0,
            f32::NAN,
            2.0,
            f32::INFINITY,
            -1.0,
            f32::NEG_INFINITY,
            3.0,
        ];
        assert_eq!(top_ids(&l, 100, 0), Vec::<u32>::new());
        assert_eq!(top_ids(&l, 100, 1), [104]);
        assert_eq!(top_ids(&l, 100, 4), [104, 107, 101, 103]);
        assert_eq!(top_ids(&l, 0, 10), [4, 7, 1, 3, 0, 5]);
        // The first of equal maxima, as greedy picks it (−0 and 0 compare equal there too).
        assert_eq!(top_ids(&[-0.0, 0.0, -1.0], 0, 1), [0]);
        for seed in 0..50u32 {
            let v: Vec<f32> = (0..40u32)
                .map(|i| ((i.wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(97)) % 13) as f32)
                .collect();
            let g = engine::sampler::greedy(&v).unwrap();
            assert_eq!(top_ids(&v, 0, 1), [g]);
            let mut sorted: Vec<u32> = (0..40).collect();
            sorted.sort_by(|&a, &b| v[b as usize].total_cmp(&v[a as usize]).then(a.cmp(&b)));
            assert_eq!(top_ids(&v, 0, 5), sorted[..5]);
        }
    }

    #[test]
    fn sampled_parts_carry_the_rows_within_reach_of_their_top() {
        // At T 1 a level is ln 2 ≈ 0.69 nats: 5 levels ≈ 3.47 below the largest.
        let l = [9.0, 8.0, 6.0, 5.6, 5.0, 10.0, f32::NAN, 1.0];
        let ask = |temperature, excluded: &[(u32, u32)]| SumsAsk {
            temperature,
            watched: vec![],
            excluded: excluded.to_vec(),
            health: false,
        };
        // Greedy's rows (no sums): the top ids, whatever their weight.
        assert_eq!(riding_ids(&l, 100, 4, None), [105, 100, 101, 102]);
        assert_eq!(
            riding_ids(&l, 100, 8, Some(&ask(1.0, &[]))),
            [105, 100, 101]
        );
        // Hotter, more ride; never more than `top`.
        assert_eq!(riding_ids(&l, 100, 8, Some(&ask(2.0, &[]))).len(), 6);
        assert_eq!(riding_ids(&l, 100, 2, Some(&ask(2.0, &[]))), [105, 100]);
        // A removed id's row never rides, and reach counts from the largest left.
        assert_eq!(
            riding_ids(&l, 100, 8, Some(&ask(1.0, &[(90, 101), (105, 106)]))),
            [101, 102, 103, 104]
        );
        // Everything removed: no row.
        assert!(riding_ids(&l, 100, 8, Some(&ask(1.0, &[(0, 200)]))).is_empty());
    }

    #[test]
    fn rows_come_from_the_slice_only() {
        let bytes: Vec<u8> = (0..12).collect();
        let e = EmbeddingSlice {
            first: 10,
            row_bytes: 3,
            bytes: &bytes,
        };
        assert_eq!(e.row(10), Some(&[0u8, 1, 2][..]));
        assert_eq!(e.row(13), Some(&[9u8, 10, 11][..]));
        assert_eq!(e.row(9), None);
        assert_eq!(e.row(14), None);
        assert_eq!(e.row(u32::MAX), None);
        let station = HeadStation::new(10..14, 8, 1e-5, 1);
        let msg = station.rows(&[13, 10], e).unwrap();
        let limits = rows::Limits {
            max_logits: 0,
            max_rows: 2,
            row_bytes: 3,
        };
        let m = rows::decode(&msg, limits).unwrap();
        assert_eq!(m.ids, [13, 10]);
        assert_eq!(m.rows, [9, 10, 11, 0, 1, 2]);
        assert!(matches!(
            station.rows(&[14], e),
            Err(StationError::RowOutside { id: 14, .. })
        ));
        let many = vec![10; MAX_ROWS_PER_REQUEST + 1];
        assert!(matches!(
            station.rows(&many, e),
            Err(StationError::TooManyRows { .. })
        ));
        // Rows of another slice are the wrong weights.
        let other = HeadStation::new(0..4, 8, 1e-5, 1);
        assert!(matches!(
            other.rows(&[0], e),
            Err(StationError::Weights { .. })
        ));
    }
}
