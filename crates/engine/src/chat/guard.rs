//! Bounds on the work and memory a chat template can ask for. The template comes from the model
//! file, so a hostile one must end in an error instead of hanging the renderer (in wasm, the
//! whole isolate) or exhausting memory:
//!
//! - fuel: minijinja counts the instructions a render runs; [`fuel_for`] allows a generous
//!   budget that grows with the number of messages, so a runaway loop stops with an error;
//! - an output cap, [`MAX_PROMPT_BYTES`], enforced by [`CappedOutput`] as the text is written;
//! - builtin filters, functions and Python-style methods that can build a large value from small
//!   arguments check the size first: `indent`, `replace`, `join`, `format`, `batch`, `slice`,
//!   `range`, the stringifying filters, and any sequence argument longer than [`MAX_ITEMS`]
//!   (`[1] * 10**12` is a lazy sequence that `list` or `sort` would try to hold whole).
//!
//! Not covered, as minijinja has no hook for its operators: `*` repeats a string up to
//! minijinja's own cap (100 MB per operation), `~` and `+` concatenate without a cap, and `in`
//! or a negative index walk a long lazy sequence element by element.

use std::fmt::{self, Write as _};
use std::io;

use minijinja::value::{Rest, Value, ValueKind, ValueOrKwargs};
use minijinja::{filters, Environment, Error, ErrorKind, State};

/// Longest rendered prompt, in bytes: the tokenizer's input cap, as a longer prompt could not be
/// encoded anyway. Real chats are a few hundred kB at most.
pub const MAX_PROMPT_BYTES: usize = crate::tokenizer::MAX_ENCODE_BYTES;

/// Largest string a guarded filter or method may build.
const MAX_VALUE_BYTES: usize = MAX_PROMPT_BYTES;

/// Longest sequence a filter or method accepts. A chat has far fewer messages.
pub const MAX_ITEMS: usize = 1 << 20;

/// minijinja's own limit on `range`.
const MAX_RANGE: i128 = 100_000;

/// Instructions for the template itself, whatever the chat.
const FUEL_BASE: u64 = 1_000_000;
/// Instructions per message; SmolLM2's and Gemma-3's templates take 25 and 50.
const FUEL_PER_MESSAGE: u64 = 10_000;

/// The fuel (minijinja instructions) a render over `messages` messages may use; at most
/// `isize::MAX`, as minijinja keeps the remaining fuel in an isize.
pub fn fuel_for(messages: usize) -> u64 {
    FUEL_PER_MESSAGE
        .saturating_mul(messages as u64)
        .saturating_add(FUEL_BASE)
        .min(isize::MAX as u64)
}

/// Why a guard refused, attached to the error so the caller can type it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TooLarge(pub String);

fn too_large(message: String) -> Error {
    Error::new(ErrorKind::InvalidOperation, message.clone()).with_source(TooLarge(message))
}

/// The render's output, refusing to grow past `limit` bytes.
pub struct CappedOutput {
    pub bytes: Vec<u8>,
    pub limit: usize,
    pub overflowed: bool,
}

impl CappedOutput {
    pub fn new(limit: usize) -> Self {
        Self {
            bytes: Vec::new(),
            limit,
            overflowed: false,
        }
    }
}

