//! Regression tests for hostile frames that used to abort the process or loop for hours: no
//! allocation or loop may be sized by a number the bytes do not back.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests panic on purpose

mod common;

use std::collections::BTreeMap;

use common::{le_i64, sample_frame, spec};
use py_wire_codec::contract::{check_contracts, PlaceholderContract};
use py_wire_codec::frame::header::write_header;
use py_wire_codec::ops::{gather, split, Rows, Source};
use py_wire_codec::schema::model::schema_of_specs;
use py_wire_codec::tensor::TensorRef;
use py_wire_codec::{
    parse_frame, DType, EncodeRequest, Error, FieldData, FieldInput, FieldSpec, Tier,
};

/// `meta` with the schema of `specs` (sequence field `seq`) embedded, as the codec writes it.
fn embed(meta: &mut BTreeMap<String, String>, specs: &[FieldSpec], seq: Option<&str>) {
    let schema = schema_of_specs("t", specs, seq).unwrap();
    meta.insert("py_wire.schema".to_string(), schema.canonical);
    meta.insert("py_wire.fingerprint".to_string(), schema.fingerprint);
}

/// A frame with no tensors at all whose metadata claims `rows` rows.
fn fieldless_frame(rows: &str) -> Vec<u8> {
    let mut meta = BTreeMap::new();
    meta.insert("py_wire.format".to_string(), "3".to_string());
    meta.insert("py_wire.num_rows".to_string(), rows.to_string());
    embed(&mut meta, &[], None);
    write_header(&meta, &[]).unwrap()
}

#[test]
fn a_row_count_the_bytes_do_not_back_is_refused() {
    for rows in [
        "1099511627776",
        "2305843009213693952",
        "9223372036854775809",
    ] {
        let frame = fieldless_frame(rows);
        match parse_frame(&frame) {
            Err(Error::Frame(m)) => assert!(m.contains(rows), "{m}"),
            other => panic!("{rows} rows: {other:?}"),
        }
    }
    for rows in ["-1", "+5", "1e3", " 7", "18446744073709551616", ""] {
        assert!(
            matches!(parse_frame(&fieldless_frame(rows)), Err(Error::Frame(_))),
            "{rows:?} was accepted as a row count"
        );
    }
    // A small fieldless frame is fine and its rows can be gathered.
    let frame = fieldless_frame("3");
    let layout = parse_frame(&frame).unwrap();
    let source = Source {
        bytes: &frame,
        layout: &layout,
    };
    let request = gather(&[source, source], &Rows::All).unwrap();
    let out = py_wire_codec::encode(&request, Default::default()).unwrap();
    assert_eq!(parse_frame(out.as_slice()).unwrap().num_rows, 6);
}

#[test]
fn an_encode_that_would_not_back_its_rows_is_refused() {
    let request = EncodeRequest {
        num_rows_hint: Some(1 << 20),
        ..Default::default()
    };
    match py_wire_codec::encode(&request, Default::default()) {
        Err(Error::Batch(m)) => assert!(m.contains("1048576 rows"), "{m}"),
        other => panic!("{:?}", other.map(|b| b.as_slice().len())),
    }
}

fn zero_byte_segments(dim0: u64, count: usize) -> EncodeRequest<'static> {
    let ids = Box::leak(le_i64(&[5, 5]).into_boxed_slice());
    let segments = (0..count)
        .map(|_| TensorRef::contiguous(DType::U8, &[dim0, 0], &[]).unwrap())
        .collect();
    EncodeRequest {
        fields: vec![
            FieldData {
                spec: spec("ids", Tier::PerToken, DType::I64, vec![]),
                input: FieldInput::Segments {
                    segments: vec![TensorRef::contiguous(DType::I64, &[2], ids).unwrap()],
                    row_offsets: vec![0, 1],
                    ids: None,
                },
            },
            FieldData {
                spec: spec("img", Tier::Packed, DType::U8, vec![None, None]),
                input: FieldInput::Segments {
                    segments,
                    row_offsets: vec![0, count as u64],
                    ids: None,
                },
            },
        ],
        sequence_field: Some("ids".into()),
        ..Default::default()
    }
}

