//! The console the library's runs write to: results on standard output, notes on standard
//! error, and a `[done/total]` progress line on standard error when it is a terminal.

use std::io::IsTerminal as _;
use std::sync::atomic::{AtomicU64, Ordering};

use sluice_bench::console::Console;

#[derive(Debug)]
pub struct Terminal {
    show: bool,
    total: AtomicU64,
    done: AtomicU64,
}

impl Terminal {
    pub fn open() -> Terminal {
        Terminal {
            // Progress is for people watching a terminal; logs and pipes get the lines only.
            show: std::io::stderr().is_terminal(),
            total: AtomicU64::new(0),
            done: AtomicU64::new(0),
        }
    }
}

impl Console for Terminal {
    fn line(&self, text: &str) {
        println!("{text}");
    }

    fn note(&self, text: &str) {
        eprintln!("{text}");
    }

    fn begin(&self, total: u64) {
        self.total.store(total, Ordering::Relaxed);
        self.done.store(0, Ordering::Relaxed);
    }

    fn advance(&self) {
        let n = self.done.fetch_add(1, Ordering::Relaxed) + 1;
        if self.show {
            eprint!("\r[{n}/{}]        ", self.total.load(Ordering::Relaxed));
        }
    }

    fn finish(&self) {
        if self.show && self.done.load(Ordering::Relaxed) > 0 {
            eprintln!();
        }
    }
}
