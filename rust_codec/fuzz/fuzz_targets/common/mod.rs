//! Shared by every target: a consumer's walk over a parsed layout.
#![allow(dead_code)]

use py_wire_codec::encode::{plan, EncodeOptions, EncodeRequest};
use py_wire_codec::memory::buffer::AlignedBuf;
use py_wire_codec::frame::layout::{layout_of_written, parse_frame, FrameLayout, TensorLoc};
use py_wire_codec::tensor::checked_numel;
use py_wire_codec::Tier;

/// Whether the layout's row count is backed by bytes: DESIGN §7, "a row count is trusted only
/// as far as index tensors of that length exist in the frame" (the parser bounds it by the
/// frame's length).
pub fn rows_backed(buf: &[u8], layout: &FrameLayout) -> bool {
    layout.num_rows <= buf.len() as u64
}

/// The int64s of a located tensor (the walk checks the location first).
pub fn read_i64s<'b>(buf: &'b [u8], loc: &TensorLoc) -> impl Iterator<Item = i64> + 'b {
    buf[loc.offset..loc.offset + loc.nbytes]
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
}

/// The location lies inside the buffer and holds exactly `shape` of `dtype`.
pub fn check_loc(buf: &[u8], loc: &TensorLoc, what: &str) {
    let end = loc
        .offset
        .checked_add(loc.nbytes)
        .expect("loc end overflows");
    assert!(
        end <= buf.len(),
        "{what}: {}..{end} outside {} bytes",
        loc.offset,
        buf.len()
    );
    let numel = checked_numel(&loc.shape).expect("validated shape overflows");
    assert_eq!(
        numel.checked_mul(loc.dtype.size() as u64),
        Some(loc.nbytes as u64),
        "{what}: nbytes disagrees with shape"
    );
}

/// Reads every location and index table of a parsed frame the way a consumer would (Python
/// builds views from exactly these numbers), asserting each is in bounds and consistent.
/// Work is O(index tensor bytes), never O(claimed counts).
pub fn walk(buf: &[u8], layout: &FrameLayout) {
    let mut seq_last = None;
    if let Some(seq) = &layout.seq_offsets {
        check_loc(buf, seq, "__seq_offsets");
        let offs: Vec<i64> = read_i64s(buf, seq).collect();
        assert_eq!(offs.len() as u64, layout.num_rows + 1, "seq offsets length");
        assert_eq!(offs[0], 0);
        assert!(
            offs.windows(2).all(|w| w[0] <= w[1]),
            "seq offsets decrease"
        );
        seq_last = Some(*offs.last().unwrap() as u64);
    }
    for f in &layout.fields {
        let name = &f.spec.name;
        check_loc(buf, &f.values, name);
        assert_eq!(f.values.dtype, f.spec.stored_dtype(), "{name}: dtype");
        match f.spec.tier {
            Tier::Scalar => assert_eq!(f.values.shape.first(), Some(&layout.num_rows)),
            Tier::PerToken => {
                assert_eq!(f.values.shape.first().copied(), seq_last, "{name}: tokens")
            }
            Tier::Packed => {
                let p = f.packed.as_ref().expect("packed field without CSR");
                for (loc, what) in [
                    (&p.seg_shapes, "seg_shapes"),
                    (&p.seg_offsets, "seg_offsets"),
                    (&p.row_offsets, "row_offsets"),
                    (&p.row_segments, "row_segments"),
                ] {
                    check_loc(buf, loc, what);
                }
                let rank = f.spec.shape.len();
                let shapes: Vec<i64> = read_i64s(buf, &p.seg_shapes).collect();
                let seg_offs: Vec<i64> = read_i64s(buf, &p.seg_offsets).collect();
                let row_offs: Vec<i64> = read_i64s(buf, &p.row_offsets).collect();
                let refs: Vec<i64> = read_i64s(buf, &p.row_segments).collect();
                assert_eq!(shapes.len() as u64, p.num_segments * rank as u64);
                assert_eq!(seg_offs.len() as u64, p.num_segments + 1);
                assert_eq!(row_offs.len() as u64, layout.num_rows + 1);
                assert_eq!(refs.len() as u64, p.num_refs);
                let numel = checked_numel(&f.values.shape).unwrap();
                // Every row's references, every segment's elements, and the shape that covers them.
                for r in 0..row_offs.len() - 1 {
                    let (a, b) = (row_offs[r], row_offs[r + 1]);
                    assert!(
                        0 <= a && a <= b && b as u64 <= p.num_refs,
                        "{name}: row {r}"
                    );
                    for &id in &refs[a as usize..b as usize] {
                        assert!(0 <= id && (id as u64) < p.num_segments, "{name}: id {id}");
                        let id = id as usize;
                        let (s, e) = (seg_offs[id], seg_offs[id + 1]);
                        assert!(0 <= s && s <= e && e as u64 <= numel, "{name}: seg {id}");
                        let dims: Vec<u64> = shapes[id * rank..(id + 1) * rank]
                            .iter()
                            .map(|&d| u64::try_from(d).expect("negative dim"))
                            .collect();
                        assert_eq!(
                            checked_numel(&dims),
                            Some((e - s) as u64),
                            "{name}: seg {id}"
                        );
                        for (d, want) in dims.iter().zip(&f.spec.shape) {
                            if let Some(w) = want {
                                assert_eq!(d, w, "{name}: static dim");
                            }
                        }
                        // The bytes a view of this segment covers.
                        let es = f.values.dtype.size();
                        let start = f.values.offset + s as usize * es;
                        let _ = &buf[start..start + (e - s) as usize * es];
                    }
                }
                if p.in_order {
                    assert!(refs.iter().enumerate().all(|(i, &id)| id as usize == i));
                }
            }
        }
    }
}

/// A fuzz input read front to back; bytes past its end read as 0.
pub struct Bytes<'a>(pub &'a [u8]);

impl Bytes<'_> {
    pub fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    pub fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        b.iter_mut().for_each(|x| *x = self.u8());
        u64::from_le_bytes(b)
    }
}

/// Whether `err` is the encoder's one refusal of a gathered request: more rows than the frame's
/// bytes back, which only fields that store nothing per row allow.
pub fn rows_unbacked(request: &EncodeRequest<'_>, err: &py_wire_codec::Error) -> bool {
    err.kind() == "rows_unbacked" && !request.fields.iter().any(|f| f.spec.stores_bytes_per_row())
}

/// Encodes `request` and reads the frame back as a hostile reader does (`parse_frame`),
/// asserting that the layout the encoder's caller gets without re-reading the index tables
/// (`layout_of_written`) is the same. `Err` where encoding refuses.
pub fn encode_and_parse(
    request: &EncodeRequest<'_>,
    options: EncodeOptions,
) -> py_wire_codec::Result<(AlignedBuf, FrameLayout)> {
    let mut plan = plan(request)?;
    let out = plan.write(options)?;
    let layout = parse_frame(out.as_slice())
        .unwrap_or_else(|e| panic!("the encoder wrote an invalid frame: {e:?}"));
    let written = layout_of_written(plan.written, out.as_slice())
        .unwrap_or_else(|e| panic!("layout_of_written refused a frame just written: {e:?}"));
    assert_eq!(
        written, layout,
        "layout_of_written disagrees with parse_frame"
    );
    Ok((out, layout))
}
