//! The gather of a fan-out (the LM-head shards of one decode step): each slot's answer is a
//! ballot, and the fold of the ballots is a three-way verdict rather than a bare success flag,
//! so the coordinator knows whether to go on, retry only what is missing, or give up.
//!
//! - accept: every slot answered; the answers fold into one result.
//! - abstain: no slot failed but some did not answer in time; retry those slots alone (the
//!   answers in hand are kept).
//! - decline: a slot answered with an error, or there was nothing to gather (no slots): the
//!   request fails with that error.

use std::ops::Range;

use super::rows::RowsMessage;

/// One slot's answer as the race left it.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer<T> {
    /// It answered in time.
    Value(T),
    /// It did not answer in time (or its connection dropped): worth one more try.
    Missing,
    /// It answered with an error: retrying would get the same.
    Failed(String),
}

/// A slot's answer, stripped of its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ballot {
    Accept,
    Abstain,
    Decline,
}

/// What the gather as a whole says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Accept,
    Abstain,
    Decline,
}

impl<T> Answer<T> {
    pub fn ballot(&self) -> Ballot {
        match self {
            Answer::Value(_) => Ballot::Accept,
            Answer::Missing => Ballot::Abstain,
            Answer::Failed(_) => Ballot::Decline,
        }
    }
}

/// Any decline declines; all accept accepts; otherwise abstain. No ballots at all declines:
/// an empty gather has answered nothing.
pub fn verdict(ballots: &[Ballot]) -> Verdict {
    if ballots.is_empty() || ballots.contains(&Ballot::Decline) {
        Verdict::Decline
    } else if ballots.iter().all(|b| *b == Ballot::Accept) {
        Verdict::Accept
    } else {
        Verdict::Abstain
    }
}

/// A gather's outcome with what it carries.
#[derive(Debug, Clone, PartialEq)]
pub enum Folded<T> {
    /// Every answer, in slot order.
    Accept(Vec<T>),
    /// The slots to ask again.
    Abstain { retry: Vec<usize> },
    /// The first error (slot, message).
    Decline { slot: Option<usize>, error: String },
}

/// Folds the answers of one gather.
pub fn fold<T>(answers: Vec<Answer<T>>) -> Folded<T> {
    let ballots: Vec<Ballot> = answers.iter().map(Answer::ballot).collect();
    let (mut values, mut retry, mut failed) = (Vec::new(), Vec::new(), None);
    for (slot, answer) in answers.into_iter().enumerate() {
        match answer {
            Answer::Value(v) => values.push(v),
            Answer::Missing => retry.push(slot),
            Answer::Failed(error) => {
                failed.get_or_insert((slot, error));
            }
        }
    }
    match (verdict(&ballots), failed) {
        (Verdict::Accept, _) => Folded::Accept(values),
        (Verdict::Abstain, _) => Folded::Abstain { retry },
        (Verdict::Decline, Some((slot, error))) => Folded::Decline {
            slot: Some(slot),
            error,
        },
        (Verdict::Decline, None) => Folded::Decline {
            slot: None,
            error: "nothing to gather".into(),
        },
    }
}

/// The vocabulary cut into `shards` contiguous slices of near-equal size (the first ones one
/// row longer), one per head station. Empty when `shards` is 0 or more than `vocab`.
pub fn vocab_slices(vocab: usize, shards: usize) -> Vec<Range<usize>> {
    if shards == 0 || shards > vocab {
        return Vec::new();
    }
    let (base, extra) = (vocab / shards, vocab % shards);
    let mut start = 0;
    (0..shards)
        .map(|i| {
            let len = base + usize::from(i < extra);
            let r = start..start + len;
            start += len;
            r
        })
        .collect()
}

