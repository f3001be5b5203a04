//! `pattern`: an ECMA-262 regular expression, as JSON Schema means it (unanchored unless `^…$`),
//! compiled to a DFA over code points, together with the string's `minLength`/`maxLength` (the
//! DFA counts characters as far as a bound needs). Parsed here (`Parser`), built as a Thompson
//! NFA, then determinised: a state is a set of NFA states and whether the text is still empty
//! (for `^`); `$` is taken only where the text ends. A state whose closure reaches the match
//! goes to an accepting sink (a match anywhere is a match). Each state knows the fewest bytes
//! of JSON string content that reach acceptance (escapes counted), which the matcher's exact
//! closing costs are built on, and dead states are removed, so every live state can finish.
//!
//! Not compiled, refused by name: backreferences, lookahead and lookbehind, `\b`/`\B`, Unicode
//! property escapes. `\d`, `\w` are ASCII (ECMA-262), `\s` is ECMA-262's white space and line
//! terminators, `.` is any character but a line terminator.

use crate::cost::INF;
use std::collections::{BinaryHeap, HashMap};

/// NFA states at most (counted repetitions expand).
const MAX_NFA: usize = 10_000;
/// DFA states at most (the length product included: a hostname pattern under `maxLength: 253`
/// is ~33,000).
const MAX_DFA: usize = 65_536;
/// The highest code point; surrogates are no characters of a JSON string.
const MAX_CP: u32 = 0x10FFFF;
const ALL: &[(u32, u32)] = &[(0, 0xD7FF), (0xE000, MAX_CP)];

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PatternError {
    #[error("invalid regular expression: {0}")]
    Syntax(String),
    #[error("{0} cannot be compiled to an automaton")]
    Unsupported(&'static str),
    #[error("the pattern needs more than {0} states")]
    TooLarge(usize),
}

/// A compiled pattern (with the string's length bounds).
#[derive(Debug, Clone, PartialEq)]
pub struct Pattern {
    /// Per state: sorted, disjoint (first, last, target) character ranges; a character in no
    /// range kills the string.
    trans: Vec<Vec<(u32, u32, u32)>>,
    accept: Vec<bool>,
    /// Fewest bytes of string content from each state to an accepting one.
    close: Vec<u32>,
    /// Every character loops back and the state accepts: the rest of the string is free.
    free: Vec<bool>,
    /// What it was compiled from: the source and the length bounds.
    pub source: String,
    pub min_len: u32,
    pub max_len: u32,
}

impl Pattern {
    /// Compiles `source` for strings of `min_len..=max_len` characters; where the count up to
    /// a large `max_len` makes too many states, a lower bound (the most the states allow, halved
    /// until they fit, not below `min_len` or 64): never a value the schema refuses, only fewer
    /// long ones.
    pub fn compile(source: &str, min_len: u32, max_len: u32) -> Result<Pattern, PatternError> {
        let ast = Parser::new(source).parse()?;
        let mut nfa = Nfa::default();
        let done = nfa.push(St::Match)?;
        let body = nfa.build(&ast, done)?;
        // Unanchored: any characters may come before the match (`^` then cannot match).
        let search = nfa.push(St::Split(Vec::new()))?;
        let skip = nfa.push(St::Chars(ALL.to_vec(), search))?;
        nfa.states[search] = St::Split(vec![body, skip]);
        let dfa = nfa.determinise(search, done)?;
        // The product has at most (states × (count + 1)): start from a count that may fit.
        let floor = min_len.max(64);
        let mut max = max_len;
        if max != u32::MAX {
            let fits = (MAX_DFA / dfa.trans.len().max(1)).saturating_sub(1) as u32;
            max = max.min(fits.max(floor));
        }
        loop {
            match dfa.clone().with_lengths(min_len, max) {
                Err(PatternError::TooLarge(_)) if max != u32::MAX && max / 2 >= floor => max /= 2,
                Ok(product) => {
                    return Ok(Pattern {
                        source: source.to_string(),
                        min_len,
                        max_len,
                        ..product.finish()
                    })
                }
                Err(e) => return Err(e),
            }
        }
    }

    pub fn start(&self) -> u32 {
        0
    }

    /// The state after character `cp` (`None`: no string with this prefix matches).
    pub fn step(&self, s: u32, cp: u32) -> Option<u32> {
        let row = &self.trans[s as usize];
        let i = row.partition_point(|&(_, last, _)| last < cp);
        row.get(i)
            .filter(|&&(first, _, _)| first <= cp)
            .map(|&(_, _, t)| t)
    }

    /// Whether the whole of `text` matches (tests).
    #[cfg(test)]
    pub(crate) fn matches(&self, text: &str) -> bool {
        let mut s = self.start();
        for c in text.chars() {
            match self.step(s, c as u32) {
                Some(t) => s = t,
                None => return false,
            }
        }
        self.accepts(s)
    }

    pub fn accepts(&self, s: u32) -> bool {
        self.accept[s as usize]
    }

    /// Fewest bytes of content from state `s` to a match.
    pub fn close(&self, s: u32) -> u32 {
        self.close[s as usize]
    }

    /// Fewest bytes from state `s` to a match when the next character lies in `first..=last`
    /// and takes `width(cp)` bytes to write; `INF` if none of them leads anywhere.
    pub fn close_through(
        &self,
        s: u32,
        first: u32,
        last: u32,
        width: impl Fn(u32, u32) -> u32,
    ) -> u32 {
        let mut best = INF;
        for &(a, b, t) in &self.trans[s as usize] {
            let (lo, hi) = (a.max(first), b.min(last));
            if lo <= hi && self.close[t as usize] < INF {
                best = best.min(width(lo, hi).saturating_add(self.close[t as usize]));
            }
        }
        best
    }

    pub fn free(&self, s: u32) -> bool {
        self.free[s as usize]
    }

    /// State `s`'s transitions: sorted, disjoint (first, last, target) character ranges.
    pub fn row(&self, s: u32) -> &[(u32, u32, u32)] {
        &self.trans[s as usize]
    }
}

/// Fewest bytes that write a character of `first..=last` in a JSON string.
pub fn min_width(first: u32, last: u32) -> u32 {
    // Cheapest first: a plain ASCII character, a two-byte escape, UTF-8 by length, `\u00XX`.
    let overlaps = |a: u32, b: u32| first <= b && a <= last;
    if overlaps(0x20, 0x21) || overlaps(0x23, 0x5B) || overlaps(0x5D, 0x7F) {
        1
    } else if overlaps(0x22, 0x22)
        || overlaps(0x5C, 0x5C)
        || [8, 9, 0xA, 0xC, 0xD].iter().any(|&c| overlaps(c, c))
        || overlaps(0x80, 0x7FF)
    {
        2
    } else if overlaps(0x800, 0xFFFF) {
        3
    } else if overlaps(0x10000, MAX_CP) {
        4
    } else {
        6
    }
}

// --- parsing ---------------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Ast {
    Chars(Vec<(u32, u32)>),
    Seq(Vec<Ast>),
    Alt(Vec<Ast>),
    Repeat(Box<Ast>, u32, Option<u32>),
    /// `^`
    Start,
    /// `$`
    End,
}

