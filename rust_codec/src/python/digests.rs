//! Content digests of a frame's fields (`frame::checksum`).

use pyo3::prelude::*;

use super::errors::{guarded, to_py, OnPanic};
use super::frame::Frame;

/// The content of `fields` in `frame` as one digest (`"xxh3-128:<32 hex>"`, see
/// `frame::checksum::content_digest`), without the GIL: what names a streamed sample's images,
/// so that a buffer stores a prompt's images once. `FrameError` names a field the frame lacks.
#[pyfunction]
pub fn content_digest(
    py: Python<'_>,
    frame: &Bound<'_, Frame>,
    fields: Vec<String>,
) -> PyResult<String> {
    let frame = frame.get();
    py.detach(|| {
        guarded(OnPanic::Frame, || {
            crate::frame::checksum::content_digest(&frame.layout().header, &fields, frame.bytes())
        })
    })
    .map_err(to_py)
}
