//! The console the library's runs write to: results on standard output, notes on standard
//! error, and a progress bar on standard error (indicatif draws none when standard error is
//! not a terminal, so logs and tests see only the lines).

use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressStyle};
use sluice_bench::console::Console;

#[derive(Debug)]
pub struct Terminal {
    /// What the bar counts: "runs", "points", ...
    unit: &'static str,
    bar: Mutex<Option<ProgressBar>>,
}

impl Terminal {
    pub fn new(unit: &'static str) -> Terminal {
        Terminal {
            unit,
            bar: Mutex::new(None),
        }
    }

    fn bar(&self) -> Option<ProgressBar> {
        self.bar
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Runs `f` with the bar (if any) cleared, so lines do not mix with it.
    fn outside_bar(&self, f: impl FnOnce()) {
        match self.bar() {
            Some(bar) => bar.suspend(f),
            None => f(),
        }
    }
}

impl Console for Terminal {
    fn line(&self, text: &str) {
        self.outside_bar(|| println!("{text}"));
    }

    fn note(&self, text: &str) {
        self.outside_bar(|| eprintln!("{text}"));
    }

    fn begin(&self, total: u64) {
        let bar = ProgressBar::new(total).with_style(
            ProgressStyle::with_template(&format!(
                "[{{bar:30}}] {{pos}}/{{len}} {} ({{elapsed}}, ETA {{eta}})",
                self.unit
            ))
            .expect("a valid template")
            .progress_chars("=> "),
        );
        if let Some(old) = self
            .bar
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .replace(bar)
        {
            old.finish_and_clear();
        }
    }

    fn advance(&self) {
        if let Some(bar) = self.bar() {
            bar.inc(1);
        }
    }

    fn finish(&self) {
        let bar = self
            .bar
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
    }
}
