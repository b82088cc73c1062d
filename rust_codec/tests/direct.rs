//! Frame ops written straight from their sources (`ops::direct`) write the bytes the encode
//! plan writes for the same gather, and refuse what it refuses.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests panic on purpose

mod common;

use std::collections::BTreeMap;

use common::spec;
use proptest::prelude::*;
use py_wire_codec::frame::compact::{hold, HeldSchema};
use py_wire_codec::ops::{direct, gather, output_metadata, Rows, Source};
use py_wire_codec::schema::spec::meta;
use py_wire_codec::tensor::TensorRef;
use py_wire_codec::{
    parse_frame, DType, EncodeOptions, EncodeRequest, FieldData, FieldInput, FieldSpec, Tier,
};
use sha2::Digest;

/// A compact frame of `lengths.len()` rows: the per-token fields `tokens` and the scalar
/// fields `scalars` (dtype, inner width), values derived from `seed`. Its schema is held under
/// a fingerprint of the field table.
fn frame(
    lengths: &[u64],
    tokens: &[(DType, Option<u64>)],
    scalars: &[(DType, Option<u64>)],
    seed: u8,
) -> Vec<u8> {
    let mut specs: Vec<FieldSpec> = Vec::new();
    let shape = |w: Option<u64>| w.map(|w| vec![Some(w)]).unwrap_or_default();
    specs.push(spec("ids", Tier::PerToken, DType::I64, vec![]));
    for (i, &(dtype, w)) in tokens.iter().enumerate() {
        specs.push(spec(&format!("t{i}"), Tier::PerToken, dtype, shape(w)));
    }
    for (i, &(dtype, w)) in scalars.iter().enumerate() {
        specs.push(spec(&format!("s{i}"), Tier::Scalar, dtype, shape(w)));
    }
    let fingerprint = format!(
        "sha256:{:x}",
        sha2::Sha256::digest(format!("{specs:?}").as_bytes())
    );
    let held = HeldSchema {
        fingerprint: fingerprint.clone(),
        specs: specs.clone(),
        sequence_field: Some("ids".into()),
    };
    hold(held, false).unwrap();
    let total: u64 = lengths.iter().sum();
    let rows = lengths.len() as u64;
    let storage: Vec<Vec<u8>> = specs
        .iter()
        .enumerate()
        .map(|(f, s)| {
            let items = if s.tier == Tier::PerToken {
                total
            } else {
                rows
            };
            let inner = s.shape.first().copied().flatten().unwrap_or(1);
            let n = items * inner * s.dtype.size() as u64;
            (0..n)
                .map(|b| (b as u8).wrapping_mul(31) ^ seed ^ f as u8)
                .collect()
        })
        .collect();
    let fields = specs
        .iter()
        .zip(&storage)
        .map(|(s, bytes)| {
            let inner: Vec<u64> = s.shape.iter().map(|d| d.unwrap()).collect();
            let dims = |n: u64| [&[n][..], &inner].concat();
            let input = match s.tier {
                Tier::Scalar => {
                    FieldInput::Dense(TensorRef::contiguous(s.dtype, &dims(rows), bytes).unwrap())
                }
                _ => {
                    let mut offsets = vec![0u64];
                    for &len in lengths {
                        offsets.push(offsets.last().unwrap() + len);
                    }
                    FieldInput::Jagged {
                        values: TensorRef::contiguous(s.dtype, &dims(total), bytes).unwrap(),
                        offsets,
                    }
                }
            };
            FieldData {
                spec: s.clone(),
                input,
            }
        })
        .collect();
    let request = EncodeRequest {
        fields,
        sequence_field: Some("ids".into()),
        metadata: BTreeMap::from([
            (meta::SCHEMA_REF.to_string(), fingerprint),
            ("producer".to_string(), format!("seed {seed}")),
        ]),
        ..Default::default()
    };
    py_wire_codec::encode(&request, Default::default())
        .unwrap()
        .as_slice()
        .to_vec()
}

