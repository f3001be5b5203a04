use super::*;
use crate::decode::{FinishReason, GenerateOptions};
use crate::test_support::{bytes_tokenizer, pointing_at, END};
use std::cell::RefCell;
use std::rc::Rc;

const WIDE: DraftLimits = DraftLimits {
    room: 1000,
    max_verify: MAX_DRAFT,
    max_batch: 1000,
};

fn generation(max_tokens: usize) -> Generation {
    let opts = GenerateOptions {
        max_tokens,
        ..GenerateOptions::default()
    };
    Generation::new(&opts, bytes_tokenizer(), &[END], 1000).unwrap()
}

/// Rows of logits, one per id, each making greedy pick that id.
fn rows(ids: &[u32]) -> Vec<f32> {
    ids.iter().flat_map(|&id| pointing_at(id)).collect()
}

/// Proposes a fixed draft and records what it was told.
struct Scripted {
    draft: Vec<u32>,
    seen: Rc<RefCell<Vec<(usize, usize)>>>,
    asked: Rc<RefCell<Vec<usize>>>,
}

impl Drafter for Scripted {
    fn draft(&mut self, _context: &[u32], max: usize, out: &mut Vec<u32>) {
        self.asked.borrow_mut().push(max);
        out.clear();
        out.extend_from_slice(&self.draft);
    }
    fn observe(&mut self, drafted: usize, accepted: usize) {
        self.seen.borrow_mut().push((drafted, accepted));
    }
}

type Log = Rc<RefCell<Vec<(usize, usize)>>>;

fn scripted(draft: &[u32]) -> (Box<Scripted>, Log, Rc<RefCell<Vec<usize>>>) {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let asked = Rc::new(RefCell::new(Vec::new()));
    let d = Scripted {
        draft: draft.to_vec(),
        seen: seen.clone(),
        asked: asked.clone(),
    };
    (Box::new(d), seen, asked)
}

fn batch_of(next: NextPass<'_>) -> (Vec<u32>, bool) {
    match next {
        NextPass::Run { batch, verify } => (batch.to_vec(), verify),
        other => panic!("expected a pass, got {other:?}"),
    }
}

#[test]
fn plain_decoding_runs_the_pending_token_then_picks() {
    let mut s = Speculation::new();
    let mut g = generation(10);
    // Nothing was run: nothing to continue from.
    assert!(!s.can_continue());
    assert!(matches!(
        s.next(Some(&mut g), &[], WIDE),
        NextPass::NoContext
    ));
    // A prompt's pass leaves logits to pick from, and no pass is needed for the first token.
    s.prefilled();
    assert!(s.can_continue());
    assert!(matches!(
        s.next(Some(&mut g), &[1, 2], WIDE),
        NextPass::Pick
    ));
    let e = s.pick(&mut g, &mut pointing_at(7)).unwrap();
    assert_eq!((e.id, s.pending()), (7, Some(7)));
    assert_eq!(s.position(2), 3);
    // The next token runs the pending one alone (no drafter).
    let (batch, verify) = batch_of(s.next(Some(&mut g), &[1, 2, 7], WIDE));
    assert_eq!((batch, verify), (vec![7], false));
    // It was taken into the pass: a failed pass gives it back.
    assert_eq!(s.pending(), None);
    s.pass_failed();
    assert_eq!(s.pending(), Some(7));
    let (batch, _) = batch_of(s.next(Some(&mut g), &[1, 2, 7], WIDE));
    assert_eq!(batch, [7]);
    s.pass_done(2.0);
    let e = s.pick(&mut g, &mut pointing_at(8)).unwrap();
    assert_eq!(e.id, 8);
    assert_eq!(s.position(3), 4);
}

#[test]
fn no_generation_or_a_finished_one_needs_nothing() {
    let mut s = Speculation::new();
    s.prefilled();
    assert!(matches!(s.next(None, &[1], WIDE), NextPass::Finished));
    let mut g = generation(1);
    s.pick(&mut g, &mut pointing_at(3)).unwrap();
    assert_eq!(g.finished(), Some(FinishReason::Length));
    // The last token stays pending: no pass runs it.
    assert!(matches!(
        s.next(Some(&mut g), &[1, 3], WIDE),
        NextPass::Finished
    ));
    assert_eq!(s.pending(), Some(3));
}

#[test]
fn a_verify_pass_keeps_the_agreeing_draft_and_hands_it_out_without_passes() {
    let mut s = Speculation::new();
    let mut g = generation(10);
    let (drafter, seen, _) = scripted(&[11, 12, 13]);
    s.set_drafter(drafter, None);
    s.prefilled();
    s.pick(&mut g, &mut pointing_at(10)).unwrap();
    let conversation = [1, 2, 10];
    let (batch, verify) = batch_of(s.next(Some(&mut g), &conversation, WIDE));
    assert_eq!(
        (batch.as_slice(), verify),
        ([10, 11, 12, 13].as_slice(), true)
    );
    s.pass_done(5.0);
    // The model agrees with 11 and 12, then wants 40 where the draft says 13.
    let v = s.verify(&mut g, &mut rows(&[11, 12, 40, 99])).unwrap();
    assert_eq!((v.first.id, v.keep, v.drafted, v.accepted), (11, 3, 3, 2));
    assert_eq!(*seen.borrow(), [(3, 2)]);
    // 12 and 40 were made ahead: in the KV cache (40 pending), not yet in the conversation.
    assert_eq!(s.pending(), Some(40));
    // The cache holds 3 + 3 positions after the pass (10, 11, 12 kept); the conversation, with
    // 11 handed out, is 4 tokens: 12 and 40 do not count yet.
    assert_eq!(s.position(6), 5);
    let conversation = [1, 2, 10, 11];
    match s.next(Some(&mut g), &conversation, WIDE) {
        NextPass::Ahead(e) => assert_eq!(e.id, 12),
        other => panic!("{other:?}"),
    }
    match s.next(Some(&mut g), &[1, 2, 10, 11, 12], WIDE) {
        NextPass::Ahead(e) => assert_eq!(e.id, 40),
        other => panic!("{other:?}"),
    }
    // Then 40 runs, with a new draft.
    let (batch, _) = batch_of(s.next(Some(&mut g), &[1, 2, 10, 11, 12, 40], WIDE));
    assert_eq!(batch, [40, 11, 12, 13]);
}

