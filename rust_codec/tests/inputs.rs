//! Encode-input rules that hold without Python: the segment dedup key.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests panic on purpose

mod common;

use common::{read_i64s, spec};
use py_wire_codec::tensor::TensorRef;
use py_wire_codec::{parse_frame, DType, EncodeRequest, FieldData, FieldInput, Tier};

/// A float32 segment and a bfloat16 view of the same memory, with the same address, shape and
/// strides, write different bytes (a cast vs a copy): they must be two physical segments.
#[test]
fn dedup_key_includes_dtype() {
    let floats: Vec<u8> = [1.5f32, 2.5, 3.5, 4.5]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let mut field = spec("w", Tier::Packed, DType::F32, vec![None]);
    field.wire_dtype = Some(DType::BF16);
    let as_f32 = TensorRef::contiguous(DType::F32, &[4], &floats).unwrap();
    let as_bf16 = TensorRef::contiguous(DType::BF16, &[4], &floats[..8]).unwrap();
    assert_eq!(as_f32.bytes.as_ptr(), as_bf16.bytes.as_ptr());
    let request = EncodeRequest {
        fields: vec![FieldData {
            spec: field,
            input: FieldInput::Segments {
                segments: vec![as_f32.clone(), as_bf16, as_f32],
                row_offsets: vec![0, 1, 2, 3],
                ids: None,
            },
        }],
        ..Default::default()
    };
    let frame = py_wire_codec::encode::encode(&request, Default::default()).unwrap();
    let layout = parse_frame(frame.as_slice()).unwrap();
    let packed = layout.field("w").unwrap().packed.as_ref().unwrap();
    assert_eq!(
        packed.num_segments, 2,
        "same memory, other dtype: stored twice"
    );
    assert_eq!(
        read_i64s(frame.as_slice(), &packed.row_segments).collect::<Vec<_>>(),
        [0, 1, 0],
        "the same float32 segment twice is still stored once"
    );
}