struct Parser {
    s: Vec<char>,
    at: usize,
}

impl Parser {
    fn new(source: &str) -> Parser {
        Parser {
            s: source.chars().collect(),
            at: 0,
        }
    }

    fn parse(mut self) -> Result<Ast, PatternError> {
        let a = self.alt()?;
        if self.at < self.s.len() {
            return Err(PatternError::Syntax(format!(
                "unmatched ')' at {}",
                self.at
            )));
        }
        Ok(a)
    }

    fn peek(&self) -> Option<char> {
        self.s.get(self.at).copied()
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn alt(&mut self) -> Result<Ast, PatternError> {
        let mut alts = vec![self.seq()?];
        while self.eat('|') {
            alts.push(self.seq()?);
        }
        Ok(if alts.len() == 1 {
            alts.pop().unwrap_or(Ast::Seq(Vec::new()))
        } else {
            Ast::Alt(alts)
        })
    }

    fn seq(&mut self) -> Result<Ast, PatternError> {
        let mut items = Vec::new();
        while let Some(c) = self.peek() {
            if c == '|' || c == ')' {
                break;
            }
            let atom = self.atom()?;
            items.push(self.quantified(atom)?);
        }
        Ok(Ast::Seq(items))
    }

    fn quantified(&mut self, atom: Ast) -> Result<Ast, PatternError> {
        let simple = |c| match c {
            '*' => Some((0, None)),
            '+' => Some((1, None)),
            '?' => Some((0, Some(1))),
            _ => None,
        };
        let (min, max) = match self.peek() {
            Some(c) if simple(c).is_some() => {
                self.at += 1;
                simple(c).unwrap_or((0, None))
            }
            Some('{') => match self.braces() {
                Some(q) => q,
                None => return Ok(atom),
            },
            _ => return Ok(atom),
        };
        self.eat('?'); // lazy or greedy: the same strings match
        if matches!(atom, Ast::Start | Ast::End) {
            return Err(PatternError::Syntax(
                "a quantifier after an assertion".into(),
            ));
        }
        if max.is_some_and(|m| m < min) {
            return Err(PatternError::Syntax(
                "numbers out of order in {} quantifier".into(),
            ));
        }
        Ok(Ast::Repeat(Box::new(atom), min, max))
    }

    /// `{n}`, `{n,}`, `{n,m}` at the cursor (consumed); `None` (nothing consumed) when the
    /// brace is a literal one (Annex B).
    fn braces(&mut self) -> Option<(u32, Option<u32>)> {
        let start = self.at;
        self.at += 1;
        let num = |p: &mut Parser| {
            let from = p.at;
            while p.peek().is_some_and(|c| c.is_ascii_digit()) {
                p.at += 1;
            }
            (p.at > from).then(|| {
                p.s[from..p.at]
                    .iter()
                    .collect::<String>()
                    .parse::<u32>()
                    .unwrap_or(u32::MAX)
            })
        };
        let q = (|| {
            let min = num(self)?;
            let max = if self.eat(',') { num(self) } else { Some(min) };
            self.eat('}').then_some((min, max))
        })();
        if q.is_none() {
            self.at = start;
        }
        q
    }

    fn atom(&mut self) -> Result<Ast, PatternError> {
        let c = self
            .peek()
            .ok_or_else(|| PatternError::Syntax("unexpected end".into()))?;
        self.at += 1;
        Ok(match c {
            '^' => Ast::Start,
            '$' => Ast::End,
            '.' => Ast::Chars(negate(&[(0xA, 0xA), (0xD, 0xD), (0x2028, 0x2029)])),
            '(' => {
                if self.eat('?') {
                    match self.peek() {
                        Some(':') => self.at += 1,
                        Some('=') | Some('!') => {
                            return Err(PatternError::Unsupported("a lookahead"))
                        }
                        Some('<') if matches!(self.s.get(self.at + 1), Some('=') | Some('!')) => {
                            return Err(PatternError::Unsupported("a lookbehind"))
                        }
                        Some('<') => {
                            // A named group: its name, then the group.
                            while let Some(c) = self.peek() {
                                self.at += 1;
                                if c == '>' {
                                    break;
                                }
                            }
                        }
                        _ => return Err(PatternError::Syntax("invalid group".into())),
                    }
                }
                let inner = self.alt()?;
                if !self.eat(')') {
                    return Err(PatternError::Syntax("unterminated group".into()));
                }
                inner
            }
            '[' => Ast::Chars(self.class()?),
            '\\' => Ast::Chars(self.escape(false)?),
            '*' | '+' | '?' => {
                return Err(PatternError::Syntax(format!(
                    "nothing to repeat before '{c}'"
                )))
            }
            ')' => return Err(PatternError::Syntax("unmatched ')'".into())),
            c => Ast::Chars(vec![(c as u32, c as u32)]),
        })
    }

    fn class(&mut self) -> Result<Vec<(u32, u32)>, PatternError> {
        let negated = self.eat('^');
        let mut set: Vec<(u32, u32)> = Vec::new();
        loop {
            let c = self
                .peek()
                .ok_or_else(|| PatternError::Syntax("unterminated character class".into()))?;
            self.at += 1;
            if c == ']' {
                break;
            }
            let first = self.class_atom(c)?;
            // A range `a-z`; a `-` first, last or beside a class escape is itself.
            let ranged = self.peek() == Some('-')
                && self.s.get(self.at + 1).is_some_and(|&n| n != ']')
                && single(&first).is_some();
            if !ranged {
                set.extend(first);
                continue;
            }
            self.at += 1;
            let n = self.s[self.at];
            self.at += 1;
            let last = self.class_atom(n)?;
            match (single(&first), single(&last)) {
                (Some(lo), Some(hi)) if lo <= hi => set.push((lo, hi)),
                (Some(_), Some(_)) => {
                    return Err(PatternError::Syntax(
                        "range out of order in character class".into(),
                    ))
                }
                _ => return Err(PatternError::Syntax("a class escape ends a range".into())),
            }
        }
        let set = normalize(set);
        Ok(if negated { negate(&set) } else { set })
    }

    fn class_atom(&mut self, c: char) -> Result<Vec<(u32, u32)>, PatternError> {
        if c == '\\' {
            return self.escape(true);
        }
        Ok(vec![(c as u32, c as u32)])
    }

    /// After a backslash: the characters it stands for.
    fn escape(&mut self, in_class: bool) -> Result<Vec<(u32, u32)>, PatternError> {
        let c = self
            .peek()
            .ok_or_else(|| PatternError::Syntax("\\ at end of pattern".into()))?;
        self.at += 1;
        let one = |cp: u32| Ok(vec![(cp, cp)]);
        match c {
            'd' => Ok(DIGIT.to_vec()),
            'D' => Ok(negate(DIGIT)),
            'w' => Ok(WORD.to_vec()),
            'W' => Ok(negate(WORD)),
            's' => Ok(SPACE.to_vec()),
            'S' => Ok(negate(SPACE)),
            'b' if in_class => one(8),
            'b' | 'B' => Err(PatternError::Unsupported(
                "a word-boundary assertion (\\b, \\B)",
            )),
            '1'..='9' => Err(PatternError::Unsupported("a backreference")),
            'k' if self.peek() == Some('<') => Err(PatternError::Unsupported("a backreference")),
            'p' | 'P' => Err(PatternError::Unsupported(
                "a Unicode property escape (\\p, \\P)",
            )),
            '0' => one(0),
            't' => one(9),
            'n' => one(0xA),
            'v' => one(0xB),
            'f' => one(0xC),
            'r' => one(0xD),
            'c' => match self.peek() {
                Some(l) if l.is_ascii_alphabetic() => {
                    self.at += 1;
                    one(l as u32 % 32)
                }
                // Annex B: a backslash, and the `c` read as itself next.
                _ => {
                    self.at -= 1;
                    one('\\' as u32)
                }
            },
            'x' => match self.hex(2) {
                Some(v) => one(v),
                None => one('x' as u32),
            },
            'u' => {
                if self.eat('{') {
                    let from = self.at;
                    while self.peek().is_some_and(|c| c.is_ascii_hexdigit()) {
                        self.at += 1;
                    }
                    let digits: String = self.s[from..self.at].iter().collect();
                    let v = u32::from_str_radix(&digits, 16)
                        .ok()
                        .filter(|&v| v <= MAX_CP);
                    match (v, self.eat('}')) {
                        (Some(v), true) => one(v),
                        _ => Err(PatternError::Syntax("invalid \\u{…} escape".into())),
                    }
                } else {
                    match self.hex(4) {
                        Some(hi @ 0xD800..=0xDBFF) => {
                            // A surrogate pair written as two escapes is one character.
                            if self.eat('\\') && self.eat('u') {
                                if let Some(lo @ 0xDC00..=0xDFFF) = self.hex(4) {
                                    return one(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00));
                                }
                            }
                            Err(PatternError::Unsupported("a lone surrogate"))
                        }
                        Some(0xDC00..=0xDFFF) => Err(PatternError::Unsupported("a lone surrogate")),
                        Some(v) => one(v),
                        None => one('u' as u32),
                    }
                }
            }
            c => one(c as u32),
        }
    }

