//! The embedded schema as `parse_frame` checks it (`frame::schema_text`): its fingerprint and
//! canonical form, and the field table against what it implies.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests panic on purpose

mod common;

use std::collections::BTreeMap;

use py_wire_codec::frame::schema_text::fingerprint;
use py_wire_codec::schema::spec::meta;
use py_wire_codec::{parse_frame, DType, Error};

const SCHEMA: &str = concat!(
    r#"{"fields":{"ids":{"dtype":"int64","shape":[],"tier":"per_token"},"#,
    r#""reward":{"dtype":"float32","shape":[],"tier":"scalar"}},"#,
    r#""name":"t","sequence_field":"ids"}"#
);

/// A two-row frame (`common::ids_and_reward`) whose header carries `text` and `fp` (when
/// given), its reward field laid out as `reward_dtype` and its sequence field `seq`.
fn frame(text: Option<&str>, fp: Option<&str>, reward_dtype: DType, seq: &str) -> Vec<u8> {
    let mut metadata = BTreeMap::new();
    if let Some(text) = text {
        metadata.insert(meta::SCHEMA.to_string(), text.to_string());
    }
    if let Some(fp) = fp {
        metadata.insert(meta::FINGERPRINT.to_string(), fp.to_string());
    }
    let mut request = common::ids_and_reward(metadata, reward_dtype);
    request.sequence_field = Some(seq.into());
    py_wire_codec::encode(&request, Default::default())
        .unwrap()
        .as_slice()
        .to_vec()
}

fn refusal(bytes: &[u8]) -> String {
    match parse_frame(bytes) {
        Err(Error::Frame(d)) => d.message.clone(),
        other => panic!("expected a FrameError, got {other:?}"),
    }
}

#[test]
fn an_embedded_schema_that_agrees_reads() {
    let fp = fingerprint(SCHEMA);
    let layout = parse_frame(&frame(Some(SCHEMA), Some(&fp), DType::F32, "ids")).unwrap();
    assert_eq!(layout.num_rows, 2);
    // A bare codec frame (no schema entries at all) has only its field table to go by.
    parse_frame(&frame(None, None, DType::F32, "ids")).unwrap();
}

#[test]
fn a_damaged_schema_is_refused_by_parse_frame() {
    let fp = fingerprint(SCHEMA);
    let msg = refusal(&frame(Some(SCHEMA), Some("sha256:00"), DType::F32, "ids"));
    assert!(msg.contains("does not match its fingerprint"), "{msg}");
    let spaced = SCHEMA.replace(',', ", ");
    let msg = refusal(&frame(
        Some(&spaced),
        Some(&fingerprint(&spaced)),
        DType::F32,
        "ids",
    ));
    assert!(msg.contains("not in canonical form"), "{msg}");
    let msg = refusal(&frame(Some(SCHEMA), None, DType::F32, "ids"));
    assert!(msg.contains("no fingerprint"), "{msg}");
    let msg = refusal(&frame(None, Some(&fp), DType::F32, "ids"));
    assert!(msg.contains("no schema"), "{msg}");
}

#[test]
fn a_field_table_that_disagrees_with_the_schema_is_refused() {
    let fp = fingerprint(SCHEMA);
    let msg = refusal(&frame(Some(SCHEMA), Some(&fp), DType::F64, "ids"));
    assert!(
        msg.contains("field \"reward\"")
            && msg.contains("dtype float64")
            && msg.contains("float32"),
        "{msg}"
    );
    let other = SCHEMA.replace(r#""sequence_field":"ids""#, r#""sequence_field":null"#);
    let msg = refusal(&frame(
        Some(&other),
        Some(&fingerprint(&other)),
        DType::F32,
        "ids",
    ));
    assert!(msg.contains("sequence field"), "{msg}");
}

#[test]
fn the_bundled_schemas_seeded_for_the_fuzzer_are_canonical() {
    // `fuzz/make_seeds.py` writes bundled schemas' canonical JSON (Python's) as seeds: the
    // reader must find each canonical and valid as it stands.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/schema_json");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("seed-schema.") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let facts = py_wire_codec::frame::schema_text::check_text(&text, &fingerprint(&text))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!facts.specs.is_empty(), "{name}");
        seen += 1;
    }
    assert!(seen >= 4, "{seen} schema seeds in {}", dir.display());
}
