//! Explicit prefill windows: prompts prefilled once into KV caches of their own, pinned under an
//! id with a time to live, that a generation names (`prefillWindow`) to skip prefilling them.
//! Unlike the implicit prefix windows (`windows.rs`), a window is never consumed: its KV is
//! copied into the session, so it serves any number of generations, and it serves only a prompt
//! it is an exact prefix of. This is the bookkeeping (ids, limits, expiry, least recently used);
//! the host runs the prefills.

use super::stats::{PrefillWindowInfo, PrefillWindowStats, PrefixKind, PrefixReport};
use crate::error::HostError;
use crate::prefix::PrefixStatus;
use engine::kv::KvCache;
use engine::Session;

/// A window's time to live when its creation does not say.
pub const DEFAULT_TTL_MS: f64 = 15_000.0;

struct Pinned {
    id: String,
    tokens: Vec<u32>,
    kv: KvCache,
    expires_at: f64,
    /// When it was last created, extended or used, as a count of those events (milliseconds
    /// tie too often to order them).
    last_used: u64,
}

impl Pinned {
    fn info(&self) -> PrefillWindowInfo {
        PrefillWindowInfo {
            id: self.id.clone(),
            tokens: self.tokens.len(),
            expires_at: self.expires_at,
        }
    }

    fn expired(&self, now: f64) -> bool {
        now >= self.expires_at
    }
}

/// A window taken out to be prefilled into (a new one, or one being extended), put back by
/// [`PrefillWindows::insert`] or [`PrefillWindows::put_back`].
pub(crate) struct Lent {
    pub kv: KvCache,
    /// The window's id and expiry when it is one being extended.
    existing: Option<(String, f64)>,
    /// Tokens already in `kv`.
    pub tokens: Vec<u32>,
}

