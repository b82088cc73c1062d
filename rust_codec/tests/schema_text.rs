//! The embedded schema as `parse_frame` checks it (`schema::text`): its fingerprint and
//! canonical form, the field table derived from it, the one format read, and frame ops that
//! keep one schema per frame.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests panic on purpose

mod common;

use std::collections::BTreeMap;

use py_wire_codec::frame::header::parse_header;
use py_wire_codec::schema::spec::meta;
use py_wire_codec::schema::text::fingerprint;
use py_wire_codec::{parse_frame, DType, Error, FieldSpec, Tier};

/// The schema as a file may give it (keys left to their defaults); [`schema`] writes it whole.
const SHORT: &str = concat!(
    r#"{"fields":{"ids":{"dtype":"int64","shape":[],"tier":"per_token"},"#,
    r#""reward":{"dtype":"float32","shape":[],"tier":"scalar"}},"#,
    r#""name":"t","sequence_field":"ids"}"#
);

/// `text` as py_wire writes a schema: every key, canonical form.
fn whole(text: &str) -> String {
    let value = py_wire_codec::schema::text::parse(text).unwrap();
    py_wire_codec::schema::model::resolve(&value)
        .unwrap()
        .canonical
}

/// The schema frames embed.
fn schema() -> String {
    whole(SHORT)
}

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
    let fp = fingerprint(&schema());
    let bytes = frame(Some(schema().as_str()), Some(&fp), DType::F32, "ids");
    let layout = parse_frame(&bytes).unwrap();
    assert_eq!(layout.num_rows, 2);
    // The field table and the sequence field come from the schema; the header has neither.
    let md = &parse_header(&bytes).unwrap().metadata;
    assert_eq!(md[meta::FORMAT], "3");
    assert!(!md.contains_key(meta::FIELDS), "{md:?}");
    assert!(!md.contains_key(meta::SEQUENCE_FIELD), "{md:?}");
    assert_eq!(layout.sequence_field.as_deref(), Some("ids"));
    assert_eq!(
        layout
            .fields
            .iter()
            .map(|f| FieldSpec::clone(&f.spec))
            .collect::<Vec<_>>(),
        specs()
    );
    // A request handed to the codec without a schema embeds the one its fields declare.
    let codec = frame(None, None, DType::F32, "ids");
    let header = parse_header(&codec).unwrap();
    assert!(header.metadata.contains_key(meta::SCHEMA));
    assert!(!header.metadata.contains_key(meta::FIELDS));
    assert_eq!(specs_of(&parse_frame(&codec).unwrap()), specs());
    // A header with a field table and no schema (the pre-1.0 bare form) is not read.
    let mut md = header.metadata.clone();
    md.remove(meta::SCHEMA);
    md.remove(meta::FINGERPRINT);
    md.insert(
        meta::FIELDS.into(),
        serde_json::to_string(&specs()).unwrap(),
    );
    md.insert(meta::SEQUENCE_FIELD.into(), "ids".into());
    let mut bare = py_wire_codec::frame::header::write_header(&md, &header.entries).unwrap();
    bare.extend_from_slice(&codec[header.data_start..header.frame_len]);
    let msg = refusal(&bare);
    assert!(msg.contains("carries no schema"), "{msg}");
}

#[test]
fn a_damaged_schema_is_refused_by_parse_frame() {
    let fp = fingerprint(&schema());
    let msg = refusal(&frame(
        Some(schema().as_str()),
        Some("sha256:00"),
        DType::F32,
        "ids",
    ));
    assert!(msg.contains("does not match its fingerprint"), "{msg}");
    let spaced = schema().replace(',', ", ");
    let msg = refusal(&frame(
        Some(&spaced),
        Some(&fingerprint(&spaced)),
        DType::F32,
        "ids",
    ));
    assert!(msg.contains("not in canonical form"), "{msg}");
    let msg = refusal(&frame(Some(schema().as_str()), None, DType::F32, "ids"));
    assert!(msg.contains("no fingerprint"), "{msg}");
    let msg = refusal(&frame(None, Some(&fp), DType::F32, "ids"));
    assert!(msg.contains("no schema"), "{msg}");
}