impl io::Write for CappedOutput {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if data.len() > self.limit - self.bytes.len() {
            self.overflowed = true;
            return Err(io::Error::other("chat template output over the cap"));
        }
        self.bytes.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Replaces the builtins that can blow up with guarded versions; Python-style methods go through
/// [`method`].
pub fn install(env: &mut Environment<'_>) {
    for (name, builtin) in builtin_filters() {
        // `ValueOrKwargs`: a plain `Value` argument refuses keyword arguments (`indent(width=2)`).
        env.add_filter(name, move |state: &mut State, args: Rest<ValueOrKwargs>| {
            let args = args.into_values();
            check_filter(name, &args)?;
            builtin.call(state, &args)
        });
    }
    env.add_function("range", range);
    env.set_unknown_method_callback(method);
}

/// The checks before a filter runs, beyond the sequence lengths every filter gets.
fn check_filter(name: &str, args: &[Value]) -> Result<(), Error> {
    for arg in args {
        check_items(arg)?;
    }
    let value = args.first().cloned().unwrap_or_default();
    match name {
        "indent" => {
            let width = argument(args, 1, "width").and_then(|w| size_arg(&w));
            if let (Some(text), Some(width)) = (value.as_str(), width) {
                let lines = text.matches('\n').count() + 1;
                check_size(
                    "indent",
                    width.saturating_mul(lines).saturating_add(text.len()),
                )?;
            }
        }
        "replace" => {
            if let (Some(text), Some(from), Some(to)) = (
                value.as_str(),
                argument(args, 1, "old").and_then(|v| v.as_str().map(str::to_owned)),
                argument(args, 2, "new").and_then(|v| v.as_str().map(str::to_owned)),
            ) {
                check_replace(text, &from, &to, None)?;
            }
        }
        "join" => {
            let joiner = argument(args, 1, "d").map(|j| j.to_string());
            check_join(&value, joiner.as_deref().unwrap_or(""))?;
        }
        "format" => check_format(value.as_str().unwrap_or_default())?,
        "batch" | "slice" => {
            if let Some(count) = argument(args, 1, "count").and_then(|c| size_arg(&c)) {
                if count > MAX_ITEMS {
                    return Err(too_large(format!(
                        "{name}({count}) makes more than {MAX_ITEMS} groups"
                    )));
                }
            }
        }
        // Filters that print their value as a string.
        "string" | "pprint" | "safe" | "escape" | "e" | "lower" | "upper" | "title"
        | "capitalize" | "trim"
            if value.kind() != ValueKind::String =>
        {
            check_size(name, display_len(&value))?
        }
        _ => {}
    }
    Ok(())
}

/// Python-style methods (`.strip()`, `.items()`, …) from `pycompat`, sizes checked first.
fn method(state: &mut State, value: &Value, name: &str, args: &[Value]) -> Result<Value, Error> {
    check_items(value)?;
    for arg in args {
        check_items(arg)?;
    }
    if let Some(text) = value.as_str() {
        let text_arg = |i: usize| args.get(i).and_then(|v| v.as_str());
        match name {
            "replace" => {
                if let (Some(from), Some(to)) = (text_arg(0), text_arg(1)) {
                    let count = args.get(2).and_then(size_arg);
                    check_replace(text, from, to, count)?;
                }
            }
            "join" => check_join(&args.first().cloned().unwrap_or_default(), text)?,
            "format" => check_format(text)?,
            _ => {}
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, name, args)
}

/// `range` as minijinja's (lazy, at most [`MAX_RANGE`] numbers), its length computed without
/// overflow: minijinja's own negative-step arithmetic overflows on extreme bounds.
fn range(lower: i64, upper: Option<i64>, step: Option<i64>) -> Result<Value, Error> {
    let (start, end) = match upper {
        Some(upper) => (lower as i128, upper as i128),
        None => (0, lower as i128),
    };
    let step = step.unwrap_or(1) as i128;
    let len = match step {
        0 => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "cannot create range with step of 0",
            ))
        }
        s if s > 0 && end > start => (end - start + s - 1) / s,
        s if s < 0 && start > end => (start - end - s - 1) / -s,
        _ => 0,
    };
    if len > MAX_RANGE {
        return Err(too_large(format!(
            "range of {len} numbers (the limit is {MAX_RANGE})"
        )));
    }
    // Every number lies between `start` and `end`, so it fits an i64.
    Ok(Value::make_iterable(move || {
        (0..len).map(move |i| (start + i * step) as i64)
    }))
}

/// A width or count argument; a positive number past `usize` saturates, so a 32-bit build
/// refuses the same sizes as a 64-bit one.
pub fn size_arg(value: &Value) -> Option<usize> {
    let number = i128::try_from(value.clone()).ok()?;
    (number >= 0).then(|| usize::try_from(number).unwrap_or(usize::MAX))
}

/// An argument given at `position` or by keyword `name`.
fn argument(args: &[Value], position: usize, name: &str) -> Option<Value> {
    let kwargs = args.last().filter(|v| v.is_kwargs());
    let positional = args.len() - usize::from(kwargs.is_some());
    if position < positional {
        return Some(args[position].clone());
    }
    kwargs
        .and_then(|k| k.get_attr(name).ok())
        .filter(|v| !v.is_undefined())
}

/// Refuses sequences longer than [`MAX_ITEMS`].
pub fn check_items(value: &Value) -> Result<(), Error> {
    if matches!(value.kind(), ValueKind::Seq | ValueKind::Iterable) {
        if let Some(len) = value.len().filter(|&len| len > MAX_ITEMS) {
            return Err(too_large(format!(
                "a sequence of {len} items (the limit is {MAX_ITEMS})"
            )));
        }
    }
    Ok(())
}

pub fn check_size(what: &str, bytes: usize) -> Result<(), Error> {
    if bytes > MAX_VALUE_BYTES {
        return Err(too_large(format!(
            "{what} would make a string over {MAX_VALUE_BYTES} bytes"
        )));
    }
    Ok(())
}

fn check_replace(text: &str, from: &str, to: &str, count: Option<usize>) -> Result<(), Error> {
    let mut matches = text.matches(from).count();
    if let Some(count) = count {
        matches = matches.min(count);
    }
    check_size(
        "replace",
        matches.saturating_mul(to.len()).saturating_add(text.len()),
    )
}

