//! Segment identity (`frame::identity`, a packed field's optional `f.seg_ids`): written only
//! when a segment has an id, one physical segment per id on encode, carried by every frame
//! operation (take, split, concat) and read from the wire as hostile input.

#![allow(clippy::unwrap_used)] // tests panic on purpose

mod common;

use common::spec;
use py_wire_codec::encode::EncodeOptions;
use py_wire_codec::frame::header::{parse_header, write_header};
use py_wire_codec::frame::identity::{SegId, NO_ID};
use py_wire_codec::frame::layout::PackedTables;
use py_wire_codec::ops::{split_frames, take, Rows, Source};
use py_wire_codec::tensor::TensorRef;
use py_wire_codec::{parse_frame, DType, EncodeRequest, Error, FieldData, FieldInput, Tier};

fn id(n: u8) -> SegId {
    let mut id = NO_ID;
    id[0] = n;
    id[15] = 0xee;
    id
}

/// Four rows of one packed field `img` (u8 `[*, 4]`): rows 0 and 1 share image A, rows 2 and 3
/// share image B, and (when `ids`) each image is handed in twice, as two copies whose only
/// link is their id (a GRPO group's media decoded from two frames).
fn frame(ids: bool) -> Vec<u8> {
    let a: Vec<u8> = (0..8u8).collect();
    let a_copy = a.clone();
    let b: Vec<u8> = (50..62u8).collect();
    let b_copy = b.clone();
    fn seg(bytes: &[u8]) -> TensorRef<'_> {
        TensorRef::contiguous(DType::U8, &[bytes.len() as u64 / 4, 4], bytes).unwrap()
    }
    let request = EncodeRequest {
        fields: vec![FieldData {
            spec: spec("img", Tier::Packed, DType::U8, vec![None, Some(4)]),
            input: FieldInput::Segments {
                segments: vec![seg(&a), seg(&a_copy), seg(&b), seg(&b_copy)],
                row_offsets: vec![0, 1, 2, 3, 4],
                ids: ids.then(|| vec![id(1), id(1), id(2), id(2)]),
            },
        }],
        ..Default::default()
    };
    py_wire_codec::encode(&request, EncodeOptions::default())
        .unwrap()
        .as_slice()
        .to_vec()
}

/// The `img` tables of a frame, read as a hostile reader does.
fn tables(bytes: &[u8]) -> PackedTables {
    let layout = parse_frame(bytes).unwrap();
    PackedTables::read(bytes, layout.field("img").unwrap(), layout.num_rows).unwrap()
}

/// Each row's ids, row after row (one per reference).
fn row_ids(t: &PackedTables) -> Vec<SegId> {
    t.row_segments.iter().map(|&s| t.id(s)).collect()
}

fn taken(sources: &[&[u8]], rows: Rows) -> Vec<u8> {
    let layouts: Vec<_> = sources.iter().map(|b| parse_frame(b).unwrap()).collect();
    let sources: Vec<Source<'_>> = sources
        .iter()
        .zip(&layouts)
        .map(|(bytes, layout)| Source { bytes, layout })
        .collect();
    take(&sources, &rows, None, EncodeOptions::default())
        .unwrap()
        .0
        .as_slice()
        .to_vec()
}

#[test]
fn copies_with_one_id_are_stored_once_and_a_frame_without_ids_has_no_table() {
    let with = tables(&frame(true));
    assert_eq!(with.num_segments(), 2, "one physical segment per id");
    assert_eq!(with.seg_ids, Some(vec![id(1), id(2)]));
    assert_eq!(row_ids(&with), [id(1), id(1), id(2), id(2)]);
    // Without ids the copies are other memory: four segments, and no table at all (the
    // frame is what it was before identity existed).
    let plain = frame(false);
    let without = tables(&plain);
    assert_eq!((without.num_segments(), without.seg_ids), (4, None));
    let header = parse_header(&plain).unwrap();
    assert!(header.entries.iter().all(|e| !e.name.ends_with(".seg_ids")));
}

#[test]
fn take_split_and_concat_carry_each_segments_id() {
    let whole = frame(true);
    // Two shards of one group (rows 0 and 1 share A): each shard keeps A's id.
    let left = taken(&[&whole], Rows::List(vec![0, 2]));
    let right = taken(&[&whole], Rows::List(vec![1, 3]));
    assert_eq!(row_ids(&tables(&left)), [id(1), id(2)]);
    assert_eq!(row_ids(&tables(&right)), [id(1), id(2)]);
    // Their concat stores A and B once each, as the source does.
    let joined = taken(&[&left, &right], Rows::All);
    let t = tables(&joined);
    assert_eq!(t.num_segments(), 2);
    assert_eq!(row_ids(&t), [id(1), id(2), id(1), id(2)]);
    // A shard's rows that share nothing among themselves keep ids too (rows 1 and 2).
    let mixed = taken(&[&whole], Rows::List(vec![1, 2]));
    assert_eq!(tables(&mixed).seg_ids, Some(vec![id(1), id(2)]));
    // split_frames: every section keeps its rows' ids.
    let layout = parse_frame(&whole).unwrap();
    let source = Source {
        bytes: &whole,
        layout: &layout,
    };
    let parts = split_frames(source, &[1, 3], EncodeOptions::default()).unwrap();
    let ids: Vec<Vec<SegId>> = parts
        .iter()
        .map(|(buf, _)| row_ids(&tables(buf.as_slice())))
        .collect();
    assert_eq!(ids, [vec![id(1)], vec![id(1), id(2), id(2)]]);
    // Rows of a frame without ids joined to rows with ids: the former have none, and two
    // frames' segments without ids stay apart (their bytes are not compared).
    let (plain, other) = (frame(false), frame(false));
    let t = tables(&taken(
        &[&plain, &whole, &other],
        Rows::List(vec![0, 4, 8, 5]),
    ));
    assert_eq!(row_ids(&t), [NO_ID, id(1), NO_ID, id(1)]);
    assert_eq!(t.num_segments(), 3);
}