#[test]
fn a_schema_that_disagrees_with_the_tensors_is_refused_naming_the_field() {
    let fp = fingerprint(&schema());
    match parse_frame(&frame(
        Some(schema().as_str()),
        Some(&fp),
        DType::F64,
        "ids",
    )) {
        Err(Error::Frame(d)) => assert!(
            d.message.contains("field \"reward\"")
                && d.message.contains("float64")
                && d.message.contains("float32"),
            "{}",
            d.message
        ),
        other => panic!("{:?}", other.map(|l| l.num_rows)),
    }
    // A schema without the field whose tensors the frame holds.
    let fewer = whole(&SHORT.replace(
        r#","reward":{"dtype":"float32","shape":[],"tier":"scalar"}"#,
        "",
    ));
    assert_ne!(fewer, schema());
    let msg = refusal(&frame(
        Some(&fewer),
        Some(&fingerprint(&fewer)),
        DType::F32,
        "ids",
    ));
    assert!(
        msg.contains("\"reward\"") && msg.contains("belongs to no field"),
        "{msg}"
    );
    let other = schema().replace(r#""sequence_field":"ids""#, r#""sequence_field":null"#);
    let msg = refusal(&frame(
        Some(&other),
        Some(&fingerprint(&other)),
        DType::F32,
        "ids",
    ));
    assert!(msg.contains("need a sequence_field"), "{msg}");
}

/// The specs `SHORT` resolves to, in schema order.
fn specs() -> Vec<FieldSpec> {
    vec![
        common::spec("ids", Tier::PerToken, DType::I64, vec![]),
        common::spec("reward", Tier::Scalar, DType::F32, vec![]),
    ]
}

fn specs_of(layout: &py_wire_codec::frame::layout::FrameLayout) -> Vec<FieldSpec> {
    layout
        .fields
        .iter()
        .map(|f| FieldSpec::clone(&f.spec))
        .collect()
}

/// `bytes` with its `__metadata__` edited by `edit`, the header re-padded so the data section
/// stays 64-byte aligned.
fn rewritten(
    bytes: &[u8],
    edit: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>),
) -> Vec<u8> {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    edit(header["__metadata__"].as_object_mut().unwrap());
    let mut json = serde_json::to_vec(&header).unwrap();
    json.resize((8 + json.len()).next_multiple_of(64) - 8, b' ');
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&json);
    out.extend_from_slice(&bytes[8 + n..]);
    out
}

#[test]
fn a_format_3_header_that_mixes_forms_or_another_version_is_refused() {
    let current = frame(
        Some(schema().as_str()),
        Some(&fingerprint(&schema())),
        DType::F32,
        "ids",
    );
    for key in [meta::FIELDS, meta::SEQUENCE_FIELD] {
        let mixed = rewritten(&current, |md| {
            md.insert(key.into(), serde_json::to_string(&specs()).unwrap().into());
        });
        let msg = refusal(&mixed);
        assert!(
            msg.contains("also carries") && msg.contains(key),
            "{key}: {msg}"
        );
    }
    let future = rewritten(&current, |md| {
        md.insert(meta::FORMAT.into(), "4".into());
    });
    let msg = refusal(&future);
    assert!(
        msg.contains("\"4\"") && msg.contains("format \"3\" only"),
        "{msg}"
    );
    // The formats before 3 are not read (0.1 had no users), not even where their bytes are
    // format 3's (format 2's embedded form): the version names what a frame is.
    for old in ["1", "2"] {
        let earlier = rewritten(&current, |md| {
            md.insert(meta::FORMAT.into(), old.into());
        });
        let msg = refusal(&earlier);
        assert!(msg.contains(&format!("\"{old}\"")), "{old}: {msg}");
    }
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
        let facts = py_wire_codec::schema::embedded::check_text(&text, &fingerprint(&text))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!facts.specs.is_empty(), "{name}");
        seen += 1;
    }
    assert!(seen >= 4, "{seen} schema seeds in {}", dir.display());
}

#[test]
fn frames_of_two_schemas_are_not_gathered_into_one() {
    // Found by the gather fuzz target: the output carries frame 0's schema, so a field only
    // the other schema declares was written under a schema without it (an invalid frame).
    use py_wire_codec::ops::{gather, Rows, Source};
    let other = schema().replace(r#""name":"t""#, r#""name":"u""#);
    let a = frame(
        Some(schema().as_str()),
        Some(&fingerprint(&schema())),
        DType::F32,
        "ids",
    );
    let b = frame(Some(&other), Some(&fingerprint(&other)), DType::F32, "ids");
    let (la, lb) = (parse_frame(&a).unwrap(), parse_frame(&b).unwrap());
    let one = Source {
        bytes: &a,
        layout: &la,
    };
    let same = [one, one];
    assert!(gather(&same, &Rows::All).is_ok());
    let two = [
        one,
        Source {
            bytes: &b,
            layout: &lb,
        },
    ];
    match gather(&two, &Rows::All) {
        Err(Error::Frame(d)) => assert!(d.message.contains("share their schema"), "{}", d.message),
        other => panic!(
            "expected a FrameError, got {:?}",
            other.map(|_| "a request")
        ),
    }
}
