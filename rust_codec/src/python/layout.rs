//! A frame's validated layout as typed, read-only Python objects (`Frame.layout`): where each
//! field's tensors lie, with named attributes instead of positional tuples. O(fields) objects.

use pyo3::prelude::*;

use crate::frame::layout::{DecodedField, FrameLayout, TensorLoc};

/// Where one tensor lies in the frame: an absolute byte offset, its size, dtype and shape.
#[pyclass(module = "py_wire", name = "TensorLoc", frozen, get_all)]
pub struct PyTensorLoc {
    /// Byte offset from the frame's first byte (64-byte aligned).
    offset: usize,
    nbytes: usize,
    /// torch's dtype name, e.g. "bfloat16".
    dtype: &'static str,
    shape: Vec<u64>,
}

#[pymethods]
impl PyTensorLoc {
    fn __repr__(&self) -> String {
        format!(
            "TensorLoc(offset={}, nbytes={}, dtype={:?}, shape={:?})",
            self.offset, self.nbytes, self.dtype, self.shape
        )
    }
}

fn loc(py: Python<'_>, loc: &TensorLoc) -> PyResult<Py<PyTensorLoc>> {
    Py::new(
        py,
        PyTensorLoc {
            offset: loc.offset,
            nbytes: loc.nbytes,
            dtype: loc.dtype.name(),
            shape: loc.shape.clone(),
        },
    )
}

/// One field of a frame: its spec (tier, dtypes, shape pattern, pack dim) and its tensors.
#[pyclass(module = "py_wire", name = "FieldLayout", frozen, get_all)]
pub struct PyFieldLayout {
    name: String,
    /// "packed", "per_token" or "scalar".
    tier: &'static str,
    /// The dtype producers hand in (the schema's).
    dtype: &'static str,
    /// The dtype the frame stores: the schema's wire dtype, else `dtype`.
    stored_dtype: &'static str,
    /// Static dims as ints, ragged ones as None.
    shape: Vec<Option<u64>>,
    pack_dim: usize,
    /// The flat (or stacked) values.
    values: Py<PyTensorLoc>,
    /// Packed fields only: the CSR tables (`None` for other tiers).
    seg_shapes: Option<Py<PyTensorLoc>>,
    seg_offsets: Option<Py<PyTensorLoc>>,
    row_offsets: Option<Py<PyTensorLoc>>,
    row_segments: Option<Py<PyTensorLoc>>,
    /// Packed fields only: `U8 [segments, 16]`, each segment's identity, when the frame has it.
    seg_ids: Option<Py<PyTensorLoc>>,
    /// Packed fields only: physical segments, row → segment references, and whether the
    /// values are exactly the rows' concatenation (each segment referenced once, in order).
    num_segments: u64,
    num_refs: u64,
    in_order: bool,
}

#[pymethods]
impl PyFieldLayout {
    fn __repr__(&self) -> String {
        format!(
            "FieldLayout(name={:?}, tier={:?}, stored_dtype={:?})",
            self.name, self.tier, self.stored_dtype
        )
    }
}

fn field(py: Python<'_>, f: &DecodedField) -> PyResult<Py<PyFieldLayout>> {
    let table = |pick: fn(&crate::frame::layout::PackedIndex) -> &TensorLoc| {
        f.packed.as_ref().map(|p| loc(py, pick(p))).transpose()
    };
    Py::new(
        py,
        PyFieldLayout {
            name: f.spec.name.clone(),
            tier: f.spec.tier.name(),
            dtype: f.spec.dtype.name(),
            stored_dtype: f.spec.stored_dtype().name(),
            shape: f.spec.shape.clone(),
            pack_dim: f.spec.pack_dim,
            values: loc(py, &f.values)?,
            seg_shapes: table(|p| &p.seg_shapes)?,
            seg_offsets: table(|p| &p.seg_offsets)?,
            row_offsets: table(|p| &p.row_offsets)?,
            row_segments: table(|p| &p.row_segments)?,
            seg_ids: f
                .packed
                .as_ref()
                .and_then(|p| p.seg_ids.as_ref())
                .map(|l| loc(py, l))
                .transpose()?,
            num_segments: f.packed.as_ref().map_or(0, |p| p.num_segments),
            num_refs: f.packed.as_ref().map_or(0, |p| p.num_refs),
            in_order: f.packed.as_ref().is_some_and(|p| p.in_order),
        },
    )
}

/// A frame's validated layout.
#[pyclass(module = "py_wire", name = "FrameLayout", frozen, get_all)]
pub struct PyFrameLayout {
    num_rows: u64,
    sequence_field: Option<String>,
    /// `[rows + 1]` token offsets shared by every per-token field (None without any).
    seq_offsets: Option<Py<PyTensorLoc>>,
    /// Tokens in the frame (the last sequence offset).
    total_tokens: u64,
    fields: Vec<Py<PyFieldLayout>>,
}

#[pymethods]
impl PyFrameLayout {
    fn __repr__(&self) -> String {
        format!(
            "FrameLayout(num_rows={}, fields={})",
            self.num_rows,
            self.fields.len()
        )
    }
}

pub fn frame_layout(py: Python<'_>, layout: &FrameLayout) -> PyResult<PyFrameLayout> {
    Ok(PyFrameLayout {
        num_rows: layout.num_rows,
        sequence_field: layout.sequence_field.clone(),
        seq_offsets: layout
            .seq_offsets
            .as_ref()
            .map(|l| loc(py, l))
            .transpose()?,
        total_tokens: layout.total_tokens,
        fields: layout
            .fields
            .iter()
            .map(|f| field(py, f))
            .collect::<PyResult<_>>()?,
    })
}
