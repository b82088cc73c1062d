//! Encode → parse round trips and hostile frames, without Python.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests panic on purpose

mod common;

use common::{le_i64, read_i64s, sample_frame, spec};
use proptest::prelude::*;
use py_wire_codec::encode::Part;
use py_wire_codec::tensor::TensorRef;
use py_wire_codec::{
    parse_frame, DType, EncodeOptions, EncodeRequest, Error, FieldData, FieldInput, FieldSpec, Tier,
};

#[test]
fn a_written_frame_reads_the_same_trusted_or_hostile() {
    let bytes = sample_frame();
    let header = py_wire_codec::frame::header::parse_header(&bytes).unwrap();
    let written = py_wire_codec::frame::layout::layout_of_written(header, &bytes).unwrap();
    let layout = parse_frame(&bytes).unwrap();
    assert_eq!(written, layout);
    assert_eq!(written.total_tokens, 5);
    assert!(
        written
            .field("img")
            .unwrap()
            .packed
            .as_ref()
            .unwrap()
            .num_refs
            == 3
    );
}

#[test]
fn sample_frame_layout() {
    let frame = sample_frame();
    assert_eq!(frame.len() % 64, 0);
    let layout = parse_frame(&frame).unwrap();
    assert_eq!(layout.num_rows, 3);
    let img = layout.field("img").unwrap();
    let packed = img.packed.as_ref().unwrap();
    assert_eq!(packed.num_segments, 2, "the shared segment is stored once");
    assert_eq!(
        read_i64s(&frame, &packed.row_segments).collect::<Vec<_>>(),
        [0, 1, 0]
    );
    assert!(!packed.in_order);
    assert_eq!(img.values.shape, vec![9, 4]);
    let values = &frame[img.values.offset..img.values.offset + img.values.nbytes];
    assert_eq!(&values[..24], &(0..24u8).collect::<Vec<_>>()[..]);
    let seq = layout.seq_offsets.as_ref().unwrap();
    assert_eq!(read_i64s(&frame, seq).collect::<Vec<_>>(), [0, 3, 3, 5]);
}

#[test]
fn truncation_at_every_length_is_a_frame_error() {
    let frame = sample_frame();
    for len in 0..frame.len() {
        match parse_frame(&frame[..len]) {
            Err(Error::Frame(_)) => {}
            other => panic!("truncated to {len}: {other:?}"),
        }
    }
}

#[test]
fn every_single_bit_flip_is_rejected_or_consistent() {
    let frame = sample_frame();
    let header_end = 8 + u64::from_le_bytes(frame[..8].try_into().unwrap()) as usize;
    // Flip every bit of the length prefix and header, and every bit of the index tensors.
    for byte in 0..frame.len() {
        for bit in 0..8 {
            let mut bad = frame.clone();
            bad[byte] ^= 1 << bit;
            match parse_frame(&bad) {
                Err(Error::Frame(_)) => {}
                Err(other) => panic!("byte {byte} bit {bit}: wrong error kind {other:?}"),
                // Payload bytes and padding may flip freely; a header flip that still parses
                // must still describe a self-consistent frame (checked by parse_frame itself).
                Ok(layout) => {
                    if byte < header_end {
                        assert!(layout.num_rows <= 3 || layout.fields.is_empty());
                    }
                }
            }
        }
    }
}

#[test]
fn lying_offsets_and_shapes_are_frame_errors() {
    let frame = sample_frame();
    let layout = parse_frame(&frame).unwrap();
    let packed = layout.field("img").unwrap().packed.clone().unwrap();
    let cases: Vec<(&str, usize, i64)> = vec![
        (
            "segment offset past the end",
            packed.seg_offsets.offset + 8,
            1 << 40,
        ),
        ("negative segment dim", packed.seg_shapes.offset, -1),
        ("huge segment dim", packed.seg_shapes.offset, i64::MAX),
        ("row segment out of range", packed.row_segments.offset, 7),
        ("row offsets decreasing", packed.row_offsets.offset + 8, 5),
        (
            "sequence offsets lie",
            layout.seq_offsets.as_ref().unwrap().offset + 16,
            99,
        ),
    ];
    for (what, at, value) in cases {
        let mut bad = frame.clone();
        bad[at..at + 8].copy_from_slice(&value.to_le_bytes());
        assert!(
            matches!(parse_frame(&bad), Err(Error::Frame(_))),
            "{what} was accepted"
        );
    }
}

