//! Placeholder contracts on whole requests, without Python.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests panic on purpose

mod common;

use common::{le_i64, spec};
use py_wire_codec::contract::{check_request_contracts, CountRule, PlaceholderContract};
use py_wire_codec::tensor::TensorRef;
use py_wire_codec::{DType, EncodeRequest, Error, FieldData, FieldInput, Tier};

const PAD: i64 = 151655;

fn qwen_contract() -> PlaceholderContract {
    PlaceholderContract {
        kind: Some("placeholder".into()),
        name: "image_placeholders".into(),
        media_field: "pixels".into(),
        token_id: PAD,
        begin_token_id: None,
        end_token_id: None,
        count: CountRule::GridThw,
        grid_field: Some("grid".into()),
        merge_size: 2,
        tokens_per_image: None,
        sizes_field: None,
        count_field: None,
        patch_size: 16,
        downsample_ratio: 0.5,
    }
}

/// One row: `tokens`, one image of `patches` pixel rows with grid (1, 2, 2).
fn check(tokens: &[i64], patches: u64, with_grid: bool) -> Result<(), Error> {
    let ids = le_i64(tokens);
    let grid = le_i64(&[1, 2, 2]);
    let pixels = vec![0u8; patches as usize * 4 * 4];
    let mut fields = vec![
        FieldData {
            spec: spec("ids", Tier::PerToken, DType::I64, vec![]),
            input: FieldInput::Segments {
                segments: vec![TensorRef::contiguous(
                    DType::I64,
                    &[tokens.len() as u64],
                    &ids,
                )?],
                row_offsets: vec![0, 1],
                ids: None,
            },
        },
        FieldData {
            spec: spec("pixels", Tier::Packed, DType::F32, vec![None, Some(4)]),
            input: FieldInput::Segments {
                segments: vec![TensorRef::contiguous(DType::F32, &[patches, 4], &pixels)?],
                row_offsets: vec![0, 1],
                ids: None,
            },
        },
    ];
    if with_grid {
        fields.push(FieldData {
            spec: spec("grid", Tier::Packed, DType::I64, vec![None, Some(3)]),
            input: FieldInput::Segments {
                segments: vec![TensorRef::contiguous(DType::I64, &[1, 3], &grid)?],
                row_offsets: vec![0, 1],
                ids: None,
            },
        });
    }
    let request = EncodeRequest {
        fields,
        sequence_field: Some("ids".into()),
        ..Default::default()
    };
    check_request_contracts(&request, &[qwen_contract()])
}

#[test]
fn aligned_row_passes() {
    check(&[1, PAD, 2], 4, true).unwrap();
}

#[test]
fn short_run_is_a_contract_error() {
    let err = check(&[1, 2, 3], 4, true).unwrap_err();
    assert!(matches!(err, Error::Contract(_)), "{err:?}");
    let err = check(&[1, PAD, PAD, 2], 4, true).unwrap_err();
    assert!(err.message().contains("row 0, image 0"), "{err}");
}

#[test]
fn pixels_must_match_the_grid() {
    let err = check(&[1, PAD, 2], 5, true).unwrap_err();
    assert!(
        err.message()
            .contains("grid implies 4 patches but pixels has 5"),
        "{err}"
    );
}

#[test]
fn media_without_geometry_is_an_error() {
    let err = check(&[1, PAD, 2], 4, false).unwrap_err();
    assert!(err.message().contains("geometry lost"), "{err}");
}
