//! The conversation in use: its KV cache (in the session), its tokens, the generation running on
//! it and what each of that generation's steps did.

use engine::decode::Generation;
use engine::{Session, StepInfo};

pub(crate) struct Conversation {
    pub session: Session,
    /// Every token handed out or prompted: those in the KV cache, then the pending one.
    pub tokens: Vec<u32>,
    /// The generation in progress (or just finished), started by `Host::start`.
    pub generation: Option<Generation>,
    /// What each step of the current generation did.
    pub steps: Vec<StepInfo>,
    /// When it was last used (ms on the host's clock): a prefix window's time to live runs from
    /// its last token.
    pub last_used: f64,
}

impl Conversation {
    pub fn new(session: Session, now: f64) -> Self {
        Conversation {
            session,
            tokens: Vec::new(),
            generation: None,
            steps: Vec::new(),
            last_used: now,
        }
    }

    /// Forgets it: KV cache, tokens, generation. The session's buffers are kept.
    pub fn forget(&mut self) {
        self.session.reset();
        self.tokens.clear();
        self.generation = None;
        self.steps.clear();
    }
}
