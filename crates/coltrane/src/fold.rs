//! Folds: brackets `()`, `[]`, `{}` and `"` quotes in free text. A token's fold cost (what it
//! does to the open brackets, string-aware) is computed once per vocabulary; the fold state of a
//! sequence is a stack of open brackets plus whether a quote is open.

/// A bracket kind: 0 `()`, 1 `[]`, 2 `{}`.
pub type Bracket = u8;

const OPEN: [u8; 3] = [b'(', b'[', b'{'];
const CLOSE: [u8; 3] = [b')', b']', b'}'];

/// Deepest bracket nesting tracked (two bits a level in a u128).
pub const MAX_DEPTH: usize = 64;
/// Most unmatched closers or openers one token may carry and still be judged exactly.
const MAX_OPS: usize = 16;

/// Whether a quote is open, and whether its last byte was an unescaped backslash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Quote {
    #[default]
    Outside,
    Inside,
    InsideEscaped,
}

impl Quote {
    fn index(self) -> usize {
        self as usize
    }
}

/// What a token does to the folds when it starts in a given quote state. Matched pairs inside
/// the token cancel; what remains is a run of closers for brackets opened before it (`pops`,
/// innermost first), then openers it leaves open (`pushes`, outermost first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FoldEffect {
    pub pops: u32,
    pub n_pops: u8,
    pub pushes: u32,
    pub n_pushes: u8,
    /// Highest depth reached, relative to the start depth.
    pub peak: i8,
    /// Net depth change (`n_pushes − n_pops`).
    pub delta: i8,
    /// Lowest depth reached, relative to the start (`−n_pops`).
    pub min_prefix: i8,
    pub end: Quote,
    /// A bracket closed by the wrong kind inside the token, or more than 16 unmatched ones.
    pub broken: bool,
}

impl FoldEffect {
    const IDENTITY: FoldEffect = FoldEffect {
        pops: 0,
        n_pops: 0,
        pushes: 0,
        n_pushes: 0,
        peak: 0,
        delta: 0,
        min_prefix: 0,
        end: Quote::Outside,
        broken: false,
    };

    /// The `i`-th closer (innermost first) or opener (outermost first).
    pub fn pop(&self, i: usize) -> Bracket {
        ((self.pops >> (2 * i)) & 3) as u8
    }

    pub fn push(&self, i: usize) -> Bracket {
        ((self.pushes >> (2 * i)) & 3) as u8
    }
}

/// A token's fold effect for each quote state it may start in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FoldCost {
    effects: [FoldEffect; 3],
    neutral: bool,
}

impl FoldCost {
    pub const NEUTRAL: FoldCost = FoldCost {
        effects: [
            FoldEffect::IDENTITY,
            FoldEffect {
                end: Quote::Inside,
                ..FoldEffect::IDENTITY
            },
            // A neutral token's first byte is escaped, then the quote is plainly open.
            FoldEffect {
                end: Quote::Inside,
                ..FoldEffect::IDENTITY
            },
        ],
        neutral: true,
    };

    /// Touches no bracket, quote or backslash: leaves every fold state as it was (except that
    /// it consumes a pending escape, which matters only for the byte after it).
    pub fn is_neutral(&self) -> bool {
        self.neutral
    }

    pub fn from(&self, start: Quote) -> &FoldEffect {
        &self.effects[start.index()]
    }
}

fn structural(b: u8) -> bool {
    matches!(b, b'(' | b')' | b'[' | b']' | b'{' | b'}' | b'"' | b'\\')
}

/// The fold cost of a token's bytes.
pub fn fold_cost(bytes: &[u8]) -> FoldCost {
    if !bytes.iter().any(|&b| structural(b)) {
        let mut c = FoldCost::NEUTRAL;
        // An escape pending before the token is consumed by its first byte.
        if bytes.is_empty() {
            c.effects[Quote::InsideEscaped.index()].end = Quote::InsideEscaped;
        }
        return c;
    }
    FoldCost {
        effects: [Quote::Outside, Quote::Inside, Quote::InsideEscaped].map(|q| effect(bytes, q)),
        neutral: false,
    }
}