/// Writes into a data section at the id table's offset.
type Patch = dyn Fn(&mut [u8], usize);

/// `frame(true)` with the header rewritten by `edit` (entries in data order), the data section
/// replaced by `data` when given.
fn rewritten(
    edit: impl Fn(&mut Vec<py_wire_codec::frame::header::Entry>),
    data: Option<&Patch>,
) -> Vec<u8> {
    let good = frame(true);
    let header = parse_header(&good).unwrap();
    let mut entries = header.entries.clone();
    edit(&mut entries);
    let mut out = write_header(&header.metadata, &entries).unwrap();
    let start = out.len();
    out.extend_from_slice(&good[header.data_start..header.frame_len]);
    if let Some(data) = data {
        let at = entries
            .iter()
            .find(|e| e.name == "img.seg_ids")
            .unwrap()
            .begin as usize;
        data(&mut out[start..], at);
    }
    out
}

fn frame_error(bytes: &[u8]) -> py_wire_codec::error::Detail {
    match parse_frame(bytes) {
        Err(Error::Frame(d)) => *d,
        other => panic!("expected a FrameError, got {other:?}"),
    }
}

#[test]
fn a_hostile_id_table_is_a_frame_error_naming_the_field() {
    // One id on two segments would merge different media on a gather.
    let dup = rewritten(
        |_| {},
        Some(&|data, at| {
            let first: [u8; 16] = data[at..at + 16].try_into().unwrap();
            data[at + 16..at + 32].copy_from_slice(&first);
        }),
    );
    let d = frame_error(&dup);
    assert_eq!((d.field.as_deref(), d.segment), (Some("img"), Some(1)));
    assert!(d.message.contains("img.seg_ids[1]"), "{}", d.message);

    let ids_entry = |e: &mut Vec<py_wire_codec::frame::header::Entry>| {
        e.iter().position(|x| x.name == "img.seg_ids").unwrap()
    };
    // Not U8 [S, 16]: another dtype, another width.
    let wrong_dtype = rewritten(
        |e| {
            let i = ids_entry(e);
            e[i].dtype = DType::I8;
        },
        None,
    );
    assert!(frame_error(&wrong_dtype).message.contains("img.seg_ids"));
    let wrong_width = rewritten(
        |e| {
            let i = ids_entry(e);
            e[i].shape = vec![4, 8];
        },
        None,
    );
    let d = frame_error(&wrong_width);
    assert!(d.message.contains("[segments, 16]"), "{}", d.message);
    // One id more than there are segments (taken from the padding after the table).
    let one_more = rewritten(
        |e| {
            let i = ids_entry(e);
            e[i].shape = vec![3, 16];
            e[i].end += 16;
            let pad = &mut e[i + 1];
            assert!(pad.name.starts_with("__pad."), "{}", pad.name);
            pad.begin += 16;
            pad.shape = vec![pad.end - pad.begin];
        },
        None,
    );
    let d = frame_error(&one_more);
    assert!(d.message.contains("3 ids for 2 segments"), "{}", d.message);
    assert_eq!(d.field.as_deref(), Some("img"));
}

#[test]
fn one_id_on_segments_of_other_shapes_is_a_batch_error() {
    let a = [0u8; 8];
    let b = [1u8; 12];
    let request = EncodeRequest {
        fields: vec![FieldData {
            spec: spec("img", Tier::Packed, DType::U8, vec![None, Some(4)]),
            input: FieldInput::Segments {
                segments: vec![
                    TensorRef::contiguous(DType::U8, &[2, 4], &a).unwrap(),
                    TensorRef::contiguous(DType::U8, &[3, 4], &b).unwrap(),
                ],
                row_offsets: vec![0, 1, 2],
                ids: Some(vec![id(9), id(9)]),
            },
        }],
        ..Default::default()
    };
    match py_wire_codec::encode(&request, EncodeOptions::default()) {
        Err(Error::Batch(d)) => {
            assert_eq!((d.field.as_deref(), d.row), (Some("img"), Some(1)));
            assert!(
                d.message.contains("one id names one segment"),
                "{}",
                d.message
            );
        }
        other => panic!("expected a BatchError, got {:?}", other.map(|_| ())),
    }
}