pub(crate) struct PrefillWindows {
    held: Vec<Pinned>,
    /// KV caches of windows dropped, kept for the next ones (their pages counted by the plan).
    spare: Vec<KvCache>,
    max: usize,
    max_tokens: usize,
    /// Ids are `pw-<n>-<8 hex>`: the counter makes them unique, the hex (splitmix64 of a seed
    /// taken at open) makes a window's id hard to guess from another's. Not a secret.
    created: u64,
    seed: u64,
    /// Creations, extensions and uses so far: the least recently used has the oldest.
    uses: u64,
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl PrefillWindows {
    pub fn new(max: usize, max_tokens: usize, seed: u64) -> Self {
        PrefillWindows {
            held: Vec::new(),
            spare: Vec::new(),
            max,
            max_tokens,
            created: 0,
            seed: splitmix64(seed),
            uses: 0,
        }
    }

    fn enabled(&self) -> Result<(), HostError> {
        match self.max {
            0 => Err(HostError::PrefillWindowsDisabled),
            _ => Ok(()),
        }
    }

    /// Drops every window past its time to live.
    fn drop_expired(&mut self, now: f64) {
        let (expired, live): (Vec<Pinned>, Vec<Pinned>) =
            self.held.drain(..).partition(|w| w.expired(now));
        self.held = live;
        self.spare.extend(expired.into_iter().map(|w| w.kv));
    }

    fn position(&self, id: &str) -> Result<usize, HostError> {
        self.held
            .iter()
            .position(|w| w.id == id)
            .ok_or_else(|| HostError::PrefillWindowNotFound(id.into()))
    }

    /// Checks a window's prompt against the limits.
    fn check_prompt(&self, prompt: &[u32], context: usize) -> Result<(), HostError> {
        if prompt.is_empty() {
            return Err(HostError::EmptyPrompt);
        }
        if prompt.len() > self.max_tokens {
            return Err(HostError::InvalidArgument(format!(
                "a prefill window holds at most prefillWindowMaxTokens = {} tokens, got {}",
                self.max_tokens,
                prompt.len()
            )));
        }
        if prompt.len() > context {
            return Err(HostError::PromptTooLong {
                tokens: prompt.len(),
                context,
            });
        }
        Ok(())
    }

    /// A KV cache for a new window of `prompt`; when the count is full, the least recently used
    /// window is dropped for it (its id returned).
    pub fn lend_new(
        &mut self,
        session: &Session,
        prompt: &[u32],
        now: f64,
    ) -> Result<(Lent, Option<String>), HostError> {
        self.enabled()?;
        self.check_prompt(prompt, session.max_context())?;
        self.drop_expired(now);
        let mut replaced = None;
        if self.held.len() >= self.max {
            let lru = (0..self.held.len())
                .min_by_key(|&i| self.held[i].last_used)
                .unwrap_or(0);
            let w = self.held.remove(lru);
            replaced = Some(w.id);
            self.spare.push(w.kv);
        }
        let mut kv = self.spare.pop().unwrap_or_else(|| session.new_kv());
        kv.clear();
        let lent = Lent {
            kv,
            existing: None,
            tokens: Vec::new(),
        };
        Ok((lent, replaced))
    }

    /// Window `id` taken out to be extended to `prompt`, which must start with its tokens.
    pub fn lend_existing(
        &mut self,
        session: &Session,
        id: &str,
        prompt: &[u32],
        now: f64,
    ) -> Result<Lent, HostError> {
        self.enabled()?;
        self.drop_expired(now);
        let i = self.position(id)?;
        self.check_prompt(prompt, session.max_context())?;
        let held = &self.held[i].tokens;
        if !prompt.starts_with(held) {
            return Err(HostError::InvalidArgument(format!(
                "the prompt does not start with the {} tokens prefill window {id:?} holds",
                held.len()
            )));
        }
        let w = self.held.remove(i);
        Ok(Lent {
            kv: w.kv,
            existing: Some((w.id, w.expires_at)),
            tokens: w.tokens,
        })
    }

    /// Pins a prefilled window: a new one gets an id and expires `ttl_ms` from now; an extended
    /// one keeps its id, and its expiry unless `ttl_ms` is given.
    pub fn insert(
        &mut self,
        lent: Lent,
        tokens: Vec<u32>,
        ttl_ms: Option<f64>,
        now: f64,
    ) -> PrefillWindowInfo {
        let (id, expires_at) = match lent.existing {
            Some((id, at)) => (id, ttl_ms.map_or(at, |t| now + t)),
            None => {
                self.created += 1;
                let tag = splitmix64(self.seed ^ self.created) as u32;
                let id = format!("pw-{}-{tag:08x}", self.created);
                (id, now + ttl_ms.unwrap_or(DEFAULT_TTL_MS))
            }
        };
        self.uses += 1;
        let w = Pinned {
            id,
            tokens,
            kv: lent.kv,
            expires_at,
            last_used: self.uses,
        };
        let info = w.info();
        self.held.push(w);
        info
    }

    /// A lent window whose prefill failed: an extended one goes back as it was (its KV was
    /// rewound) unless `lost`; a new one's cache is kept for the next.
    pub fn put_back(&mut self, mut lent: Lent, lost: bool, now: f64) {
        match lent.existing.take() {
            Some(existing) if !lost => {
                let tokens = std::mem::take(&mut lent.tokens);
                let lent = Lent {
                    existing: Some(existing),
                    ..lent
                };
                self.insert(lent, tokens, None, now);
            }
            _ => {
                lent.kv.clear();
                self.spare.push(lent.kv);
            }
        }
    }

    /// Window `id`, unless it expired (then it is dropped).
    pub fn get(&mut self, id: &str, now: f64) -> Result<PrefillWindowInfo, HostError> {
        self.enabled()?;
        self.drop_expired(now);
        let i = self.position(id)?;
        Ok(self.held[i].info())
    }

    /// New time to live for window `id`, from now.
    pub fn refresh(
        &mut self,
        id: &str,
        ttl_ms: f64,
        now: f64,
    ) -> Result<PrefillWindowInfo, HostError> {
        self.enabled()?;
        self.drop_expired(now);
        let i = self.position(id)?;
        self.held[i].expires_at = now + ttl_ms;
        Ok(self.held[i].info())
    }

    /// Drops window `id`; false when there is none (or it had expired).
    pub fn delete(&mut self, id: &str, now: f64) -> Result<bool, HostError> {
        self.enabled()?;
        self.drop_expired(now);
        let Ok(i) = self.position(id) else {
            return Ok(false);
        };
        let mut w = self.held.remove(i);
        w.kv.clear();
        self.spare.push(w.kv);
        Ok(true)
    }

    /// The windows not expired, oldest first.
    pub fn list(&mut self, now: f64) -> Result<Vec<PrefillWindowInfo>, HostError> {
        self.enabled()?;
        self.drop_expired(now);
        Ok(self.held.iter().map(Pinned::info).collect())
    }

    /// Forgets every window.
    pub fn clear(&mut self) {
        for mut w in self.held.drain(..) {
            w.kv.clear();
            self.spare.push(w.kv);
        }
    }

    /// Bytes their KV caches (spare ones included) have allocated.
    pub fn kv_bytes(&self) -> usize {
        let held: usize = self.held.iter().map(|w| w.kv.bytes()).sum();
        held + self.spare.iter().map(KvCache::bytes).sum::<usize>()
    }

    pub fn stats(&self) -> PrefillWindowStats {
        PrefillWindowStats {
            count: self.held.len(),
            max: self.max,
            tokens: self.held.iter().map(|w| w.tokens.len() as u64).sum(),
            kv_bytes: self.kv_bytes() as u64,
            windows: self.held.iter().map(Pinned::info).collect(),
        }
    }

    /// Serves `prompt` (a whole conversation) from window `id`: on a hit the window's KV is
    /// copied into `session` and the report says how many prompt tokens it holds. Anything
    /// else (and a copy that fails) leaves the session empty, for a cold prefill.
    pub fn restore(
        &mut self,
        id: &str,
        session: &mut Session,
        prompt: &[u32],
        now: f64,
    ) -> PrefixReport {
        let report = |status, reused: usize| PrefixReport {
            status,
            reused: reused as u64,
            prefilled: (prompt.len() - reused) as u64,
            window: 0,
            kind: PrefixKind::Explicit,
            id: Some(id.to_string()),
        };
        if self.max == 0 {
            return report(PrefixStatus::Disabled, 0);
        }
        let Some(i) = self.held.iter().position(|w| w.id == id) else {
            return report(PrefixStatus::Miss, 0);
        };
        if self.held[i].expired(now) {
            let mut w = self.held.remove(i);
            w.kv.clear();
            self.spare.push(w.kv);
            return report(PrefixStatus::Expired, 0);
        }
        let w = &mut self.held[i];
        // The prompt's last token must run (its logits pick the next token).
        if w.tokens.len() >= prompt.len() || !prompt.starts_with(&w.tokens) {
            return report(PrefixStatus::Mismatch, 0);
        }
        if w.kv.len() != w.tokens.len() || session.load_kv(&w.kv).is_err() {
            session.reset();
            return report(PrefixStatus::Miss, 0);
        }
        self.uses += 1;
        w.last_used = self.uses;
        report(PrefixStatus::Hit, w.tokens.len())
    }
}