    fn hex(&mut self, n: usize) -> Option<u32> {
        let digits: String = self.s.get(self.at..self.at + n)?.iter().collect();
        if digits.len() != n || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        self.at += n;
        u32::from_str_radix(&digits, 16).ok()
    }
}

/// The one character a set holds, if it holds one.
fn single(set: &[(u32, u32)]) -> Option<u32> {
    match set {
        [(a, b)] if a == b => Some(*a),
        _ => None,
    }
}

const DIGIT: &[(u32, u32)] = &[(0x30, 0x39)];
const WORD: &[(u32, u32)] = &[(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)];
const SPACE: &[(u32, u32)] = &[
    (0x9, 0xD),
    (0x20, 0x20),
    (0xA0, 0xA0),
    (0x1680, 0x1680),
    (0x2000, 0x200A),
    (0x2028, 0x2029),
    (0x202F, 0x202F),
    (0x205F, 0x205F),
    (0x3000, 0x3000),
    (0xFEFF, 0xFEFF),
];

/// Sorted, merged ranges.
fn normalize(mut set: Vec<(u32, u32)>) -> Vec<(u32, u32)> {
    set.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::with_capacity(set.len());
    for (a, b) in set {
        match out.last_mut() {
            Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// Every character (no surrogate) not in `set`.
fn negate(set: &[(u32, u32)]) -> Vec<(u32, u32)> {
    let set = normalize(set.to_vec());
    let mut out = Vec::new();
    let mut next = 0u32;
    for &(a, b) in &set {
        if a > next {
            out.push((next, a - 1));
        }
        next = b.saturating_add(1);
    }
    if next <= MAX_CP {
        out.push((next, MAX_CP));
    }
    // No surrogates.
    let mut clean = Vec::new();
    for (a, b) in out {
        for &(x, y) in ALL {
            let (lo, hi) = (a.max(x), b.min(y));
            if lo <= hi {
                clean.push((lo, hi));
            }
        }
    }
    clean
}

// --- NFA and DFA -----------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum St {
    Chars(Vec<(u32, u32)>, usize),
    Split(Vec<usize>),
    /// `^`: passable only before the first character.
    Start(usize),
    /// `$`: passable only at the end of the string.
    End(usize),
    Match,
}

#[derive(Default)]
struct Nfa {
    states: Vec<St>,
}

impl Nfa {
    fn push(&mut self, s: St) -> Result<usize, PatternError> {
        if self.states.len() >= MAX_NFA {
            return Err(PatternError::TooLarge(MAX_NFA));
        }
        self.states.push(s);
        Ok(self.states.len() - 1)
    }

    /// States for `a` that continue to `next`; returns the entry.
    fn build(&mut self, a: &Ast, next: usize) -> Result<usize, PatternError> {
        Ok(match a {
            Ast::Chars(set) => self.push(St::Chars(set.clone(), next))?,
            Ast::Seq(items) => {
                let mut at = next;
                for item in items.iter().rev() {
                    at = self.build(item, at)?;
                }
                at
            }
            Ast::Alt(alts) => {
                let mut entries = Vec::with_capacity(alts.len());
                for alt in alts {
                    entries.push(self.build(alt, next)?);
                }
                self.push(St::Split(entries))?
            }
            Ast::Start => self.push(St::Start(next))?,
            Ast::End => self.push(St::End(next))?,
            Ast::Repeat(inner, min, max) => {
                let mut at = next;
                match max {
                    None => {
                        let lp = self.push(St::Split(Vec::new()))?;
                        let body = self.build(inner, lp)?;
                        self.states[lp] = St::Split(vec![body, next]);
                        at = lp;
                    }
                    Some(max) => {
                        // Optional copies, nested: skipping one skips those after it.
                        for _ in *min..*max {
                            let body = self.build(inner, at)?;
                            at = self.push(St::Split(vec![body, next]))?;
                        }
                    }
                }
                for _ in 0..*min {
                    at = self.build(inner, at)?;
                }
                at
            }
        })
    }

    /// The states reachable from `kernel` without reading: `^` passed only `at_start`, `$`
    /// only `at_end`.
    fn closure(&self, kernel: &[usize], at_start: bool, at_end: bool) -> Vec<usize> {
        let mut seen = vec![false; self.states.len()];
        let mut stack: Vec<usize> = kernel.to_vec();
        let mut out = Vec::new();
        while let Some(s) = stack.pop() {
            if std::mem::replace(&mut seen[s], true) {
                continue;
            }
            out.push(s);
            match &self.states[s] {
                St::Split(next) => stack.extend(next),
                St::Start(n) if at_start => stack.push(*n),
                St::End(n) if at_end => stack.push(*n),
                _ => {}
            }
        }
        out
    }

    fn determinise(&self, start: usize, done: usize) -> Result<Dfa, PatternError> {
        // A DFA state: the NFA states entered (sorted), and whether nothing was read yet; the
        // sink (a match was found) is its own.
        type Key = (Vec<usize>, bool);
        let mut ids: HashMap<Key, u32> = HashMap::new();
        let mut keys: Vec<Key> = Vec::new();
        let mut dfa = Dfa::default();
        let sink = 0u32;
        dfa.add(vec![(0, 0xD7FF, sink), (0xE000, MAX_CP, sink)], true);
        let first: Key = (vec![start], true);
        ids.insert(first.clone(), 1);
        keys.push((Vec::new(), false)); // the sink's place
        keys.push(first);
        dfa.add(Vec::new(), false);
        dfa.start = 1;
        let mut i = 1;
        while i < keys.len() {
            let (kernel, at_start) = keys[i].clone();
            let reach = self.closure(&kernel, at_start, false);
            let accepts = self.closure(&kernel, at_start, true).contains(&done);
            if reach.contains(&done) {
                // Matched already: whatever follows, the string matches.
                dfa.trans[i] = vec![(0, 0xD7FF, sink), (0xE000, MAX_CP, sink)];
                dfa.accept[i] = true;
                i += 1;
                continue;
            }
            dfa.accept[i] = accepts;
            // The alphabet cut where any reachable set starts or ends.
            let sets: Vec<(&[(u32, u32)], usize)> = reach
                .iter()
                .filter_map(|&s| match &self.states[s] {
                    St::Chars(set, n) => Some((set.as_slice(), *n)),
                    _ => None,
                })
                .collect();
            let mut cuts: Vec<u32> = sets
                .iter()
                .flat_map(|(set, _)| set.iter().flat_map(|&(a, b)| [a, b + 1]))
                .collect();
            cuts.sort_unstable();
            cuts.dedup();
            let mut row: Vec<(u32, u32, u32)> = Vec::new();
            for w in cuts.windows(2) {
                let (lo, hi) = (w[0], w[1] - 1);
                let mut next: Vec<usize> = sets
                    .iter()
                    .filter(|(set, _)| contains(set, lo))
                    .map(|&(_, n)| n)
                    .collect();
                if next.is_empty() {
                    continue;
                }
                next.sort_unstable();
                next.dedup();
                // Matched already: whatever follows, the string matches (the sink).
                if self.closure(&next, false, false).contains(&done) {
                    match row.last_mut() {
                        Some(last) if last.2 == sink && last.1 + 1 == lo => last.1 = hi,
                        _ => row.push((lo, hi, sink)),
                    }
                    continue;
                }
                let key = (next, false);
                let t = match ids.get(&key) {
                    Some(&t) => t,
                    None => {
                        if keys.len() >= MAX_DFA {
                            return Err(PatternError::TooLarge(MAX_DFA));
                        }
                        let t = keys.len() as u32;
                        ids.insert(key.clone(), t);
                        keys.push(key);
                        dfa.add(Vec::new(), false);
                        t
                    }
                };
                match row.last_mut() {
                    Some(last) if last.2 == t && last.1 + 1 == lo => last.1 = hi,
                    _ => row.push((lo, hi, t)),
                }
            }
            dfa.trans[i] = row;
            i += 1;
        }
        Ok(dfa)
    }
}

fn contains(set: &[(u32, u32)], c: u32) -> bool {
    let i = set.partition_point(|&(_, b)| b < c);
    set.get(i).is_some_and(|&(a, _)| a <= c)
}

/// A DFA under construction; state 0 is the accepting sink, state 1 the start.
#[derive(Default, Clone)]
struct Dfa {
    trans: Vec<Vec<(u32, u32, u32)>>,
    accept: Vec<bool>,
    start: u32,
}

impl Dfa {
    fn add(&mut self, row: Vec<(u32, u32, u32)>, accept: bool) {
        self.trans.push(row);
        self.accept.push(accept);
    }

    /// The product with a character count: states (state, count so far capped where the
    /// bounds stop caring); accepting where the count is within the bounds.
    fn with_lengths(self, min: u32, max: u32) -> Result<Dfa, PatternError> {
        let start = self.start;
        if min == 0 && max == u32::MAX {
            return Ok(Dfa { start, ..self });
        }
        let cap = if max == u32::MAX { min } else { max };
        let mut ids: HashMap<(u32, u32), u32> = HashMap::new();
        let mut keys: Vec<(u32, u32)> = vec![(start, 0)];
        ids.insert((start, 0), 0);
        let mut out = Dfa::default();
        let mut i = 0;
        while i < keys.len() {
            let (s, n) = keys[i];
            let ok = n >= min && (max == u32::MAX || n <= max);
            let mut row = Vec::new();
            if max == u32::MAX || n < max {
                let m = (n + 1).min(cap);
                for &(a, b, t) in &self.trans[s as usize] {
                    let key = (t, m);
                    let id = match ids.get(&key) {
                        Some(&id) => id,
                        None => {
                            if keys.len() >= MAX_DFA {
                                return Err(PatternError::TooLarge(MAX_DFA));
                            }
                            let id = keys.len() as u32;
                            ids.insert(key, id);
                            keys.push(key);
                            id
                        }
                    };
                    row.push((a, b, id));
                }
            }
            out.add(row, ok && self.accept[s as usize]);
            i += 1;
        }
        out.start = 0;
        Ok(out)
    }

    /// Closing costs (Dijkstra from the accepting states over reversed transitions), dead
    /// states cut off, the start renumbered 0.
    fn finish(self) -> Pattern {
        let n = self.trans.len();
        let mut rev: Vec<Vec<(u32, u32)>> = vec![Vec::new(); n];
        for (s, row) in self.trans.iter().enumerate() {
            for &(a, b, t) in row {
                rev[t as usize].push((s as u32, min_width(a, b)));
            }
        }
        let mut close = vec![INF; n];
        let mut heap = BinaryHeap::new();
        for (s, &acc) in self.accept.iter().enumerate() {
            if acc {
                close[s] = 0;
                heap.push(std::cmp::Reverse((0u32, s as u32)));
            }
        }
        while let Some(std::cmp::Reverse((c, t))) = heap.pop() {
            if c > close[t as usize] {
                continue;
            }
            for &(s, w) in &rev[t as usize] {
                let d = c.saturating_add(w);
                if d < close[s as usize] {
                    close[s as usize] = d;
                    heap.push(std::cmp::Reverse((d, s)));
                }
            }
        }
        // Renumber so the start is 0; drop transitions into dead states.
        let start = self.start as usize;
        let order: Vec<usize> = std::iter::once(start)
            .chain((0..n).filter(|&s| s != start))
            .collect();
        let mut new_id = vec![0u32; n];
        for (i, &s) in order.iter().enumerate() {
            new_id[s] = i as u32;
        }
        let trans: Vec<Vec<(u32, u32, u32)>> = order
            .iter()
            .map(|&s| {
                self.trans[s]
                    .iter()
                    .filter(|&&(_, _, t)| close[t as usize] < INF)
                    .map(|&(a, b, t)| (a, b, new_id[t as usize]))
                    .collect()
            })
            .collect();
        let accept: Vec<bool> = order.iter().map(|&s| self.accept[s]).collect();
        let close: Vec<u32> = order.iter().map(|&s| close[s]).collect();
        let free = trans
            .iter()
            .enumerate()
            .map(|(s, row)| {
                accept[s]
                    && row.len() == 2
                    && row[0] == (0, 0xD7FF, s as u32)
                    && row[1] == (0xE000, MAX_CP, s as u32)
            })
            .collect();
        Pattern {
            trans,
            accept,
            close,
            free,
            source: String::new(),
            min_len: 0,
            max_len: u32::MAX,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(p: &Pattern, text: &str) -> bool {
        p.matches(text)
    }

    fn check(source: &str, yes: &[&str], no: &[&str]) {
        let p = Pattern::compile(source, 0, u32::MAX).unwrap_or_else(|e| panic!("{source}: {e}"));
        for t in yes {
            assert!(matches(&p, t), "{source} should match {t:?}");
        }
        for t in no {
            assert!(!matches(&p, t), "{source} should not match {t:?}");
        }
    }

    #[test]
    fn ecma_patterns_match_as_json_schema_means_them() {
        check("a+", &["a", "xay", "baaa"], &["", "b"]);
        check("^a*$", &["", "aaa"], &["ab", "ba"]);
        check(
            "^[a-zA-Z0-9_-]{1,64}$",
            &["get_weather", "A-1"],
            &["", "has space", &"x".repeat(65)],
        );
        check(
            "^\\d{4}-\\d{2}-\\d{2}$",
            &["2024-05-03"],
            &["24-05-03", "2024-5-03", "2024-05-03x"],
        );
        check(
            "^(\\([0-9]{3}\\))?[0-9]{3}-[0-9]{4}$",
            &["555-1212", "(888)555-1212"],
            &["(888)555-1212 ext. 532", "(800)FLOWERS"],
        );
        check(
            "^(?:https?|ftp)://[^\\s/$.?#].[^\\s]*$",
            &["https://example.com/x"],
            &["http://", "mailto:x"],
        );
        check("^[^\\]]+$", &["abc"], &["a]c"]);
        check("colou?r|gr[ae]y", &["the color", "grey area"], &["colr"]);
        check("^\\w+@\\w+\\.\\w{2,}$", &["a@b.io"], &["a@b.c", "@b.io"]);
        check("^.$", &["é", "😀", "\u{2027}"], &["\n", "ab"]);
        check("^\\u00e9\\x41\\t$", &["éA\t"], &["éA "]);
        check("^\\ud83d\\ude00$", &["😀"], &["x"]);
        check("^[\\s]$", &["\u{a0}", "\u{3000}"], &["x"]);
        check("a{,3}", &["a{,3}"], &["aaa"]);
        check("^a{2}$", &["aa"], &["a", "aaa"]);
        check(
            "^(ab|c){2,3}$",
            &["abc", "ccab", "ababab"],
            &["ab", "abababab"],
        );
        check("^[]$", &[], &["", "a"]);
        check("^[^]$", &["a", "\n"], &[""]);
        check("(?<year>\\d{4})", &["in 2024"], &["in 24"]);
    }

    #[test]
    fn what_no_automaton_can_do_is_refused_by_name() {
        for (p, what) in [
            ("(a)\\1", "a backreference"),
            ("(?=a)", "a lookahead"),
            ("(?<!a)b", "a lookbehind"),
            ("\\bword\\b", "a word-boundary assertion (\\b, \\B)"),
            ("\\p{L}", "a Unicode property escape (\\p, \\P)"),
        ] {
            assert_eq!(
                Pattern::compile(p, 0, u32::MAX),
                Err(PatternError::Unsupported(what)),
                "{p}"
            );
        }
        for p in ["(", "a)", "*a", "[z-a]", "a{3,2}", "\\"] {
            assert!(
                matches!(
                    Pattern::compile(p, 0, u32::MAX),
                    Err(PatternError::Syntax(_))
                ),
                "{p}"
            );
        }
        assert!(matches!(
            Pattern::compile("(a{1000}){1000}", 0, u32::MAX),
            Err(PatternError::TooLarge(_))
        ));
    }

    #[test]
    fn lengths_and_closing_costs() {
        let p = Pattern::compile("^[a-z]+$", 3, 5).unwrap();
        assert!(matches(&p, "abc") && matches(&p, "abcde"));
        assert!(!matches(&p, "ab") && !matches(&p, "abcdef"));
        assert_eq!(p.close(p.start()), 3);
        // Only a quote or a backslash will do: two bytes each, escaped.
        let q = Pattern::compile("^[\"\\\\]{2}$", 0, u32::MAX).unwrap();
        assert_eq!(q.close(q.start()), 4);
        let e = Pattern::compile("^é$", 0, u32::MAX).unwrap();
        assert_eq!(e.close(e.start()), 2);
        // Unanchored at the end: once matched, the rest is free.
        let f = Pattern::compile("ab", 0, u32::MAX).unwrap();
        let s = f
            .step(f.step(f.start(), 'a' as u32).unwrap(), 'b' as u32)
            .unwrap();
        assert!(f.free(s) && f.accepts(s));
        // Nothing admits: no live start.
        let none = Pattern::compile("^a$", 2, u32::MAX).unwrap();
        assert_eq!(none.close(none.start()), INF);
    }
}