#[test]
fn rewritten_headers_are_frame_errors() {
    let frame = sample_frame();
    let n = u64::from_le_bytes(frame[..8].try_into().unwrap()) as usize;
    let header = std::str::from_utf8(&frame[8..8 + n]).unwrap().to_string();
    let rewrites = [
        ("\"py_wire.format\":\"3\"", "\"py_wire.format\":\"4\""),
        ("\"py_wire.num_rows\":\"3\"", "\"py_wire.num_rows\":\"4\""),
        (
            "\"py_wire.num_rows\":\"3\"",
            "\"py_wire.num_rows\":\"18446744073709551615\"",
        ),
        (r#"\"tier\":\"packed\""#, r#"\"tier\":\"scalar\""#),
        (r#"\"pack_dim\":0"#, r#"\"pack_dim\":9"#),
        ("\"dtype\":\"F32\"", "\"dtype\":\"F64\""),
        ("\"dtype\":\"F32\"", "\"dtype\":\"Q99\""),
    ];
    for (from, to) in rewrites {
        assert!(header.contains(from), "{from} not in header");
        let new_header = header.replacen(from, to, 1);
        let mut bad = (new_header.len() as u64).to_le_bytes().to_vec();
        bad.extend_from_slice(new_header.as_bytes());
        bad.extend_from_slice(&frame[8 + n..]);
        assert!(
            matches!(parse_frame(&bad), Err(Error::Frame(_))),
            "{from} -> {to} was accepted"
        );
    }
}

fn arb_dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(DType::all().collect::<Vec<_>>())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Packed rows of random shapes and dtypes survive encode → parse bit for bit.
    #[test]
    fn packed_round_trip(
        dtype in arb_dtype(),
        width in 0u64..4,
        rows in prop::collection::vec(prop::collection::vec(0u64..5, 0..3), 0..5),
        seed in any::<u8>(),
    ) {
        let es = dtype.size() as u64;
        let storage: Vec<Vec<u8>> = rows
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, &n)| (0..n * width * es).map(|b| (b as u8) ^ seed ^ (i as u8)).collect())
            .collect();
        let mut segments = Vec::new();
        let mut row_offsets = vec![0u64];
        let mut k = 0;
        for row in &rows {
            for &n in row {
                segments.push(TensorRef::contiguous(dtype, &[n, width], &storage[k]).unwrap());
                k += 1;
            }
            row_offsets.push(segments.len() as u64);
        }
        let request = EncodeRequest {
            fields: vec![FieldData {
                spec: spec("x", Tier::Packed, dtype, vec![None, Some(width)]),
                input: FieldInput::Segments { segments, row_offsets: row_offsets.clone(), ids: None },
            }],
            ..Default::default()
        };
        let frame = py_wire_codec::encode(&request, Default::default()).unwrap();
        let bytes = frame.as_slice();
        // What the encoder says it wrote is what a reader parses from the bytes.
        let plan = py_wire_codec::encode::plan(&request).unwrap();
        prop_assert_eq!(&plan.written, &py_wire_codec::frame::header::parse_header(bytes).unwrap());
        let layout = parse_frame(bytes).unwrap();
        // The layout the encoder's caller builds without re-reading the index tables.
        let written = py_wire_codec::frame::layout::layout_of_written(plan.written, bytes).unwrap();
        prop_assert_eq!(&written, &layout);
        prop_assert_eq!(layout.num_rows, rows.len() as u64);
        let field = layout.field("x").unwrap();
        let packed = field.packed.as_ref().unwrap();
        prop_assert_eq!(read_i64s(bytes, &packed.row_offsets).collect::<Vec<_>>(),
            row_offsets.iter().map(|&v| v as i64).collect::<Vec<_>>());
        let seg_offsets: Vec<i64> = read_i64s(bytes, &packed.seg_offsets).collect();
        for (i, id) in read_i64s(bytes, &packed.row_segments).enumerate() {
            let (a, b) = (seg_offsets[id as usize] as usize, seg_offsets[id as usize + 1] as usize);
            let got = &bytes[field.values.offset + a * es as usize..field.values.offset + b * es as usize];
            prop_assert_eq!(got, &storage[i][..]);
        }
    }

    /// Per-token rows given as lists, jagged values or padded rows encode to the same bytes.
    #[test]
    fn per_token_input_forms_agree(lengths in prop::collection::vec(0u64..6, 1..5)) {
        let total: u64 = lengths.iter().sum();
        let values: Vec<i64> = (0..total as i64).collect();
        let flat = le_i64(&values);
        let width = *lengths.iter().max().unwrap();
        let mut padded = vec![0i64; lengths.len() * width as usize];
        let mut offsets = vec![0u64];
        let mut segments = Vec::new();
        for (r, &n) in lengths.iter().enumerate() {
            let start = *offsets.last().unwrap();
            for j in 0..n {
                padded[r * width as usize + j as usize] = (start + j) as i64;
            }
            segments.push(TensorRef::contiguous(DType::I64, &[n],
                &flat[start as usize * 8..(start + n) as usize * 8]).unwrap());
            offsets.push(start + n);
        }
        let padded = le_i64(&padded);
        let ids = spec("ids", Tier::PerToken, DType::I64, vec![]);
        let make = |input: FieldInput<'_>| {
            let request = EncodeRequest {
                fields: vec![FieldData { spec: ids.clone(), input }],
                sequence_field: Some("ids".into()),
                ..Default::default()
            };
            py_wire_codec::encode(&request, Default::default()).unwrap().as_slice().to_vec()
        };
        let by_rows = make(FieldInput::Segments {
            segments,
            row_offsets: (0..=lengths.len() as u64).collect(),
            ids: None,
        });
        let by_jagged = make(FieldInput::Jagged {
            values: TensorRef::contiguous(DType::I64, &[total], &flat).unwrap(),
            offsets: offsets.clone(),
        });
        let by_padded = make(FieldInput::Padded {
            padded: TensorRef::contiguous(DType::I64, &[lengths.len() as u64, width], &padded).unwrap(),
            lengths: lengths.clone(),
        });
        prop_assert_eq!(&by_rows, &by_jagged);
        prop_assert_eq!(&by_rows, &by_padded);
    }
}