fn effect(bytes: &[u8], start: Quote) -> FoldEffect {
    let mut e = FoldEffect::IDENTITY;
    let mut quote = start;
    // Openers inside the token not yet closed (their kinds), and the running depth.
    let mut open: Vec<Bracket> = Vec::new();
    let mut pops: Vec<Bracket> = Vec::new();
    let mut depth: i32 = 0;
    let mut peak: i32 = 0;
    for &b in bytes {
        match quote {
            Quote::InsideEscaped => quote = Quote::Inside,
            Quote::Inside => match b {
                b'\\' => quote = Quote::InsideEscaped,
                b'"' => quote = Quote::Outside,
                _ => {}
            },
            Quote::Outside => {
                if b == b'"' {
                    quote = Quote::Inside;
                } else if let Some(k) = OPEN.iter().position(|&o| o == b) {
                    open.push(k as u8);
                    depth += 1;
                    peak = peak.max(depth);
                } else if let Some(k) = CLOSE.iter().position(|&c| c == b) {
                    match open.pop() {
                        Some(o) if o == k as u8 => {}
                        Some(_) => e.broken = true,
                        None => pops.push(k as u8),
                    }
                    depth -= 1;
                }
            }
        }
    }
    if pops.len() > MAX_OPS || open.len() > MAX_OPS {
        e.broken = true;
    }
    for (i, &k) in pops.iter().take(MAX_OPS).enumerate() {
        e.pops |= (k as u32) << (2 * i);
    }
    for (i, &k) in open.iter().take(MAX_OPS).enumerate() {
        e.pushes |= (k as u32) << (2 * i);
    }
    e.n_pops = pops.len().min(MAX_OPS) as u8;
    e.n_pushes = open.len().min(MAX_OPS) as u8;
    e.peak = peak.clamp(-64, 64) as i8;
    e.delta = e.n_pushes as i8 - e.n_pops as i8;
    e.min_prefix = -(e.n_pops as i8);
    e.end = quote;
    e
}

/// The fold state of a sequence: open brackets (innermost in the low bits) and the quote.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct FoldState {
    pub stack: u128,
    pub depth: u8,
    pub quote: Quote,
}

impl FoldState {
    /// The innermost open bracket `i` levels down (0 = innermost).
    pub fn open(&self, i: usize) -> Bracket {
        ((self.stack >> (2 * i)) & 3) as u8
    }

    /// Everything closed: the harmonic closure that lets a balanced text end.
    pub fn closed(&self) -> bool {
        self.depth == 0 && self.quote == Quote::Outside
    }

    /// Fewest single-byte tokens that close every fold (an escape, the quote, each bracket).
    pub fn close_cost(&self) -> usize {
        self.depth as usize
            + match self.quote {
                Quote::Outside => 0,
                Quote::Inside => 1,
                Quote::InsideEscaped => 2,
            }
    }

    /// The state after a token with `cost`, if the token keeps the folds well formed within
    /// `max_depth`.
    pub fn after(&self, cost: &FoldCost, max_depth: usize) -> Option<FoldState> {
        if cost.is_neutral() {
            let quote = match self.quote {
                Quote::InsideEscaped => Quote::Inside,
                q => q,
            };
            return Some(FoldState { quote, ..*self });
        }
        let e = cost.from(self.quote);
        if e.broken || e.n_pops > self.depth {
            return None;
        }
        if (0..e.n_pops as usize).any(|i| e.pop(i) != self.open(i)) {
            return None;
        }
        if self.depth as i32 + e.peak as i32 > max_depth as i32 {
            return None;
        }
        let mut s = *self;
        s.stack >>= 2 * e.n_pops as u32;
        s.depth -= e.n_pops;
        for i in 0..e.n_pushes as usize {
            s.stack = (s.stack << 2) | e.push(i) as u128;
            s.depth += 1;
        }
        s.quote = e.end;
        Some(s)
    }

