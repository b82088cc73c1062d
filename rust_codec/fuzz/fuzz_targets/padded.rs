//! The padded decode path (`layout="padded"`): parse, then for every per-token field
//! `pad::pad_rows` with the frame's sequence offsets, exactly as `py_wire/_decode.py::_padded`
//! and the `pad_rows` binding call it. A valid frame must pad without error, and each padded
//! row must start with that row's tokens and end with pad elements.
//!
//! Output size cap: the output is `[rows, max_len, ...]`, i.e. rows × the longest row, which
//! is up to quadratic in the frame's size (many empty rows plus one long one). The library
//! does NOT guard it: `pad_rows` writes into a caller-allocated buffer and only checks that it
//! is exactly `rows × width × token_bytes`; Python (`_padded`) allocates it with `torch.empty`
//! unconditionally. The 64 MiB cap below is this target's own, so that the campaign stays
//! within `-malloc_limit_mb`; inputs over it are skipped.
#![no_main]

use libfuzzer_sys::fuzz_target;
use py_wire_codec::frame::layout::read_seq_offsets;
use py_wire_codec::frame::pad::pad_rows;
use py_wire_codec::{parse_frame, Tier};

mod common;

const OUT_CAP: u64 = 64 << 20;

fuzz_target!(|data: &[u8]| {
    let Ok(layout) = parse_frame(data) else {
        return;
    };
    let offsets = read_seq_offsets(data, &layout)
        .expect("a parsed frame's sequence offsets re-read")
        .unwrap_or_default();
    if offsets.is_empty() {
        return;
    }
    let rows = offsets.len().saturating_sub(1) as u64;
    let width = offsets.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    // The pad element: the input's last byte, repeated (0 pads take the fill(0) branch).
    let pad_byte = *data.last().unwrap();
    for f in layout
        .fields
        .iter()
        .filter(|f| f.spec.tier == Tier::PerToken)
    {
        let loc = &f.values;
        let es = loc.dtype.size();
        // As the binding computes it: bytes per token of `values` (`[tokens, ...]`).
        let token_bytes = loc.shape[1..]
            .iter()
            .try_fold(es as u64, |a, &d| a.checked_mul(d))
            .expect("validated values shape overflows");
        let Some(out_len) = rows
            .checked_mul(width)
            .and_then(|n| n.checked_mul(token_bytes))
            .filter(|&n| n <= OUT_CAP)
        else {
            continue; // the target's cap, not the library's (see the module comment)
        };
        let values = &data[loc.offset..loc.offset + loc.nbytes];
        let pad = vec![pad_byte; es];
        let mut out = vec![0u8; out_len as usize];
        pad_rows(
            values,
            token_bytes as usize,
            &offsets,
            width as usize,
            &pad,
            &mut out,
        )
        .unwrap_or_else(|e| panic!("valid frame, pad_rows failed: {e:?}"));
        let (tb, row_bytes) = (token_bytes as usize, (width * token_bytes) as usize);
        for r in 0..rows as usize {
            if row_bytes == 0 {
                break;
            }
            let (a, b) = (offsets[r] as usize, offsets[r + 1] as usize);
            let dst = &out[r * row_bytes..(r + 1) * row_bytes];
            assert_eq!(
                &dst[..(b - a) * tb],
                &values[a * tb..b * tb],
                "row {r} tokens"
            );
            assert!(
                dst[(b - a) * tb..].iter().all(|&x| x == pad_byte),
                "row {r} padding"
            );
        }
    }
});