#[test]
fn gather_selects_and_concatenates_rows() {
    use py_wire_codec::ops::{gather, Rows, Source};
    let frame = sample_frame();
    let layout = parse_frame(&frame).unwrap();
    let source = || Source {
        bytes: &frame,
        layout: &layout,
    };
    // Row 2 then row 0: ids [4, 5] then [1, 2, 3]; row 2 holds images b and a, row 0 holds
    // image a again, which stays one physical segment.
    let request = gather(&[source()], &Rows::List(vec![2, 0])).unwrap();
    let picked = py_wire_codec::encode(&request, Default::default()).unwrap();
    let bytes = picked.as_slice();
    let out = parse_frame(bytes).unwrap();
    assert_eq!(out.num_rows, 2);
    // Frame ops read their outputs from what the encoder wrote, not by re-parsing it: the two
    // must agree, header and layout.
    let plan = py_wire_codec::encode::plan(&request).unwrap();
    assert_eq!(
        plan.written,
        py_wire_codec::frame::header::parse_header(bytes).unwrap()
    );
    let from_written =
        py_wire_codec::frame::layout::layout_from_header(plan.written.clone(), bytes).unwrap();
    assert_eq!(format!("{from_written:?}"), format!("{out:?}"));
    let ids = out.field("ids").unwrap();
    assert_eq!(
        read_i64s(bytes, &ids.values).collect::<Vec<_>>(),
        [4, 5, 1, 2, 3]
    );
    let img = out.field("img").unwrap().packed.clone().unwrap();
    assert_eq!(img.num_segments, 2);
    assert_eq!(
        read_i64s(bytes, &img.row_segments).collect::<Vec<_>>(),
        [0, 1, 1]
    );
    // Concatenating a frame with itself doubles every row.
    let request = gather(&[source(), source()], &Rows::All).unwrap();
    let twice = py_wire_codec::encode(&request, Default::default()).unwrap();
    assert_eq!(parse_frame(twice.as_slice()).unwrap().num_rows, 6);
    assert!(matches!(
        gather(&[source()], &Rows::List(vec![3])),
        Err(Error::Argument(_))
    ));
}

#[test]
fn validation_reads_only_the_header_and_index_tables() {
    use py_wire_codec::frame::layout::validation_ranges;
    let frame = sample_frame();
    let (len, ranges) = validation_ranges(&frame).unwrap();
    assert_eq!(len, frame.len());
    // A copy of the frame that keeps only these ranges validates to the same layout.
    let mut shadow = vec![0u8; frame.len()];
    for &(start, n) in &ranges {
        shadow[start..start + n].copy_from_slice(&frame[start..start + n]);
    }
    let (want, got) = (parse_frame(&frame).unwrap(), parse_frame(&shadow).unwrap());
    assert_eq!(got.num_rows, want.num_rows);
    for (g, w) in got.fields.iter().zip(&want.fields) {
        assert_eq!(
            (g.spec.name.as_str(), g.values.offset),
            (w.spec.name.as_str(), w.values.offset)
        );
        // No field's values are among the ranges.
        let values = g.values.offset..g.values.offset + g.values.nbytes;
        assert!(ranges
            .iter()
            .all(|&(s, n)| n == 0 || s + n <= values.start || s >= values.end));
    }
    // The header alone, without the data section, is enough.
    let header_len = u64::from_le_bytes(frame[..8].try_into().unwrap()) as usize;
    assert_eq!(
        validation_ranges(&frame[..8 + header_len]).unwrap(),
        (len, ranges)
    );
    assert!(validation_ranges(&frame[..8 + header_len - 1]).is_err());
    assert!(validation_ranges(&frame[..4]).is_err());
}

