//! Numeric bounds (`minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`) and `multipleOf`
//! enforced exactly on a number's text, byte by byte, as a digit automaton: no float is ever
//! parsed, so a bound of 2^53 + 1, `-0`, or `0.1` means exactly what its decimal text says.
//!
//! Reading left to right, each bound is compared with the digits so far: in the integer part the
//! digits are compared position by position with the bound's, and the count of digits read
//! decides once the integer part ends (a number has no leading zeros, so more digits means a
//! larger magnitude); in the fraction the bound's digits continue, padded with zeros. Signs are
//! applied at the end. `multipleOf` = d × 10^-f: the digits up to f places after the point are
//! read modulo d, and any digit past them must be 0.
//!
//! Exponents (`1e3`) are not written under a rule: a value in exponent form compares with a
//! bound only through its digit count, which a finite automaton cannot keep; every value still
//! has its plain spelling, which is what a model writes.
//!
//! Whether a state can still end in range, and in how few bytes, is a breadth-first search over
//! the states ahead (`NumberRule::close_bytes`): the states are few (positions within the
//! bounds' digits, three orderings, d remainders), and the matcher asks once per state it builds.

use crate::cost::INF;
use crate::machine::Num;
use std::cmp::Ordering;
use std::collections::{HashSet, VecDeque};

/// Largest `d` of a `multipleOf` = d × 10^-f: each remainder is a state.
pub const MAX_MULTIPLE: u64 = 10_000;
/// Most fraction places of a `multipleOf`.
const MAX_PLACES: usize = 30;
/// States a closing search may visit (far more than any rule within the limits above needs).
const MAX_SEARCH: usize = 200_000;

/// A decimal constant, exactly: its sign, its integer digits (no leading zero: zero has none)
/// and its fraction digits (no trailing zero).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decimal {
    neg: bool,
    int: Vec<u8>,
    frac: Vec<u8>,
}

