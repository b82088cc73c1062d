//! Every crash the fuzz campaign found (`fuzz/regressions/<target>/`) replayed on each
//! `cargo test`, without libFuzzer: the input must give a result or an error, never a panic or
//! an allocation its bytes do not justify.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests panic on purpose

use std::path::PathBuf;

use py_wire_codec::contract::{check_contracts, PlaceholderContract};
use py_wire_codec::ops::{gather, Rows, Source};
use py_wire_codec::{parse_frame, Error};

fn inputs(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/regressions")
        .join(target);
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no regressions in {}", dir.display());
    out
}

#[test]
fn parse_frame_regressions() {
    for (name, data) in inputs("parse_frame") {
        if let Ok(layout) = parse_frame(&data) {
            assert!(
                layout.num_rows <= data.len() as u64,
                "{name}: unbacked rows"
            );
        }
    }
}

/// The gather target's input: `[flags, split_lo, split_hi, k] ++ frames ++ k * 2 row bytes`.
#[test]
fn gather_regressions() {
    for (name, data) in inputs("gather") {
        let (flags, split) = (data[0], u16::from_le_bytes([data[1], data[2]]) as usize);
        let k = (data[3] % 16) as usize;
        let body = &data[4..];
        let frames = &body[..body.len() - 2 * k];
        let parts: Vec<&[u8]> = if flags & 1 != 0 {
            let at = split.min(frames.len());
            vec![&frames[..at], &frames[at..]]
        } else {
            vec![frames]
        };
        let Ok(layouts) = parts
            .iter()
            .map(|p| parse_frame(p))
            .collect::<Result<Vec<_>, Error>>()
        else {
            continue;
        };
        let sources: Vec<Source<'_>> = parts
            .iter()
            .zip(&layouts)
            .map(|(bytes, layout)| Source { bytes, layout })
            .collect();
        // As the target: concatenate, and with flag 2 the first frame with itself too.
        let mut cases = vec![sources.clone()];
        if flags & 2 != 0 {
            cases.push(vec![sources[0], sources[0]]);
        }
        for case in cases {
            if let Ok(request) = gather(&case, &Rows::All) {
                let out = match py_wire_codec::encode(&request, Default::default()) {
                    Ok(out) => out,
                    // More rows than bytes, of fields that store nothing per row: refused.
                    Err(e)
                        if e.kind() == "rows_unbacked"
                            && !request.fields.iter().any(|f| f.spec.stores_bytes_per_row()) =>
                    {
                        continue
                    }
                    Err(e) => panic!("{name}: gathered but did not encode: {e}"),
                };
                parse_frame(out.as_slice())
                    .unwrap_or_else(|e| panic!("{name}: gathered an invalid frame: {e}"));
            }
        }
    }
}

#[test]
fn contract_regressions() {
    let fixed: PlaceholderContract = serde_json::from_str(
        r#"{"name": "c", "media_field": "pixel_values", "token_id": 262144, "count": "fixed",
            "tokens_per_image": 256, "merge_size": 2, "patch_size": 16,
            "downsample_ratio": 0.5, "begin_token_id": null, "end_token_id": null,
            "grid_field": null, "sizes_field": null}"#,
    )
    .unwrap();
    for (name, data) in inputs("contracts") {
        let Ok(layout) = parse_frame(&data) else {
            continue;
        };
        let mut contract = fixed.clone();
        if let Some(media) = layout
            .fields
            .iter()
            .find(|f| f.spec.tier == py_wire_codec::Tier::Packed)
        {
            contract.media_field = media.spec.name.clone();
        }
        match check_contracts(&data, &layout, &[contract]) {
            Ok(()) | Err(Error::Contract(_) | Error::Schema(_) | Error::Frame(_)) => {}
            Err(other) => panic!("{name}: {other:?}"),
        }
    }
}