#[test]
fn written_header_orders_empty_tensors_as_a_reader_does() {
    // No rows: every tensor is empty and they all start at offset 0; the header the encoder
    // reports must list them as `parse_header` does (by name), whatever the field order.
    let empty = TensorRef::contiguous(DType::F32, &[0], &[]).unwrap();
    let request = EncodeRequest {
        fields: ["zeta", "alpha", "mid"]
            .into_iter()
            .map(|name| FieldData {
                spec: spec(name, Tier::Scalar, DType::F32, vec![]),
                input: FieldInput::Dense(empty.clone()),
            })
            .collect(),
        ..Default::default()
    };
    let frame = py_wire_codec::encode(&request, Default::default()).unwrap();
    let plan = py_wire_codec::encode::plan(&request).unwrap();
    assert_eq!(
        plan.written,
        py_wire_codec::frame::header::parse_header(frame.as_slice()).unwrap()
    );
}

#[test]
fn parts_concatenate_to_the_written_frame() {
    let payload: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
    let request = EncodeRequest {
        fields: vec![FieldData {
            spec: FieldSpec {
                name: "x".into(),
                tier: Tier::Packed,
                dtype: DType::U8,
                wire_dtype: None,
                shape: vec![None],
                pack_dim: 0,
            },
            input: FieldInput::Segments {
                segments: vec![
                    TensorRef::contiguous(DType::U8, &[4000], &payload).unwrap(),
                    TensorRef::contiguous(DType::U8, &[3], &payload[7..]).unwrap(),
                ],
                row_offsets: vec![0, 1, 2],
                ids: None,
            },
        }],
        ..Default::default()
    };
    let mut plan = py_wire_codec::encode::plan(&request).unwrap();
    let mut frame = vec![0xAAu8; plan.total_len];
    plan.write_into(&mut frame, EncodeOptions::default())
        .unwrap();
    for min_borrow in [0, 16, 1 << 20] {
        let parts = plan.parts(min_borrow).unwrap();
        let joined: Vec<u8> = parts
            .iter()
            .flat_map(|p| match p {
                Part::Owned(b) => b.clone(),
                Part::Borrowed(b) => b.to_vec(),
            })
            .collect();
        assert_eq!(joined, frame, "min_borrow {min_borrow}");
        let borrowed = parts
            .iter()
            .any(|p| matches!(p, Part::Borrowed(b) if b.as_ptr() == payload.as_ptr()));
        assert_eq!(borrowed, min_borrow <= 4000, "min_borrow {min_borrow}");
    }
    assert!(plan
        .write_into(&mut frame[1..], EncodeOptions::default())
        .is_err());
}

#[test]
fn content_digest_names_the_fields_bytes_and_nothing_else() {
    use py_wire_codec::frame::checksum::content_digest;
    let frame = sample_frame();
    let layout = parse_frame(&frame).unwrap();
    let digest = |bytes: &[u8], fields: &[&str]| {
        let names: Vec<String> = fields.iter().map(|f| f.to_string()).collect();
        content_digest(&layout.header, &names, bytes)
    };
    let img = digest(&frame, &["img"]).unwrap();
    assert!(img.starts_with("xxh3-128:") && img.len() == "xxh3-128:".len() + 32);
    // Another field's bytes change: the image digest does not.
    let reward = layout.field("reward").unwrap().values.offset;
    let mut other = frame.clone();
    other[reward] ^= 1;
    assert_eq!(digest(&other, &["img"]).unwrap(), img);
    assert_ne!(
        digest(&other, &["reward"]).unwrap(),
        digest(&frame, &["reward"]).unwrap()
    );
    // One image byte changes: the digest does.
    let pixels = layout.field("img").unwrap().values.offset;
    let mut changed = frame.clone();
    changed[pixels + 5] ^= 1;
    assert_ne!(digest(&changed, &["img"]).unwrap(), img);
    // The fields named, in order, are what is digested.
    assert_ne!(digest(&frame, &["img", "reward"]).unwrap(), img);
    assert_ne!(
        digest(&frame, &["img", "reward"]).unwrap(),
        digest(&frame, &["reward", "img"]).unwrap()
    );
    let err = digest(&frame, &["img", "absent"]).unwrap_err();
    assert!(err.to_string().contains("absent"), "{err}");
}