#[test]
fn settling_drops_the_tokens_made_ahead() {
    let mut s = Speculation::new();
    let mut g = generation(10);
    let (drafter, _, _) = scripted(&[5, 6]);
    s.set_drafter(drafter, None);
    s.prefilled();
    s.pick(&mut g, &mut pointing_at(4)).unwrap();
    // Nothing ahead: nothing to settle.
    assert_eq!(s.settle(&[1, 4]), None);
    batch_of(s.next(Some(&mut g), &[1, 4], WIDE));
    s.pass_done(1.0);
    let v = s.verify(&mut g, &mut rows(&[5, 6, 7])).unwrap();
    assert_eq!(v.first.id, 5);
    // 6 and 7 were never handed out: the cache goes back to after [1, 4], 5 pending again.
    assert_eq!(s.settle(&[1, 4, 5]), Some(2));
    assert_eq!(s.pending(), Some(5));
    assert_eq!(s.position(2), 3);
    let (batch, _) = batch_of(s.next(Some(&mut g), &[1, 4, 5], WIDE));
    assert_eq!(batch[0], 5);
}

#[test]
fn a_failed_verify_gives_the_pending_token_back() {
    let mut s = Speculation::new();
    let mut g = generation(10);
    let (drafter, seen, _) = scripted(&[5]);
    s.set_drafter(drafter, None);
    s.prefilled();
    s.pick(&mut g, &mut pointing_at(4)).unwrap();
    batch_of(s.next(Some(&mut g), &[4], WIDE));
    s.pass_done(1.0);
    // No token can be picked from the first row.
    let mut bad = vec![f32::NEG_INFINITY; 2 * (END as usize + 1)];
    assert!(s.verify(&mut g, &mut bad).is_err());
    assert_eq!(s.pending(), Some(4));
    assert!(seen.borrow().is_empty());
}

#[test]
fn drafts_fit_the_context_the_batch_the_verify_rows_and_the_budget() {
    // (limits, max_tokens, what the drafter is asked for, the draft that runs)
    for (limits, budget, asked_for, kept) in [
        (WIDE, 100, MAX_DRAFT, 6),
        (DraftLimits { room: 2, ..WIDE }, 100, 2, 2),
        (
            DraftLimits {
                max_verify: 3,
                ..WIDE
            },
            100,
            3,
            3,
        ),
        (
            DraftLimits {
                max_batch: 4,
                ..WIDE
            },
            100,
            3,
            3,
        ),
        // One token picked, 5 left: the pick after the last draft token needs one of them.
        (WIDE, 6, 4, 4),
    ] {
        let mut s = Speculation::new();
        let mut g = generation(budget);
        let (drafter, _, asked) = scripted(&[1, 2, 3, 4, 5, 6]);
        s.set_drafter(drafter, None);
        s.prefilled();
        s.pick(&mut g, &mut pointing_at(9)).unwrap();
        let (batch, verify) = batch_of(s.next(Some(&mut g), &[9], limits));
        assert_eq!(asked.borrow()[0], asked_for, "{limits:?} budget {budget}");
        assert_eq!(batch.len() - 1, kept, "{limits:?} budget {budget}");
        assert!(verify);
    }
}

#[test]
fn a_generation_without_drafting_sends_no_draft_and_keeps_its_lookup() {
    let mut s = Speculation::new();
    let cfg = DraftConfig {
        adaptive: false,
        ..DraftConfig::default()
    };
    s.start(Some(cfg.clone()));
    let mut g = generation(10);
    s.prefilled();
    s.pick(&mut g, &mut pointing_at(3)).unwrap();
    // "1 2 3" seen before, followed by 4 5: prompt lookup drafts them.
    let conversation = [1, 2, 3, 4, 5, 1, 2, 3];
    let (batch, _) = batch_of(s.next(Some(&mut g), &conversation, WIDE));
    assert_eq!(batch, [3, 4, 5, 1, 2, 3]);
    s.pass_failed();
    // A generation that does not draft runs the pending token alone.
    s.start(None);
    let (batch, verify) = batch_of(s.next(Some(&mut g), &conversation, WIDE));
    assert_eq!((batch, verify), (vec![3], false));
    // Timed passes size drafts: a measured cost is kept across generations.
    s.pass_done(1.0);
    assert!(s.pass_cost().measured.iter().all(|&c| c == 0.0));
}