/// The joined length of `items` with `joiner`, counted without building it.
fn check_join(items: &Value, joiner: &str) -> Result<(), Error> {
    let Ok(iter) = items.try_iter() else {
        return Ok(()); // The builtin reports what cannot be iterated.
    };
    let mut total = 0usize;
    for (i, item) in iter.enumerate() {
        if i > 0 {
            total = total.saturating_add(joiner.len());
        }
        let len = match item.as_str() {
            Some(text) => text.len(),
            None => display_len(&item),
        };
        total = total.saturating_add(len);
        check_size("join", total)?;
    }
    Ok(())
}

/// Refuses a printf (`%10d`) or `str.format` (`{:>10}`) string whose widths add up past the cap.
fn check_format(format: &str) -> Result<(), Error> {
    let mut total = 0usize;
    let mut in_spec = false;
    let mut number: Option<usize> = None;
    for c in format.chars() {
        match c {
            '%' | '{' => in_spec = true,
            '}' => in_spec = false,
            c if in_spec && c.is_ascii_digit() => {
                let digit = c as usize - '0' as usize;
                number = Some(number.unwrap_or(0).saturating_mul(10).saturating_add(digit));
                continue;
            }
            // A printf spec ends at its conversion letter.
            c if in_spec && c.is_ascii_alphabetic() => in_spec = false,
            _ => {}
        }
        total = total.saturating_add(number.take().unwrap_or(0));
    }
    total = total.saturating_add(number.unwrap_or(0));
    check_size("format", total.saturating_add(format.len()))
}

/// How long `value` prints, counted up to just past the cap (so a huge value costs no more).
pub fn display_len(value: &Value) -> usize {
    struct Counter(usize);
    impl fmt::Write for Counter {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            self.0 = self.0.saturating_add(s.len());
            match self.0 > MAX_VALUE_BYTES {
                true => Err(fmt::Error),
                false => Ok(()),
            }
        }
    }
    let mut counter = Counter(0);
    let _ = write!(counter, "{value}");
    counter.0
}

/// minijinja's builtin filters (its `defaults.rs`), to be re-registered behind the checks.
fn builtin_filters() -> Vec<(&'static str, Value)> {
    vec![
        ("safe", Value::from_function(filters::safe)),
        ("escape", Value::from_function(filters::escape)),
        ("e", Value::from_function(filters::escape)),
        ("lower", Value::from_function(filters::lower)),
        ("upper", Value::from_function(filters::upper)),
        ("title", Value::from_function(filters::title)),
        ("capitalize", Value::from_function(filters::capitalize)),
        ("replace", Value::from_function(filters::replace)),
        ("length", Value::from_function(filters::length)),
        ("count", Value::from_function(filters::length)),
        ("dictsort", Value::from_function(filters::dictsort)),
        ("items", Value::from_function(filters::items)),
        ("reverse", Value::from_function(filters::reverse)),
        ("trim", Value::from_function(filters::trim)),
        ("join", Value::from_function(filters::join)),
        ("split", Value::from_function(filters::split)),
        ("lines", Value::from_function(filters::lines)),
        ("default", Value::from_function(filters::default)),
        ("d", Value::from_function(filters::default)),
        ("round", Value::from_function(filters::round)),
        ("abs", Value::from_function(filters::abs)),
        ("int", Value::from_function(filters::int)),
        ("float", Value::from_function(filters::float)),
        ("attr", Value::from_function(filters::attr)),
        ("first", Value::from_function(filters::first)),
        ("last", Value::from_function(filters::last)),
        ("min", Value::from_function(filters::min)),
        ("max", Value::from_function(filters::max)),
        ("sort", Value::from_function(filters::sort)),
        ("list", Value::from_function(filters::list)),
        ("string", Value::from_function(filters::string)),
        ("bool", Value::from_function(filters::bool)),
        ("batch", Value::from_function(filters::batch)),
        ("slice", Value::from_function(filters::slice)),
        ("sum", Value::from_function(filters::sum)),
        ("indent", Value::from_function(filters::indent)),
        ("select", Value::from_function(filters::select)),
        ("reject", Value::from_function(filters::reject)),
        ("selectattr", Value::from_function(filters::selectattr)),
        ("rejectattr", Value::from_function(filters::rejectattr)),
        ("map", Value::from_function(filters::map)),
        ("groupby", Value::from_function(filters::groupby)),
        ("unique", Value::from_function(filters::unique)),
        ("chain", Value::from_function(filters::chain)),
        ("zip", Value::from_function(filters::zip)),
        ("pprint", Value::from_function(filters::pprint)),
        ("format", Value::from_function(filters::format)),
    ]
}
