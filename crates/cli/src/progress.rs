//! A terminal progress bar for conversions.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// A byte-count bar on stderr when stderr is a terminal, `None` otherwise (logs, pipes, CI).
/// Drive it from a conversion's progress callback: `bar.set_length(total); bar.set_position(done)`.
pub fn bar_if_terminal() -> Option<ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = ProgressBar::new(0);
    // The template is a constant that parses.
    let style =
        ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
            .expect("valid progress template");
    bar.set_style(style);
    Some(bar)
}

/// A progress callback for the converters that updates `bar` if there is one.
pub fn callback(bar: Option<&ProgressBar>) -> impl Fn(u64, u64) + '_ {
    move |done, total| {
        if let Some(bar) = bar {
            bar.set_length(total);
            bar.set_position(done);
        }
    }
}