impl Decimal {
    /// From a JSON number's text (`-12.5`, `1e300`, `2.5E-3`); `None` if it is not one.
    pub fn parse(text: &str) -> Option<Decimal> {
        let (neg, rest) = match text.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, text),
        };
        let (mantissa, exp) = match rest.find(['e', 'E']) {
            Some(i) => (&rest[..i], rest[i + 1..].parse::<i64>().ok()?),
            None => (rest, 0),
        };
        let (int, frac) = match mantissa.split_once('.') {
            Some((_, "")) => return None,
            Some(parts) => parts,
            None => (mantissa, ""),
        };
        if int.is_empty() || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
            return None;
        }
        // All digits, and where the point falls among them.
        let digits: Vec<u8> = int.bytes().chain(frac.bytes()).map(|b| b - b'0').collect();
        let point = int.len() as i64 + exp;
        if !(-2000..=2000).contains(&point) {
            return None;
        }
        let (mut i, mut f) = (Vec::new(), Vec::new());
        for (at, &d) in digits.iter().enumerate() {
            if (at as i64) < point {
                i.push(d);
            } else {
                // Zeros between the point and the first digit, then the digit.
                let gap = (at as i64 - point) as usize - f.len();
                f.extend(std::iter::repeat_n(0, gap));
                f.push(d);
            }
        }
        // Zeros between the last digit and the point.
        if point > digits.len() as i64 {
            i.extend(std::iter::repeat_n(
                0,
                (point - digits.len() as i64) as usize,
            ));
        }
        let lead = i.iter().take_while(|&&d| d == 0).count();
        i.drain(..lead);
        while f.last() == Some(&0) {
            f.pop();
        }
        let zero = i.is_empty() && f.is_empty();
        Some(Decimal {
            neg: neg && !zero,
            int: i,
            frac: f,
        })
    }

    /// From a JSON number as serde_json holds it: integers exactly, floats by their shortest
    /// round-trip spelling (the text the schema's author wrote, for any value a schema uses).
    pub fn of(n: &serde_json::Number) -> Option<Decimal> {
        if let Some(u) = n.as_u64() {
            return Decimal::parse(&u.to_string());
        }
        if let Some(i) = n.as_i64() {
            return Decimal::parse(&i.to_string());
        }
        let f = n.as_f64().filter(|f| f.is_finite())?;
        Decimal::parse(&format!("{f:e}"))
    }

    /// d × 10^-f.
    fn from_scaled(d: u64, f: usize) -> Decimal {
        let text = d.to_string();
        Decimal::parse(&format!("{text}e-{f}")).unwrap_or(Decimal {
            neg: false,
            int: Vec::new(),
            frac: Vec::new(),
        })
    }

    fn is_zero(&self) -> bool {
        self.int.is_empty() && self.frac.is_empty()
    }

    /// Value order.
    pub fn cmp_value(&self, other: &Decimal) -> Ordering {
        let sign = |d: &Decimal| match (d.is_zero(), d.neg) {
            (true, _) => 0,
            (false, true) => -1,
            (false, false) => 1,
        };
        match sign(self).cmp(&sign(other)) {
            Ordering::Equal => {}
            o => return o,
        }
        let mag = self
            .int
            .len()
            .cmp(&other.int.len())
            .then_with(|| self.int.cmp(&other.int))
            .then_with(|| self.frac.cmp(&other.frac));
        if self.neg {
            mag.reverse()
        } else {
            mag
        }
    }

    /// `d` and `f` of a positive value d × 10^-f.
    fn as_multiple(&self) -> Option<(u64, usize)> {
        if self.neg || self.is_zero() {
            return None;
        }
        let mut d: u64 = 0;
        for &x in self.int.iter().chain(&self.frac) {
            d = d.checked_mul(10)?.checked_add(x as u64)?;
        }
        Some((d, self.frac.len()))
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// A bound: the value, and whether it is excluded.
#[derive(Debug, Clone, PartialEq)]
pub struct Bound {
    pub value: Decimal,
    pub exclusive: bool,
}

/// What a number must satisfy beyond its type.
#[derive(Debug, Clone, PartialEq)]
pub struct NumberRule {
    pub integer: bool,
    lo: Option<Bound>,
    hi: Option<Bound>,
    /// `multipleOf` = d × 10^-f, as (d, f).
    multiple: Option<(u64, usize)>,
    /// The multiple negated: the number must *not* be a multiple of it (a `not`'s complement).
    not_multiple: bool,
    /// Digits counted per part: past every bound's and the multiple's, more change nothing.
    cap: u16,
}

/// Why a rule cannot be built.
#[derive(Debug, Clone, PartialEq)]
pub enum RuleError {
    /// `multipleOf` is not a positive number.
    NotPositive,
    /// `multipleOf`'s digits exceed what the automaton counts (d × 10^-f with d ≤ 10,000).
    TooFine,
    /// A number that must not be a multiple of one value and must be a multiple of another.
    NegatedMultiple,
}

impl NumberRule {
    /// A rule from the bounds (each the tighter of what the schema says) and the multiple.
    pub fn new(
        integer: bool,
        lo: Option<Bound>,
        hi: Option<Bound>,
        multiple: Option<&Decimal>,
    ) -> Result<NumberRule, RuleError> {
        let multiple = match multiple {
            None => None,
            Some(m) => {
                let (d, f) = m.as_multiple().ok_or(RuleError::NotPositive)?;
                if d > MAX_MULTIPLE || f > MAX_PLACES {
                    return Err(RuleError::TooFine);
                }
                // A multiple of 1 on an integer adds nothing.
                (!(integer && d == 1 && f == 0)).then_some((d, f))
            }
        };
        let digits = |b: &Option<Bound>| {
            b.as_ref()
                .map_or(0, |b| b.value.int.len().max(b.value.frac.len()))
        };
        let places = multiple.map_or(0, |(_, f)| f);
        let cap = (digits(&lo).max(digits(&hi)).max(places) + 1).min(u16::MAX as usize) as u16;
        Ok(NumberRule {
            integer,
            lo,
            hi,
            multiple,
            not_multiple: false,
            cap,
        })
    }

    /// Rules whose union admits exactly the numbers this one refuses (`not`, `if`'s else
    /// branch): below the lower bound, above the upper one, off the multiple — and, for an
    /// integer rule, every number with a fraction. Empty: the rule admits every number.
    pub fn complements(&self) -> Vec<NumberRule> {
        let plain = |lo, hi| NumberRule {
            integer: false,
            lo,
            hi,
            multiple: None,
            not_multiple: false,
            cap: self.cap,
        };
        let flip = |b: &Bound| Bound {
            value: b.value.clone(),
            exclusive: !b.exclusive,
        };
        let mut out = Vec::new();
        if let Some(b) = &self.lo {
            out.push(plain(None, Some(flip(b))));
        }
        if let Some(b) = &self.hi {
            out.push(plain(Some(flip(b)), None));
        }
        let off = |multiple: (u64, usize)| NumberRule {
            multiple: Some(multiple),
            not_multiple: true,
            cap: self.cap.max(multiple.1 as u16 + 1),
            ..plain(None, None)
        };
        match self.multiple {
            Some(m) if self.not_multiple => out.push(NumberRule {
                multiple: Some(m),
                ..plain(None, None)
            }),
            Some(m) => out.push(off(m)),
            None => {}
        }
        if self.integer {
            out.push(off((1, 0)));
        }
        out
    }

    /// Whether the rule constrains anything (a plain number needs no digit state).
    pub fn is_trivial(&self) -> bool {
        self.lo.is_none() && self.hi.is_none() && self.multiple.is_none()
    }

    /// The tighter of two lower bounds (on a tie, the exclusive one).
    pub fn tighter_lo(a: Option<Bound>, b: Option<Bound>) -> Option<Bound> {
        match (a, b) {
            (Some(a), Some(b)) => Some(match a.value.cmp_value(&b.value) {
                Ordering::Greater => a,
                Ordering::Less => b,
                Ordering::Equal => Bound {
                    exclusive: a.exclusive || b.exclusive,
                    ..a
                },
            }),
            (a, b) => a.or(b),
        }
    }

    /// The tighter of two upper bounds (on a tie, the exclusive one).
    pub fn tighter_hi(a: Option<Bound>, b: Option<Bound>) -> Option<Bound> {
        match (a, b) {
            (Some(a), Some(b)) => Some(match a.value.cmp_value(&b.value) {
                Ordering::Less => a,
                Ordering::Greater => b,
                Ordering::Equal => Bound {
                    exclusive: a.exclusive || b.exclusive,
                    ..a
                },
            }),
            (a, b) => a.or(b),
        }
    }

    /// The number's state after its first byte (`-` or a digit).
    pub fn start(&self, b: u8) -> Option<(Num, Digits)> {
        let d = Digits::default();
        match b {
            b'-' => Some((Num::Minus, Digits { neg: true, ..d })),
            b'0'..=b'9' => {
                let at = if b == b'0' { Num::Zero } else { Num::Int };
                Some((at, self.digit(d, at, b - b'0')))
            }
            _ => None,
        }
    }

    /// Both rules at once (`allOf`): the tighter bounds, the least common multiple.
    pub fn meet(
        integer: bool,
        a: Option<&NumberRule>,
        b: Option<&NumberRule>,
    ) -> Result<NumberRule, RuleError> {
        let lo = NumberRule::tighter_lo(a.and_then(|r| r.lo.clone()), b.and_then(|r| r.lo.clone()));
        let hi = NumberRule::tighter_hi(a.and_then(|r| r.hi.clone()), b.and_then(|r| r.hi.clone()));
        // A negated multiple meets only a rule without one: two multiples, one or both negated,
        // make no single remainder.
        let negated = |r: Option<&NumberRule>| r.is_some_and(|r| r.not_multiple);
        if negated(a) || negated(b) {
            let (n, other) = if negated(a) { (a, b) } else { (b, a) };
            if other.is_some_and(|o| o.multiple.is_some()) {
                return Err(RuleError::NegatedMultiple);
            }
            let n = n.ok_or(RuleError::NegatedMultiple)?;
            let mut rule = NumberRule::new(integer, lo, hi, None)?;
            rule.multiple = n.multiple;
            rule.not_multiple = true;
            rule.cap = rule.cap.max(n.cap);
            return Ok(rule);
        }
        let multiple = match (a.and_then(|r| r.multiple), b.and_then(|r| r.multiple)) {
            (Some((d1, f1)), Some((d2, f2))) => {
                // On the finer one's places: d1·10^(f−f1) and d2·10^(f−f2), then their lcm.
                let f = f1.max(f2);
                let scale = |d: u64, g: usize| d.checked_mul(10u64.checked_pow((f - g) as u32)?);
                let (x, y) = (
                    scale(d1, f1).ok_or(RuleError::TooFine)?,
                    scale(d2, f2).ok_or(RuleError::TooFine)?,
                );
                let l = (x / gcd(x, y)).checked_mul(y).ok_or(RuleError::TooFine)?;
                Some((l, f))
            }
            (m, n) => m.or(n),
        };
        let multiple = multiple.map(|(d, f)| Decimal::from_scaled(d, f));
        NumberRule::new(integer, lo, hi, multiple.as_ref())
    }

    /// The state after byte `b`; `None` where the text cannot continue with it (exponents
    /// included, see the module's note).
    pub fn step(&self, at: Num, d: Digits, b: u8) -> Option<(Num, Digits)> {
        if matches!(b, b'e' | b'E') {
            return None;
        }
        let next = at.step(b, self.integer)?;
        let d = match b {
            b'.' => self.point(d),
            b'0'..=b'9' => self.digit(d, next, b - b'0'),
            _ => d,
        };
        // A digit past the multiple's places must be 0 (unless the multiple is negated: then
        // that digit has already made it no multiple).
        if d.past && !self.not_multiple {
            return None;
        }
        Some((next, d))
    }

    /// Whether the text so far is a whole number that satisfies the rule.
    pub fn accepts(&self, at: Num, d: Digits) -> bool {
        if !at.complete() {
            return false;
        }
        let in_lo = self.lo.as_ref().is_none_or(|b| {
            let o = self.value_cmp(&b.value, d.lo, d);
            o == Ordering::Greater || (o == Ordering::Equal && !b.exclusive)
        });
        let in_hi = self.hi.as_ref().is_none_or(|b| {
            let o = self.value_cmp(&b.value, d.hi, d);
            o == Ordering::Less || (o == Ordering::Equal && !b.exclusive)
        });
        let whole = self.multiple.is_none_or(|(m, f)| {
            // Places not written are zeros: the remainder shifts by them.
            let read = if d.frac { d.count as usize } else { 0 };
            let mut r = d.rem as u64;
            for _ in read.min(f)..f {
                r = r * 10 % m;
            }
            (r == 0 && !d.past) != self.not_multiple
        });
        in_lo && in_hi && whole
    }

    /// Fewest bytes that make the text so far a number satisfying the rule (0: it is one);
    /// `INF` if no continuation does.
    pub fn close_bytes(&self, at: Num, d: Digits) -> u32 {
        self.search(Some((at, d)))
    }

    /// Fewest bytes of any number satisfying the rule; `INF` if none does.
    pub fn min_bytes(&self) -> u32 {
        self.search(None)
    }

    /// Breadth-first over the bytes a number may take next (`None`: before its first byte).
    fn search(&self, from: Option<(Num, Digits)>) -> u32 {
        const BYTES: &[u8] = b"0123456789.-";
        let mut seen: HashSet<(Num, Digits)> = HashSet::new();
        let mut queue: VecDeque<((Num, Digits), u32)> = VecDeque::new();
        match from {
            Some(s) => {
                if self.accepts(s.0, s.1) {
                    return 0;
                }
                seen.insert(s);
                queue.push_back((s, 0));
            }
            None => {
                for &b in BYTES {
                    if let Some(s) = self.start(b) {
                        if seen.insert(s) {
                            queue.push_back((s, 1));
                        }
                    }
                }
            }
        }
        while let Some(((at, d), cost)) = queue.pop_front() {
            if from.is_none() && self.accepts(at, d) {
                return cost;
            }
            if seen.len() > MAX_SEARCH {
                return INF;
            }
            for &b in BYTES {
                let Some(next) = self.step(at, d, b) else {
                    continue;
                };
                if from.is_some() && self.accepts(next.0, next.1) {
                    return cost + 1;
                }
                if seen.insert(next) {
                    queue.push_back((next, cost + 1));
                }
            }
        }
        INF
    }

    /// A digit read: each bound's comparison and the remainder move on.
    fn digit(&self, mut d: Digits, at: Num, x: u8) -> Digits {
        // A lone leading zero is no integer digit (zero has none); fraction digits all count.
        if !d.frac && at == Num::Zero {
            return d;
        }
        let k = d.count as usize;
        if let Some(b) = &self.lo {
            d.lo = side_digit(&b.value, d.lo, d.frac, k, x);
        }
        if let Some(b) = &self.hi {
            d.hi = side_digit(&b.value, d.hi, d.frac, k, x);
        }
        if let Some((m, f)) = self.multiple {
            if !d.frac || k < f {
                d.rem = ((d.rem as u64 * 10 + x as u64) % m) as u32;
            } else if x != 0 {
                d.past = true;
            }
        }
        d.count = (d.count + 1).min(self.cap);
        d
    }

    /// The point read: the integer part is over, so each bound's comparison of it is decided
    /// or, where it is equal, carries on into the fraction.
    fn point(&self, mut d: Digits) -> Digits {
        let k = d.count as usize;
        if let Some(b) = &self.lo {
            d.lo = side_point(&b.value, d.lo, k);
        }
        if let Some(b) = &self.hi {
            d.hi = side_point(&b.value, d.hi, k);
        }
        d.frac = true;
        d.count = 0;
        d
    }

    /// The number's value against bound `b` (its side's state `s`), signs applied.
    fn value_cmp(&self, b: &Decimal, s: Side, d: Digits) -> Ordering {
        let k = d.count as usize;
        let mag = match s {
            Side::Decided(o) => o,
            Side::Int(o) if !d.frac => match k.cmp(&b.int.len()) {
                Ordering::Equal if o == Ordering::Equal && !b.frac.is_empty() => Ordering::Less,
                Ordering::Equal => o,
                other => other,
            },
            Side::Int(_) => Ordering::Less,
            Side::Frac if k < b.frac.len() => Ordering::Less,
            Side::Frac => Ordering::Equal,
        };
        if b.is_zero() {
            return match (mag, d.neg) {
                (Ordering::Equal, _) => Ordering::Equal,
                (_, true) => Ordering::Less,
                (_, false) => Ordering::Greater,
            };
        }
        match (d.neg, b.neg) {
            (true, true) => mag.reverse(),
            (false, false) => mag,
            // -0 against a positive bound is below it, 0 against a negative one above.
            (true, false) => Ordering::Less,
            (false, true) => Ordering::Greater,
        }
    }
}

/// A bound's comparison with the digits read (magnitudes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Side {
    /// In the integer part: the digits so far against the bound's first as many.
    Int(Ordering),
    /// In the fraction, the integer parts equal: every fraction digit so far equal too.
    Frac,
    /// The magnitudes' order, whatever follows.
    Decided(Ordering),
}

