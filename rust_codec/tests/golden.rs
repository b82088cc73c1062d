//! The golden frames (`tests/golden/` at the repository root, written by 1.0 through
//! `scripts/make_golden.py`) read by the crate alone: each parses as its manifest says, its
//! stored checksums hold, and the encoder writes it again byte for byte from its own rows. A
//! change to how any tier is checked, planned or laid out that moves one byte fails here.

#![allow(clippy::unwrap_used)] // tests panic on purpose

use std::io::Read;
use std::path::PathBuf;

use py_wire_codec::encode::{plan, EncodeOptions};
use py_wire_codec::frame::checksum;
use py_wire_codec::ops::{gather, Rows, Source};
use py_wire_codec::parse_frame;

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/golden")
}

/// Each golden frame's manifest entry and its bytes, ungzipped.
fn golden() -> Vec<(String, serde_json::Value, Vec<u8>)> {
    let manifest = std::fs::read_to_string(golden_dir().join("MANIFEST.json")).unwrap();
    let manifest: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&manifest).unwrap();
    manifest
        .into_iter()
        .map(|(name, entry)| {
            let file = golden_dir().join(entry["file"].as_str().unwrap());
            let gz = std::fs::read(&file).unwrap();
            let mut bytes = Vec::new();
            flate2::read::GzDecoder::new(&gz[..])
                .read_to_end(&mut bytes)
                .unwrap();
            (name, entry, bytes)
        })
        .collect()
}

#[test]
fn every_golden_frame_parses_as_its_manifest_says_and_its_checksums_hold() {
    let frames = golden();
    assert!(frames.len() >= 15, "{} golden frames", frames.len());
    for (name, entry, bytes) in &frames {
        assert_eq!(
            bytes.len() as u64,
            entry["nbytes"].as_u64().unwrap(),
            "{name}"
        );
        let layout = parse_frame(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            layout.num_rows,
            entry["num_rows"].as_u64().unwrap(),
            "{name}"
        );
        let mut fields: Vec<&str> = layout.fields.iter().map(|f| f.spec.name.as_str()).collect();
        fields.sort_unstable();
        let mut want: Vec<&str> = entry["fields"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        want.sort_unstable();
        assert_eq!(fields, want, "{name}");
        let names: Vec<String> = layout.fields.iter().map(|f| f.spec.name.clone()).collect();
        checksum::verify(&layout.header, &names, bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn the_encoder_writes_every_golden_frame_again_byte_for_byte() {
    let mut tiers = std::collections::BTreeSet::new();
    for (name, _, bytes) in golden() {
        let layout = parse_frame(&bytes).unwrap();
        tiers.extend(layout.fields.iter().map(|f| f.spec.tier.name()));
        let source = Source {
            bytes: &bytes,
            layout: &layout,
        };
        let request = gather(&[source], &Rows::All).unwrap();
        let written = plan(&request)
            .and_then(|mut p| p.write(EncodeOptions::default()))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            written.as_slice() == &bytes[..],
            "{name}: the encoder wrote other bytes ({} against {})",
            written.as_slice().len(),
            bytes.len()
        );
    }
    assert_eq!(
        tiers.into_iter().collect::<Vec<_>>(),
        ["packed", "per_token", "scalar"],
        "the golden frames cover every tier"
    );
}