#[test]
fn segment_sizes_that_overflow_are_a_batch_error_naming_the_field() {
    match py_wire_codec::encode(&zero_byte_segments(1 << 62, 4), Default::default()) {
        Err(Error::Batch(m)) => assert!(m.contains("\"img\""), "{m}"),
        other => panic!("{:?}", other.map(|b| b.as_slice().len())),
    }
}

#[test]
fn a_fixed_count_contract_never_allocates_per_claimed_image() {
    // One row of two tokens with a zero-byte segment of 2^40 images: the old check allocated
    // 8 TiB of expected counts and aborted.
    let frame = py_wire_codec::encode(&zero_byte_segments(1 << 40, 1), Default::default()).unwrap();
    let layout = parse_frame(frame.as_slice()).unwrap();
    let contract: PlaceholderContract = serde_json::from_str(
        r#"{"name": "img", "media_field": "img", "token_id": 5, "count": "fixed",
            "tokens_per_image": 2, "merge_size": 2, "patch_size": 16, "downsample_ratio": 0.5,
            "begin_token_id": null, "end_token_id": null, "grid_field": null,
            "sizes_field": null}"#,
    )
    .unwrap();
    match check_contracts(frame.as_slice(), &layout, &[contract]) {
        Err(Error::Contract(m)) => assert!(m.contains("1099511627776 images"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn frame_ops_revalidate_tables_written_after_parsing() {
    let frame = sample_frame();
    let layout = parse_frame(&frame).unwrap();
    let img = layout.field("img").unwrap().packed.clone().unwrap();
    let seq = layout.seq_offsets.clone().unwrap();
    // Overwrite index entries after the layout was validated, as a writer sharing the buffer
    // could: every op must notice, never index out of bounds.
    let edits = [
        (img.row_offsets.offset + 8, 1i64 << 40),
        (img.row_segments.offset, 99),
        (img.seg_offsets.offset + 8, -3),
        (img.seg_shapes.offset, 1i64 << 50),
        (seq.offset + 8, 1i64 << 33),
    ];
    for (at, value) in edits {
        let mut bad = frame.clone();
        bad[at..at + 8].copy_from_slice(&value.to_le_bytes());
        let source = Source {
            bytes: &bad,
            layout: &layout,
        };
        assert!(
            matches!(gather(&[source], &Rows::All), Err(Error::Frame(_))),
            "gather accepted {value} at byte {at}"
        );
        assert!(
            matches!(split(source, &[1, 2]), Err(Error::Frame(_))),
            "split accepted {value} at byte {at}"
        );
    }
}

#[test]
fn row_selections_are_checked_without_materialising_claims() {
    let frame = sample_frame();
    let layout = parse_frame(&frame).unwrap();
    let source = Source {
        bytes: &frame,
        layout: &layout,
    };
    let rows = |r: Rows| gather(&[source], &r).map(|req| req.num_rows_hint);
    assert_eq!(rows(Rows::List(vec![-1, 0])), Ok(Some(2)));
    assert!(matches!(
        rows(Rows::List(vec![-4])),
        Err(Error::Argument(_))
    ));
    assert!(matches!(
        rows(Rows::List(vec![i64::MIN])),
        Err(Error::Argument(_))
    ));
    let range = |start, stop, step| Rows::Range { start, stop, step };
    assert_eq!(rows(range(0, 3, 2)), Ok(Some(2)));
    assert_eq!(rows(range(2, -1, -1)), Ok(Some(3)));
    assert_eq!(rows(range(5, 5, 1)), Ok(Some(0)));
    assert!(matches!(
        rows(range(0, 1 << 62, 1)),
        Err(Error::Argument(_))
    ));
    assert!(matches!(
        rows(range(i64::MIN, i64::MAX, i64::MAX)),
        Err(Error::Argument(_))
    ));
    assert!(matches!(rows(range(0, 3, 0)), Err(Error::Argument(_))));
    assert_eq!(rows(Rows::Spans(vec![(2, 3), (0, 2)])), Ok(Some(3)));
    assert!(matches!(
        rows(Rows::Spans(vec![(0, 1), (2, 4)])),
        Err(Error::Argument(_))
    ));
    assert!(matches!(
        rows(Rows::Spans(vec![(2, 1)])),
        Err(Error::Argument(_))
    ));
    let parts = split(source, &[1, 0, 2]).unwrap();
    let counts: Vec<_> = parts.iter().map(|p| p.num_rows_hint).collect();
    assert_eq!(counts, [Some(1), Some(0), Some(2)]);
    assert!(matches!(split(source, &[1, 1]), Err(Error::Argument(_))));
    assert!(matches!(
        split(source, &[u64::MAX, 4]),
        Err(Error::Argument(_))
    ));
}

#[test]
fn huge_header_lengths_are_refused_before_reading() {
    let mut frame = (200_000_000u64).to_le_bytes().to_vec();
    frame.extend_from_slice(b"{}");
    match parse_frame(&frame) {
        Err(Error::Frame(m)) => assert!(m.contains("limit") || m.contains("exceeds"), "{m}"),
        other => panic!("{other:?}"),
    }
}

/// `sample_frame` with the fields its embedded schema declares rewritten by `edit` (the
/// tensors unchanged; the schema keeps `ids` as its sequence field while it declares it).
fn with_field_table(edit: impl Fn(Vec<serde_json::Value>) -> Vec<serde_json::Value>) -> Vec<u8> {
    let frame = sample_frame();
    let header = py_wire_codec::frame::header::parse_header(&frame).unwrap();
    let mut meta = header.metadata.clone();
    let layout = parse_frame(&frame).unwrap();
    let table: Vec<serde_json::Value> = layout
        .fields
        .iter()
        .map(|f| serde_json::to_value(&*f.spec).unwrap())
        .collect();
    let specs: Vec<FieldSpec> = edit(table)
        .into_iter()
        .map(|v| serde_json::from_value(v).unwrap())
        .collect();
    let seq = specs.iter().any(|f| f.name == "ids").then_some("ids");
    embed(&mut meta, &specs, seq);
    let mut out = write_header(&meta, &header.entries).unwrap();
    out.extend_from_slice(&frame[header.data_start..header.frame_len]);
    out
}

#[test]
fn tensors_that_no_field_claims_are_refused() {
    // Issue 15, finding 8: an emptied field table with the tensors still there parsed as a
    // frame of no fields (and concat then met tensors it could not place).
    type EditTable = fn(Vec<serde_json::Value>) -> Vec<serde_json::Value>;
    let cases: [(&str, EditTable); 3] = [
        ("__seq_offsets", |_| Vec::new()),
        ("reward", |t| {
            t.into_iter().filter(|f| f["name"] != "reward").collect()
        }),
        ("img", |t| {
            t.into_iter().filter(|f| f["name"] != "img").collect()
        }),
    ];
    for (orphan, edit) in cases {
        match parse_frame(&with_field_table(edit)) {
            Err(Error::Frame(m)) => {
                assert!(m.contains("belongs to no field"), "{m}");
                assert!(m.contains(orphan), "{orphan}: {m}");
            }
            other => panic!("{orphan}: {:?}", other.map(|l| l.fields.len())),
        }
    }
    // The table as written parses, padding entries included.
    let frame = with_field_table(|t| t);
    let header = py_wire_codec::frame::header::parse_header(&frame).unwrap();
    assert!(header.entries.iter().any(|e| e.name.starts_with("__pad.")));
    assert_eq!(parse_frame(&frame).unwrap().fields.len(), 3);
}
