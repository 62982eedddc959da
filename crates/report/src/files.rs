//! What every writer of result files needs: CSV tables, file names from labels, and writes
//! whose errors name the file.

use std::fmt::Write as _;
use std::path::Path;

use sha2::{Digest, Sha256};

/// A CSV table in memory, written by the `csv` crate: a field is quoted only when it needs
/// to be (a comma, a quote or a line break in it), and lines end in `\n`.
#[derive(Debug)]
pub struct CsvTable {
    writer: csv::Writer<Vec<u8>>,
}

impl CsvTable {
    /// A table with this header row.
    pub fn new<T: AsRef<[u8]>>(header: impl IntoIterator<Item = T>) -> CsvTable {
        let mut table = CsvTable {
            writer: csv::WriterBuilder::new()
                .terminator(csv::Terminator::Any(b'\n'))
                .flexible(true)
                .from_writer(Vec::new()),
        };
        table.row(header);
        table
    }

    /// Appends a row.
    pub fn row<T: AsRef<[u8]>>(&mut self, fields: impl IntoIterator<Item = T>) {
        // Into memory, a flexible writer has nothing to fail on.
        let _ = self.writer.write_record(fields);
    }

    /// The table's text.
    pub fn into_text(self) -> String {
        let bytes = self
            .writer
            .into_inner()
            .unwrap_or_else(|e| e.into_inner().get_ref().clone());
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// A label as a file name: ASCII letters, digits and `-` kept, everything else `_`.
pub fn file_stem(label: &str) -> String {
    label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Writes `text` to `path`.
pub fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
}

/// Creates `dir` and its parents.
pub fn create_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))
}

/// Reads `path` as text.
pub fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))
}

/// Writes `bytes` to `path` through a temporary file beside it, so an interrupted write
/// leaves the old file whole.
pub fn replace(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    std::fs::write(&tmp, bytes).map_err(|e| format!("writing {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("writing {}: {e}", path.display()))
}

/// SHA-256 of `bytes`, in hex: names an experiment's text in a shard's manifest and a
/// tuning run's settings in its state.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .fold(String::with_capacity(64), |mut hex, b| {
            let _ = write!(hex, "{b:02x}");
            hex
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_quoted_only_when_csv_needs_it() {
        let mut t = CsvTable::new(["variant", "goodput"]);
        t.row(["win-cont", "0.5"]);
        t.row(["a,b", ""]);
        t.row(["say \"hi\"", "1"]);
        t.row(["two\nlines", "2"]);
        assert_eq!(
            t.into_text(),
            "variant,goodput\nwin-cont,0.5\n\"a,b\",\n\"say \"\"hi\"\"\",1\n\"two\nlines\",2\n"
        );
    }

    #[test]
    fn sha256_is_the_standard_one() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn stems_keep_letters_digits_and_dashes() {
        assert_eq!(
            file_stem("rate-abs as RFC 7415/rate"),
            "rate-abs_as_RFC_7415_rate"
        );
    }
}
