//! The external programs some tests run (SIPp, Kamailio, tshark, promtool, Chromium),
//! shared by the build scripts of the crates whose tests use them and by those tests.
//!
//! A test that needs one is marked `#[cfg_attr(missing_TOOL, ignore = "needs TOOL ...")]`.
//! The build script sets `missing_TOOL` when the program is not on `PATH`, so a run without
//! it lists the test as ignored with its reason instead of passing without running it.
//! Under CI (`CI` set) it never does: the test runs, and [`require`] fails it on the missing
//! program, so CI cannot skip an interop test silently.
#![allow(dead_code)]

/// Each program, and the Debian package that installs it.
pub const TOOLS: [(&str, &str); 5] = [
    ("sipp", "sip-tester"),
    ("kamailio", "kamailio"),
    ("tshark", "tshark"),
    ("promtool", "prometheus"),
    ("chromium", "chromium"),
];

/// Whether `tool` is an executable file in a folder of `PATH`.
pub fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()))
}

/// Whether this is a CI run (`CI` set, as CI services do, and not to `false` or `0`).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// In a test: fails it, naming the package, when `tool` is missing.
pub fn require(tool: &str) {
    if !on_path(tool) {
        let package = TOOLS
            .iter()
            .find(|(name, _)| *name == tool)
            .map_or(tool, |(_, package)| package);
        panic!("{tool} is not installed: apt-get install {package} (CI must install it)");
    }
}

/// In a build script: sets `missing_TOOL` for each program not found outside CI, and asks
/// cargo to look again when `PATH`, `CI` or a folder of `PATH` changes (an install adds a
/// file to one).
pub fn emit_build_cfgs() {
    println!("cargo::rerun-if-env-changed=PATH");
    println!("cargo::rerun-if-env-changed=CI");
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path).filter(|dir| dir.is_dir()) {
            println!("cargo::rerun-if-changed={}", dir.display());
        }
    }
    for (tool, _) in TOOLS {
        println!("cargo::rustc-check-cfg=cfg(missing_{tool})");
        if !on_path(tool) && !in_ci() {
            println!("cargo::rustc-cfg=missing_{tool}");
        }
    }
}
