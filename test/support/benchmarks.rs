//! Writes one section of `docs/benchmarks.md`, between `<!-- <name>:begin -->` and
//! `<!-- <name>:end -->`, keeping the other sections as they are.

use std::path::PathBuf;

/// Replaces (or appends) the section `name` with `body`.
pub fn write_section(name: &str, body: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/benchmarks.md");
    let current = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        "# Benchmarks\n\nFigures as measured by the bench binaries (`cargo bench --bench <name>`); each section says how.\n".to_string()
    });
    let begin = format!("<!-- {name}:begin -->");
    let end = format!("<!-- {name}:end -->");
    let block = format!("{begin}\n{body}{end}");
    let updated = match (current.find(&begin), current.find(&end)) {
        (Some(b), Some(e)) if e > b => {
            format!("{}{block}{}", &current[..b], &current[e + end.len()..])
        }
        _ => format!("{}\n{block}\n", current.trim_end()),
    };
    std::fs::write(&path, updated).expect("docs/benchmarks.md written");
}

/// The current body of section `name`, if `docs/benchmarks.md` has it.
pub fn read_section(name: &str) -> Option<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/benchmarks.md");
    let current = std::fs::read_to_string(path).ok()?;
    let begin = format!("<!-- {name}:begin -->\n");
    let end = format!("<!-- {name}:end -->");
    let start = current.find(&begin)? + begin.len();
    let stop = start + current[start..].find(&end)?;
    Some(current[start..stop].to_string())
}

/// Whether the binary runs under `cargo bench` (which passes `--bench`). `cargo test
/// --all-targets` also runs bench targets, without that flag; benches then return at once,
/// so measuring never slows down or rewrites docs from a test run.
pub fn invoked_by_cargo_bench() -> bool {
    let bench = std::env::args().any(|a| a == "--bench");
    if !bench {
        println!("not measuring: run with `cargo bench --bench <name>`");
    }
    bench
}
