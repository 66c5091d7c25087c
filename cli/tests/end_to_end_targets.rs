//! The end-to-end tests live in integration-tests/tests/ but are test targets of this package
//! (so Cargo builds the `tidemark` binary for them). Cargo finds only the targets Cargo.toml
//! names there: this fails when a file in that folder has no `[[test]]` entry, so a new test
//! file is never silently left out of `cargo test`.

use std::path::Path;

#[test]
fn every_end_to_end_test_file_is_a_test_target() {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(manifest_dir.join("Cargo.toml"))
        .expect("cli/Cargo.toml is readable");
    let folder = manifest_dir.join("../integration-tests/tests");
    let entries = std::fs::read_dir(&folder)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", folder.display()));
    let mut missing = Vec::new();
    for entry in entries {
        let name = entry.expect("a folder entry").file_name();
        let name = name.to_string_lossy();
        if let Some(stem) = name.strip_suffix(".rs") {
            let declared = format!(
                "[[test]]\nname = \"{stem}\"\npath = \"../integration-tests/tests/{name}\"\n"
            );
            if !manifest.contains(&declared) {
                missing.push(name.into_owned());
            }
        }
    }
    assert!(
        missing.is_empty(),
        "integration-tests/tests/ files without a [[test]] entry in cli/Cargo.toml: {missing:?}"
    );
}