impl Default for Side {
    fn default() -> Side {
        Side::Int(Ordering::Equal)
    }
}

fn side_digit(b: &Decimal, s: Side, frac: bool, k: usize, x: u8) -> Side {
    match s {
        Side::Decided(_) => s,
        Side::Int(_) if k >= b.int.len() => Side::Decided(Ordering::Greater),
        Side::Int(Ordering::Equal) => Side::Int(x.cmp(&b.int[k])),
        Side::Int(o) => Side::Int(o),
        Side::Frac if frac => match x.cmp(b.frac.get(k).unwrap_or(&0)) {
            Ordering::Equal => Side::Frac,
            o => Side::Decided(o),
        },
        Side::Frac => s,
    }
}

fn side_point(b: &Decimal, s: Side, k: usize) -> Side {
    match s {
        Side::Int(o) => match k.cmp(&b.int.len()) {
            Ordering::Less => Side::Decided(Ordering::Less),
            Ordering::Greater => Side::Decided(Ordering::Greater),
            Ordering::Equal if o == Ordering::Equal => Side::Frac,
            Ordering::Equal => Side::Decided(o),
        },
        s => s,
    }
}

/// What a rule remembers of the digits read: the sign, whether the point came, the digits of
/// the current part (counted only as far as the rule needs), each bound's comparison, the
/// remainder modulo the multiple. A plain number (no rule) keeps the default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digits {
    neg: bool,
    frac: bool,
    count: u16,
    lo: Side,
    hi: Side,
    rem: u32,
    /// A nonzero digit past the multiple's places: `step` refuses it, unless the multiple is
    /// negated (then the number is no multiple, whatever follows).
    past: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound(text: &str, exclusive: bool) -> Option<Bound> {
        Some(Bound {
            value: Decimal::parse(text).unwrap(),
            exclusive,
        })
    }

    fn rule(integer: bool, lo: Option<Bound>, hi: Option<Bound>, m: Option<&str>) -> NumberRule {
        let m = m.map(|m| Decimal::parse(m).unwrap());
        NumberRule::new(integer, lo, hi, m.as_ref()).unwrap()
    }

    /// Whether the rule accepts `text` as a whole number.
    fn accepts(r: &NumberRule, text: &str) -> bool {
        let b = text.as_bytes();
        let Some(mut s) = r.start(b[0]) else {
            return false;
        };
        for &x in &b[1..] {
            match r.step(s.0, s.1, x) {
                Some(n) => s = n,
                None => return false,
            }
        }
        r.accepts(s.0, s.1)
    }

    /// The truth, by exact rational arithmetic on small values (text → numerator / 10^places).
    fn value(text: &str) -> (i128, u32) {
        let d = Decimal::parse(text).unwrap();
        let mut n: i128 = 0;
        for &x in d.int.iter().chain(&d.frac) {
            n = n * 10 + x as i128;
        }
        (if d.neg { -n } else { n }, d.frac.len() as u32)
    }

    fn cmp_texts(a: &str, b: &str) -> Ordering {
        let ((x, p), (y, q)) = (value(a), value(b));
        let s = p.max(q);
        (x * 10i128.pow(s - p)).cmp(&(y * 10i128.pow(s - q)))
    }

    #[test]
    fn decimals_parse_exactly() {
        let d = |t| Decimal::parse(t).unwrap();
        assert_eq!(d("-0"), d("0"));
        assert_eq!(d("0.0"), d("0"));
        assert_eq!(d("1e3"), d("1000"));
        assert_eq!(d("2.5E-3"), d("0.0025"));
        assert_eq!(d("120.50"), d("120.5"));
        assert_eq!(d("9007199254740993").int.len(), 16);
        assert_eq!(Decimal::parse("1."), None);
        assert_eq!(Decimal::parse("abc"), None);
        assert_eq!(d("-3").cmp_value(&d("2")), Ordering::Less);
        assert_eq!(d("-3").cmp_value(&d("-2.5")), Ordering::Less);
        assert_eq!(d("0.1").cmp_value(&d("0.10")), Ordering::Equal);
    }

    #[test]
    fn bounds_match_exact_arithmetic() {
        let texts = [
            "0", "-0", "1", "-1", "9", "10", "11", "12", "13", "99", "100", "101", "0.5", "-0.5",
            "1.5", "11.99", "12.0", "12.00", "12.01", "-12", "-12.5", "-11.5", "0.01", "0.001",
            "1000", "-1000", "5", "-5", "4.999", "5.0001",
        ];
        let bounds = ["0", "1", "12", "-12", "0.5", "-0.5", "5", "11.99", "100"];
        for integer in [false, true] {
            for lo in bounds {
                for hi in bounds {
                    for (xl, xh) in [(false, false), (true, false), (false, true), (true, true)] {
                        let r = rule(integer, bound(lo, xl), bound(hi, xh), None);
                        for t in texts {
                            let int_ok = !integer || value(t).0 % 10i128.pow(value(t).1) == 0;
                            let lo_ok = match cmp_texts(t, lo) {
                                Ordering::Greater => true,
                                Ordering::Equal => !xl,
                                Ordering::Less => false,
                            };
                            let hi_ok = match cmp_texts(t, hi) {
                                Ordering::Less => true,
                                Ordering::Equal => !xh,
                                Ordering::Greater => false,
                            };
                            // An integer type takes a fraction of zeros only.
                            let spelled = !integer
                                || !t.contains('.')
                                || t.split('.').nth(1).unwrap().bytes().all(|b| b == b'0');
                            assert_eq!(
                                accepts(&r, t),
                                int_ok && spelled && lo_ok && hi_ok,
                                "{t} in {lo}{xl}..{hi}{xh} integer {integer}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn multiples_integer_and_decimal() {
        let r = rule(true, None, None, Some("3"));
        for n in -40..40 {
            assert_eq!(accepts(&r, &n.to_string()), n % 3 == 0, "{n}");
        }
        let cents = rule(false, bound("0", false), None, Some("0.01"));
        assert!(accepts(&cents, "12.34"));
        assert!(accepts(&cents, "12.3"));
        assert!(accepts(&cents, "12.340"));
        assert!(!accepts(&cents, "12.341"));
        assert!(!accepts(&cents, "-0.01"));
        let quarter = rule(false, None, None, Some("2.5"));
        for t in ["0", "2.5", "5", "7.5", "-2.5", "10.0"] {
            assert!(accepts(&quarter, t), "{t}");
        }
        for t in ["1", "2.4", "2.55", "3"] {
            assert!(!accepts(&quarter, t), "{t}");
        }
        assert_eq!(
            NumberRule::new(true, None, None, Some(&Decimal::parse("0").unwrap())),
            Err(RuleError::NotPositive)
        );
        assert_eq!(
            NumberRule::new(true, None, None, Some(&Decimal::parse("123457").unwrap())),
            Err(RuleError::TooFine)
        );
    }

    #[test]
    fn closing_costs_are_exact() {
        // 1..=12: "1" is already one; "-" has no way back into range.
        let r = rule(true, bound("1", false), bound("12", false), None);
        assert_eq!(r.min_bytes(), 1);
        let (at, d) = r.start(b'-').unwrap();
        assert_eq!(r.close_bytes(at, d), INF);
        let (at, d) = r.start(b'1').unwrap();
        assert_eq!(r.close_bytes(at, d), 0);
        let (at, d) = r.step(at, d, b'3').unwrap();
        assert_eq!(r.close_bytes(at, d), INF);
        // At least 2^53 + 1: sixteen digits.
        let big = rule(true, bound("9007199254740993", false), None, None);
        assert_eq!(big.min_bytes(), 16);
        // Above -0.5, exclusive, as a multiple of 0.25: "0" is shortest (-0.25 is 5 bytes).
        let q = rule(false, bound("-0.5", true), None, Some("0.25"));
        assert_eq!(q.min_bytes(), 1);
        let (at, d) = q.start(b'-').unwrap();
        assert_eq!(q.close_bytes(at, d), 1); // "-0"
                                             // Nothing in (1, 2) is an integer.
        let none = rule(true, bound("1", true), bound("2", true), None);
        assert_eq!(none.min_bytes(), INF);
        // Exponents are never written under a rule.
        let (at, d) = r.start(b'1').unwrap();
        assert_eq!(r.step(at, d, b'e'), None);
    }
}
