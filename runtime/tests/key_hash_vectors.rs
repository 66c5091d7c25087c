//! The key hash's test vectors in docs/state.md ("Key groups and rescaling") are what the code
//! computes: every row's canonical bytes, hash and key group for M = 128. The docs and the code
//! cannot drift apart: a change of either fails here.

use std::collections::BTreeSet;
use std::path::Path;

use tidemark_runtime::key_group::key_group;
use tidemark_runtime::key_hash::hash_bytes;
use tidemark_runtime::Value;

const HEADER: &str =
    "| key (JSON) | type | canonical bytes (hex) | murmur2 & 0x7fffffff | key group, M = 128 |";

/// The rows of the table of test vectors: (key, type, canonical bytes, hash, key group).
fn vectors() -> Vec<(String, String, Vec<u8>, u32, u32)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/state.md");
    let docs = std::fs::read_to_string(&path).unwrap();
    let table = docs
        .split_once(HEADER)
        .unwrap_or_else(|| panic!("{}: no table headed {HEADER}", path.display()))
        .1;
    let mut rows = Vec::new();
    // After the header and its separator, every line that is a row of the table.
    for line in table
        .lines()
        .skip(2)
        .take_while(|l| l.trim_start().starts_with('|'))
    {
        let cells: Vec<&str> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().trim_matches('`'))
            .collect();
        assert_eq!(cells.len(), 5, "row {line:?}");
        let bytes = match cells[2] {
            "(none)" => Vec::new(),
            hex => (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect(),
        };
        rows.push((
            cells[0].to_owned(),
            cells[1].to_owned(),
            bytes,
            cells[3].parse().unwrap_or_else(|e| panic!("{line}: {e}")),
            cells[4].parse().unwrap_or_else(|e| panic!("{line}: {e}")),
        ));
    }
    rows
}

#[test]
fn every_row_of_the_docs_table_is_what_the_code_computes() {
    let rows = vectors();
    let types: BTreeSet<&str> = rows.iter().map(|r| r.1.as_str()).collect();
    assert_eq!(
        types,
        BTreeSet::from(["bool", "double", "int", "list", "map", "null", "string"]),
        "a row for every key type"
    );
    assert!(
        rows.iter().any(|r| r.1 == "string" && !r.0.is_ascii()),
        "a non-ASCII string"
    );
    assert!(
        rows.iter().any(|r| r.1 == "int" && r.0.starts_with('-')),
        "a negative int"
    );
    for (json, type_name, bytes, hash, group) in &rows {
        let key = Value::from_json(json.as_bytes()).unwrap_or_else(|e| panic!("{json}: {e}"));
        assert_eq!(key.type_name(), type_name, "{json}");
        let mut canonical = Vec::new();
        key.write_canonical_bytes(&mut canonical);
        assert_eq!(&canonical, bytes, "canonical bytes of {json}");
        assert_eq!(hash_bytes(bytes), *hash, "hash of {json}'s bytes");
        assert_eq!(key.routing_hash(), *hash, "key hash of {json}");
        assert_eq!(
            key_group(key.routing_hash(), 128),
            *group,
            "key group of {json}"
        );
        // The exchange reader reads the key back from its bytes and type.
        assert_eq!(
            Value::from_canonical_bytes(type_name, bytes).as_ref(),
            Ok(&key),
            "{json}"
        );
    }
}
