//! Frame bytes → `parse_frame`; an `Ok` layout is walked as a consumer would, every location
//! and index table read and checked in bounds.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    let Ok(layout) = py_wire_codec::parse_frame(data) else {
        return;
    };
    common::walk(data, &layout);
    // A row count that no bytes back would size a consumer's per-row loops and allocations.
    assert!(
        common::rows_backed(data, &layout),
        "num_rows {} is not backed by a {}-byte frame",
        layout.num_rows,
        data.len()
    );
});
