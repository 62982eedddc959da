//! Marks the live tests whose external program is missing as ignored (see the file).
#[path = "../../tests/external_tools.rs"]
mod external_tools;

fn main() {
    external_tools::emit_build_cfgs();
}