/// The bytes the encode plan writes for `rows` of `frames`, or its error's kind.
fn planned(sources: &[Source<'_>], rows: &Rows) -> Result<Vec<u8>, String> {
    let request = gather(sources, rows).map_err(|e| e.kind().to_string())?;
    let buf =
        py_wire_codec::encode(&request, Default::default()).map_err(|e| e.kind().to_string())?;
    Ok(buf.as_slice().to_vec())
}

/// The bytes the direct path writes, checked to parse (as a hostile frame) to the layout it
/// reports.
fn taken(sources: &[Source<'_>], rows: &Rows) -> Result<Vec<u8>, String> {
    taken_with(sources, rows, options(2, usize::MAX))
}

fn options(threads: usize, parallel_threshold: usize) -> EncodeOptions {
    EncodeOptions {
        threads,
        parallel_threshold,
        operation_bytes: 0,
    }
}

/// [`taken`] with copy threads started from `options.parallel_threshold` bytes each (a small
/// threshold cuts the fields into pieces of half of it, shared between the threads).
fn taken_with(
    sources: &[Source<'_>],
    rows: &Rows,
    options: EncodeOptions,
) -> Result<Vec<u8>, String> {
    let metadata = output_metadata(sources[0].layout);
    assert!(direct::takes(sources, &metadata));
    let (buf, layout) =
        direct::take(sources, rows, metadata, options).map_err(|e| e.kind().to_string())?;
    let bytes = buf.as_slice().to_vec();
    assert_eq!(layout, parse_frame(&bytes).unwrap());
    Ok(bytes)
}

fn arb_field() -> impl Strategy<Value = (DType, Option<u64>)> {
    (
        prop::sample::select(DType::all().collect::<Vec<_>>()),
        prop::option::of(0u64..3),
    )
}

fn arb_rows(total: i64) -> impl Strategy<Value = Rows> {
    let bound = total + 2;
    prop_oneof![
        Just(Rows::All),
        (-bound..bound, -bound..bound, prop_oneof![-3i64..0, 1i64..4])
            .prop_map(|(start, stop, step)| Rows::Range { start, stop, step }),
        prop::collection::vec(-bound..bound, 0..8).prop_map(Rows::List),
        prop::collection::vec((0u64..total as u64 + 2, 0u64..3), 0..4)
            .prop_map(|s| Rows::Spans(s.into_iter().map(|(a, n)| (a, a + n)).collect())),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Any selection of rows of one to three frames of one field table: the same bytes as the
    /// encode plan's, or the same refusal.
    #[test]
    fn direct_takes_write_the_planned_bytes(
        (lengths, rows) in prop::collection::vec(0u64..5, 0..6)
            .prop_flat_map(|l| { let n = l.len() as i64 * 2; (Just(l), arb_rows(n)) }),
        tokens in prop::collection::vec(arb_field(), 0..3),
        scalars in prop::collection::vec(arb_field(), 0..3),
        second_seed in prop::option::of(any::<u8>()),
        threads in 1usize..4,
        threshold in prop::sample::select(vec![1usize, 5, 64, usize::MAX]),
    ) {
        let a = frame(&lengths, &tokens, &scalars, 1);
        let mut reversed = lengths.clone();
        reversed.reverse();
        let b = frame(&reversed, &tokens, &scalars, second_seed.unwrap_or(1));
        let (la, lb) = (parse_frame(&a).unwrap(), parse_frame(&b).unwrap());
        let one = [Source { bytes: &a, layout: &la }];
        let two = [one[0], Source { bytes: &b, layout: &lb }];
        for sources in [&one[..], &two[..]] {
            let direct = taken_with(sources, &rows, options(threads, threshold));
            prop_assert_eq!(direct, planned(sources, &rows));
        }
    }
}

#[test]
fn frames_it_does_not_take_are_left_to_the_plan() {
    let a = frame(&[2, 1], &[], &[(DType::F32, None)], 3);
    let layout = parse_frame(&a).unwrap();
    let source = [Source {
        bytes: &a,
        layout: &layout,
    }];
    let mut with_checksum = output_metadata(&layout);
    with_checksum.insert(meta::CHECKSUM.into(), "x".into());
    let mut bare = output_metadata(&layout);
    bare.remove(meta::SCHEMA_REF);
    for metadata in [with_checksum, bare] {
        assert!(!direct::takes(&source, &metadata));
        assert!(direct::take(&source, &Rows::All, metadata, options(1, usize::MAX)).is_err());
    }
    // Packed fields go through the plan.
    let sample = common::sample_frame();
    let layout = parse_frame(&sample).unwrap();
    let source = [Source {
        bytes: &sample,
        layout: &layout,
    }];
    let mut metadata = output_metadata(&layout);
    metadata.insert(
        meta::SCHEMA_REF.into(),
        format!("sha256:{}", "0".repeat(64)),
    );
    assert!(!direct::takes(&source, &metadata));
}

#[test]
fn offsets_that_decrease_are_a_frame_error() {
    let mut a = frame(&[2, 3, 1], &[], &[], 5);
    let layout = parse_frame(&a).unwrap();
    let loc = layout.seq_offsets.clone().unwrap();
    // Row 1's end offset (5) rewritten to 1 after the frame was read: row 1 would run 2..1.
    a[loc.offset + 16..loc.offset + 24].copy_from_slice(&1u64.to_le_bytes());
    let source = [Source {
        bytes: &a,
        layout: &layout,
    }];
    for rows in [Rows::All, Rows::List(vec![1]), Rows::List(vec![0, 1, 2])] {
        let metadata = output_metadata(&layout);
        let err = direct::take(&source, &rows, metadata, options(1, usize::MAX))
            .err()
            .expect("refused");
        assert_eq!(err.kind(), "frame", "{err}");
        assert!(err.message().contains("__seq_offsets"), "{err}");
    }
}

/// A frame of no rows holds only empty values tensors, which share one offset: a reader lists
/// them by name (`layout::schema_field_table`), whatever order they were written in, and both
/// writers agree. Found by the row_selection fuzz target, whose check compared the order.
#[test]
fn empty_fields_of_a_frame_without_rows_are_listed_by_name() {
    let bytes = frame(
        &[2, 1],
        &[(DType::F32, None), (DType::U8, Some(2))],
        &[(DType::I32, None)],
        3,
    );
    let layout = parse_frame(&bytes).unwrap();
    let written: Vec<&str> = layout.fields.iter().map(|f| f.spec.name.as_str()).collect();
    assert_eq!(
        written,
        ["ids", "t0", "t1", "s0"],
        "rows: data-section order"
    );
    let source = [Source {
        bytes: &bytes,
        layout: &layout,
    }];
    let empty = taken(&source, &Rows::List(vec![])).unwrap();
    assert_eq!(planned(&source, &Rows::List(vec![])).unwrap(), empty);
    let out = parse_frame(&empty).unwrap();
    let names: Vec<&str> = out.fields.iter().map(|f| f.spec.name.as_str()).collect();
    assert_eq!(names, ["ids", "s0", "t0", "t1"]);
}