/// Head shards' logits (slot `i` the slice `slices[i]`) as one row of the whole vocabulary.
pub fn join_logits(slices: &[Range<usize>], parts: &[Vec<f32>]) -> Result<Vec<f32>, JoinError> {
    if slices.len() != parts.len() {
        return Err(JoinError::Count {
            slices: slices.len(),
            parts: parts.len(),
        });
    }
    let mut out = Vec::with_capacity(slices.last().map_or(0, |r| r.end));
    for (slot, (range, part)) in slices.iter().zip(parts).enumerate() {
        if range.start != out.len() || part.len() != range.len() {
            return Err(JoinError::Slice {
                slot,
                expected: range.len(),
                got: part.len(),
            });
        }
        out.extend_from_slice(part);
    }
    Ok(out)
}

/// Head shards' answers (slot `i` the slice `slices[i]`: every logit, or candidates) as one
/// row of the whole vocabulary, the logits not sent −inf, and the largest logit not sent (−inf
/// when every one was).
pub fn assemble_logits(
    slices: &[Range<usize>],
    parts: &[&RowsMessage],
) -> Result<(Vec<f32>, f32), JoinError> {
    if slices.len() != parts.len() {
        return Err(JoinError::Count {
            slices: slices.len(),
            parts: parts.len(),
        });
    }
    let vocab = slices.last().map_or(0, |r| r.end);
    let mut out = vec![f32::NEG_INFINITY; vocab];
    let mut bound = f32::NEG_INFINITY;
    let mut at = 0;
    for (slot, (range, part)) in slices.iter().zip(parts).enumerate() {
        let slice_error = |got| JoinError::Slice {
            slot,
            expected: range.len(),
            got,
        };
        if range.start != at {
            return Err(slice_error(part.logits.len()));
        }
        at = range.end;
        match &part.candidates {
            None if part.logits.len() == range.len() => {
                out[range.clone()].copy_from_slice(&part.logits)
            }
            None => return Err(slice_error(part.logits.len())),
            Some(c) => {
                if c.ids.len() != part.logits.len() || c.ids.len() > range.len() {
                    return Err(slice_error(c.ids.len()));
                }
                for (&id, &l) in c.ids.iter().zip(&part.logits) {
                    if !range.contains(&(id as usize)) {
                        return Err(JoinError::Outside {
                            slot,
                            id,
                            start: range.start,
                            end: range.end,
                        });
                    }
                    out[id as usize] = l;
                }
                bound = bound.max(c.bound);
            }
        }
    }
    Ok((out, bound))
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JoinError {
    #[error("shard {slot} sent a candidate {id} outside its slice {start}..{end}")]
    Outside {
        slot: usize,
        id: u32,
        start: usize,
        end: usize,
    },
    #[error("{parts} logit slices for {slices} shards")]
    Count { slices: usize, parts: usize },
    #[error("shard {slot} answered {got} logits for a slice of {expected} (or slices are not contiguous)")]
    Slice {
        slot: usize,
        expected: usize,
        got: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Ballot; 3] = [Ballot::Accept, Ballot::Abstain, Ballot::Decline];

    #[test]
    fn all_27_three_shard_ballots() {
        let mut seen = 0;
        for a in ALL {
            for b in ALL {
                for c in ALL {
                    let ballots = [a, b, c];
                    let want = if ballots.contains(&Ballot::Decline) {
                        Verdict::Decline
                    } else if ballots == [Ballot::Accept; 3] {
                        Verdict::Accept
                    } else {
                        Verdict::Abstain
                    };
                    assert_eq!(verdict(&ballots), want, "{ballots:?}");
                    seen += 1;
                }
            }
        }
        assert_eq!(seen, 27);
        // Spot checks, written out.
        use Ballot::*;
        assert_eq!(verdict(&[Accept, Accept, Accept]), Verdict::Accept);
        assert_eq!(verdict(&[Accept, Abstain, Accept]), Verdict::Abstain);
        assert_eq!(verdict(&[Abstain, Abstain, Abstain]), Verdict::Abstain);
        assert_eq!(verdict(&[Accept, Accept, Decline]), Verdict::Decline);
        assert_eq!(verdict(&[Abstain, Decline, Accept]), Verdict::Decline);
    }

    #[test]
    fn no_ballots_decline() {
        assert_eq!(verdict(&[]), Verdict::Decline);
        assert!(matches!(
            fold::<u8>(vec![]),
            Folded::Decline { slot: None, .. }
        ));
    }

    #[test]
    fn fold_keeps_slot_order_and_names_what_to_retry() {
        use Answer::*;
        assert_eq!(
            fold(vec![Value(1), Value(2), Value(3)]),
            Folded::Accept(vec![1, 2, 3])
        );
        assert_eq!(
            fold(vec![Value(1), Missing, Value(3), Missing]),
            Folded::Abstain { retry: vec![1, 3] }
        );
        assert_eq!(
            fold(vec![Missing, Failed("boom".into()), Value(3)]),
            Folded::Decline {
                slot: Some(1),
                error: "boom".into()
            }
        );
    }

    #[test]
    fn vocab_slices_cover_the_vocabulary_once() {
        for (vocab, shards) in [(49152, 2), (262144, 4), (10, 3), (7, 7), (5, 1)] {
            let s = vocab_slices(vocab, shards);
            assert_eq!(s.len(), shards);
            assert_eq!(s[0].start, 0);
            assert_eq!(s.last().unwrap().end, vocab);
            for w in s.windows(2) {
                assert_eq!(w[0].end, w[1].start);
                assert!(w[0].len() >= w[1].len() && w[0].len() - w[1].len() <= 1);
            }
        }
        assert!(vocab_slices(4, 0).is_empty());
        assert!(vocab_slices(4, 5).is_empty());
    }

    #[test]
    fn assembled_logits_take_candidates_and_refuse_strays() {
        use crate::station::rows::Candidates;
        let every = RowsMessage {
            logits: vec![1.0, 2.0],
            candidates: None,
            health: None,
            ids: Vec::new(),
            row_bytes: 1,
            rows: Vec::new(),
        };
        let some = |ids: Vec<u32>, bound| RowsMessage {
            logits: vec![5.0; ids.len()],
            candidates: Some(Candidates {
                ids,
                bound,
                sums: None,
                watched: Vec::new(),
            }),
            ..every.clone()
        };
        let slices = [0..2, 2..5];
        let (v, bound) = assemble_logits(&slices, &[&every, &some(vec![3], 0.5)]).unwrap();
        assert_eq!(v, [1.0, 2.0, f32::NEG_INFINITY, 5.0, f32::NEG_INFINITY]);
        assert_eq!(bound, 0.5);
        // Every logit from every shard: nothing unknown.
        let all = RowsMessage {
            logits: vec![0.0; 3],
            ..every.clone()
        };
        assert_eq!(
            assemble_logits(&slices, &[&every, &all]).unwrap().1,
            f32::NEG_INFINITY
        );
        // A candidate outside the shard's slice, a count that disagrees, a shard missing.
        assert!(matches!(
            assemble_logits(&slices, &[&every, &some(vec![1], 0.0)]),
            Err(JoinError::Outside { slot: 1, id: 1, .. })
        ));
        let mut short = some(vec![2, 3], 0.0);
        short.logits.pop();
        assert!(matches!(
            assemble_logits(&slices, &[&every, &short]),
            Err(JoinError::Slice { slot: 1, .. })
        ));
        assert!(assemble_logits(&slices, &[&every]).is_err());
    }

    #[test]
    fn joined_logits_are_the_slices_in_order() {
        let slices = vocab_slices(5, 2);
        let joined = join_logits(&slices, &[vec![0.0, 1.0, 2.0], vec![3.0, 4.0]]).unwrap();
        assert_eq!(joined, [0.0, 1.0, 2.0, 3.0, 4.0]);
        assert_eq!(
            join_logits(&slices, &[vec![0.0, 1.0], vec![3.0, 4.0]]),
            Err(JoinError::Slice {
                slot: 0,
                expected: 3,
                got: 2
            })
        );
        assert!(matches!(
            join_logits(&slices, &[vec![0.0; 3]]),
            Err(JoinError::Count { .. })
        ));
    }
}