    /// Accepts a token whatever it does (a token let through by a fallback): unmatched or
    /// mismatched closers are ignored, brackets past `MAX_DEPTH` are not tracked. Returns the
    /// number of fold violations the token made.
    pub fn force(&mut self, bytes: &[u8], max_depth: usize) -> u32 {
        let mut violations = 0;
        for &b in bytes {
            match self.quote {
                Quote::InsideEscaped => self.quote = Quote::Inside,
                Quote::Inside => match b {
                    b'\\' => self.quote = Quote::InsideEscaped,
                    b'"' => self.quote = Quote::Outside,
                    _ => {}
                },
                Quote::Outside => {
                    if b == b'"' {
                        self.quote = Quote::Inside;
                    } else if let Some(k) = OPEN.iter().position(|&o| o == b) {
                        if self.depth as usize >= max_depth {
                            violations += 1;
                        }
                        if (self.depth as usize) < MAX_DEPTH {
                            self.stack = (self.stack << 2) | k as u128;
                            self.depth += 1;
                        }
                    } else if let Some(k) = CLOSE.iter().position(|&c| c == b) {
                        if self.depth > 0 && self.open(0) == k as u8 {
                            self.stack >>= 2;
                            self.depth -= 1;
                        } else {
                            violations += 1;
                        }
                    }
                }
            }
        }
        violations
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(tokens: &[&str], max_depth: usize) -> Option<FoldState> {
        let mut s = FoldState::default();
        for t in tokens {
            s = s.after(&fold_cost(t.as_bytes()), max_depth)?;
        }
        Some(s)
    }

    #[test]
    fn costs_cancel_pairs_and_keep_the_rest() {
        let c = fold_cost(b"a(b)c");
        assert!(!c.is_neutral());
        let e = c.from(Quote::Outside);
        assert_eq!((e.n_pops, e.n_pushes, e.peak, e.delta), (0, 0, 1, 0));
        let e = *fold_cost(b"])[{").from(Quote::Outside);
        assert_eq!((e.n_pops, e.n_pushes, e.delta, e.min_prefix), (2, 2, 0, -2));
        assert_eq!((e.pop(0), e.pop(1), e.push(0), e.push(1)), (1, 0, 1, 2));
        assert!(fold_cost(b"(]").from(Quote::Outside).broken);
        assert!(fold_cost(b"hello").is_neutral());
    }

    #[test]
    fn quotes_hide_brackets_and_escapes_hide_quotes() {
        let e = *fold_cost(b"\"(\"").from(Quote::Outside);
        assert_eq!((e.n_pushes, e.end), (0, Quote::Outside));
        // Inside a quote, `(` is text and `"` closes it.
        let e = *fold_cost(b"(\"(").from(Quote::Inside);
        assert_eq!((e.n_pushes, e.end), (1, Quote::Outside));
        let e = *fold_cost(b"\\\"").from(Quote::Inside);
        assert_eq!(e.end, Quote::Inside);
        let e = *fold_cost(b"a\\").from(Quote::Inside);
        assert_eq!(e.end, Quote::InsideEscaped);
        let e = *fold_cost(b"\"").from(Quote::InsideEscaped);
        assert_eq!(e.end, Quote::Inside);
    }

    #[test]
    fn state_follows_tokens_and_rejects_bad_ones() {
        let s = run(&["f(", "x, [", "1]", ""], 8).unwrap();
        assert_eq!((s.depth, s.open(0)), (1, 0));
        assert!(run(&["f(", "]"], 8).is_none());
        assert!(run(&[")"], 8).is_none());
        assert!(run(&["((("], 2).is_none());
        assert!(run(&["((", "()"], 2).is_none());
        let s = run(&["say \"", "(", "\""], 8).unwrap();
        assert!(s.closed());
        assert_eq!(run(&["(\"a"], 8).unwrap().close_cost(), 2);
    }

    #[test]
    fn forcing_counts_violations() {
        let mut s = FoldState::default();
        assert_eq!(s.force(b"a) (b]", 8), 2);
        assert_eq!(s.depth, 1);
        assert_eq!(s.force(b"((", 2), 1);
        assert_eq!(s.depth, 3);
    }
}
