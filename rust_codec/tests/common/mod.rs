//! Builders shared by the integration tests.
#![allow(dead_code)]

use std::collections::BTreeMap;

use py_wire_codec::tensor::TensorRef;
use py_wire_codec::{DType, EncodeRequest, FieldData, FieldInput, FieldSpec, Tier};

pub fn spec(name: &str, tier: Tier, dtype: DType, shape: Vec<Option<u64>>) -> FieldSpec {
    FieldSpec {
        name: name.into(),
        tier,
        dtype,
        wire_dtype: None,
        shape,
        pack_dim: 0,
    }
}

pub fn le_i64(values: &[i64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// A small, valid frame: per-token ids (lengths 3, 0, 2), a packed field with a shared segment,
/// and a scalar.
pub fn sample_frame() -> Vec<u8> {
    let ids = le_i64(&[1, 2, 3, 4, 5]);
    let img_a: Vec<u8> = (0..24u8).collect();
    let img_b: Vec<u8> = (100..112u8).collect();
    let reward = [0u8; 12];
    let request = py_wire_codec::EncodeRequest {
        fields: vec![
            FieldData {
                spec: spec("ids", Tier::PerToken, DType::I64, vec![]),
                input: FieldInput::Segments {
                    segments: vec![
                        TensorRef::contiguous(DType::I64, &[3], &ids[..24]).unwrap(),
                        TensorRef::contiguous(DType::I64, &[0], &[]).unwrap(),
                        TensorRef::contiguous(DType::I64, &[2], &ids[24..]).unwrap(),
                    ],
                    row_offsets: vec![0, 1, 2, 3],
                    ids: None,
                },
            },
            FieldData {
                spec: spec("img", Tier::Packed, DType::U8, vec![None, Some(4)]),
                input: FieldInput::Segments {
                    segments: vec![
                        TensorRef::contiguous(DType::U8, &[6, 4], &img_a).unwrap(),
                        TensorRef::contiguous(DType::U8, &[3, 4], &img_b).unwrap(),
                        TensorRef::contiguous(DType::U8, &[6, 4], &img_a).unwrap(),
                    ],
                    row_offsets: vec![0, 1, 1, 3],
                    ids: None,
                },
            },
            FieldData {
                spec: spec("reward", Tier::Scalar, DType::F32, vec![]),
                input: FieldInput::Dense(TensorRef::contiguous(DType::F32, &[3], &reward).unwrap()),
            },
        ],
        sequence_field: Some("ids".into()),
        ..Default::default()
    };
    py_wire_codec::encode(&request, Default::default())
        .unwrap()
        .as_slice()
        .to_vec()
}

/// The int64s of a tensor in a frame (tests only: panics when out of bounds).
pub fn read_i64s<'b>(
    buf: &'b [u8],
    loc: &py_wire_codec::frame::layout::TensorLoc,
) -> impl Iterator<Item = i64> + 'b {
    buf[loc.offset..loc.offset + loc.nbytes]
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
}

/// Two rows: per-token `ids` (lengths 1 and 2, the sequence field) and a scalar `reward` of
/// `reward_dtype`, with header entries `metadata`.
pub fn ids_and_reward(
    metadata: BTreeMap<String, String>,
    reward_dtype: DType,
) -> EncodeRequest<'static> {
    let ids = Box::leak(le_i64(&[5, 6, 7]).into_boxed_slice());
    let reward = Box::leak(vec![0u8; 2 * reward_dtype.size()].into_boxed_slice());
    EncodeRequest {
        fields: vec![
            FieldData {
                spec: spec("ids", Tier::PerToken, DType::I64, vec![]),
                input: FieldInput::Segments {
                    segments: vec![
                        TensorRef::contiguous(DType::I64, &[1], &ids[..8]).unwrap(),
                        TensorRef::contiguous(DType::I64, &[2], &ids[8..]).unwrap(),
                    ],
                    row_offsets: vec![0, 1, 2],
                    ids: None,
                },
            },
            FieldData {
                spec: spec("reward", Tier::Scalar, reward_dtype, vec![]),
                input: FieldInput::Dense(
                    TensorRef::contiguous(reward_dtype, &[2], reward).unwrap(),
                ),
            },
        ],
        sequence_field: Some("ids".into()),
        metadata,
        ..Default::default()
    }
}
