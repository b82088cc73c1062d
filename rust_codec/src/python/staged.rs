//! Per-token rows of many small tensors, read with as few Python calls as torch allows.
//!
//! The full reader (`extract::tensor_ref`) makes about ten Python calls per tensor and holds
//! each tensor's untyped storage. This module reads a row with direct calls of
//! `torch.Tensor`'s and `torch.UntypedStorage`'s own getters and C methods (no attribute
//! lookup, no bound method, nothing an instance `__dict__` can shadow), checks every fact the
//! full reader checks (the row's bytes inside its storage among them: a storage shrunk with
//! `resize_()` keeps the tensor's shape), and copies a small row's bytes into a staging
//! buffer right after reading its data pointer, with the GIL held from that read to the end
//! of the copy: no Python code runs in between, so no other thread can free, shrink or swap
//! the memory, and no storage needs holding. Reading the storage's bounds makes torch create
//! (and keep with the tensor) a storage object for a tensor that had none: the price of the
//! bounds check, about 250 ns per tensor. A row larger than [`STAGE_MAX_ROW_BYTES`] is not
//! staged: its storage is held and it is copied once, with the GIL released, as every other
//! input is.
//!
//! A field whose rows are all plain, contiguous CPU tensors of one registered dtype and of
//! the schema's rank becomes `FieldInput::Jagged` (the staging buffer and row offsets: per
//! encode, the payload's bytes plus 8 per row) or, when some rows are large,
//! `FieldInput::Ranges` (the staging buffer and the large rows as sources). Anything else about
//! any row (another type or dtype, a lazy flag, a non-contiguous row, a `None` or a list, a row
//! that overlaps `out`, a row whose bytes do not lie inside its storage) hands the whole field
//! to the full reader, which accepts or refuses it with the errors it always gave; the staged
//! bytes are dropped.
//!
//! The decisions themselves (bounds, sizes and offsets, checked arithmetic; where each row's
//! bytes go in the staging buffer; the rows of the result) are plain arithmetic in the core,
//! `crate::encode::staged`, which the `staged_rows` fuzz target drives without Python; this
//! module reads the numbers from torch and copies the bytes.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyList, PyTuple, PyType};

use super::extract::{held_view, rows, Registry};
use super::owners::Owners;
use super::tensor_getters::{call, get, FastReader};
use crate::encode::staged::{check_row, rank1_shape, Placement, RowFacts, StagePlan, StageRow};
pub use crate::encode::staged::{StageLimits, STAGE_MAX_ROW_BYTES};
use crate::encode::FieldInput;
use crate::schema::dtype::DType;
use crate::schema::spec::FieldSpec;
use crate::tensor::{Dims, TensorRef, MAX_RANK};

/// What stops a row from being read fast. Not an error: the full reader then reads the field
/// and says what, if anything, is wrong.
struct NotFast;

impl From<PyErr> for NotFast {
    fn from(_: PyErr) -> NotFast {
        NotFast
    }
}

impl From<crate::encode::staged::NotStaged> for NotFast {
    fn from(_: crate::encode::staged::NotStaged) -> NotFast {
        NotFast
    }
}

/// A Python int as a usize (an error for negative or huge values).
fn as_usize(v: &Bound<'_, PyAny>) -> Result<usize, NotFast> {
    // SAFETY: `v` is a live object; PyLong_AsSize_t returns (size_t)-1 with an exception set
    // for anything that is not a non-negative int that fits.
    let n = unsafe { ffi::PyLong_AsSize_t(v.as_ptr()) };
    if n == usize::MAX && PyErr::take(v.py()).is_some() {
        return Err(NotFast);
    }
    Ok(n)
}

/// A tuple of `rank` non-negative ints (a shape or strides).
fn dims_of(obj: &Bound<'_, PyAny>, rank: usize) -> Result<Dims, NotFast> {
    let tuple = obj.cast::<PyTuple>().map_err(|_| NotFast)?;
    if tuple.len() != rank || rank > MAX_RANK {
        return Err(NotFast);
    }
    let mut dims = [0u64; MAX_RANK];
    for (i, slot) in dims.iter_mut().take(rank).enumerate() {
        // SAFETY: `tuple` is a live tuple of `rank` items (checked above) and `i < rank`;
        // PyTuple_GetItem returns a borrowed reference that the tuple keeps alive.
        let item = unsafe { ffi::PyTuple_GetItem(tuple.as_ptr(), i as ffi::Py_ssize_t) };
        if item.is_null() {
            return Err(NotFast);
        }
        // SAFETY: `item` is a live object (borrowed from the tuple); PyLong_AsSize_t returns
        // (size_t)-1 with an exception set for anything but a non-negative int that fits.
        let v = unsafe { ffi::PyLong_AsSize_t(item) };
        if v == usize::MAX && PyErr::take(obj.py()).is_some() {
            return Err(NotFast);
        }
        *slot = v as u64;
    }
    Dims::new(&dims[..rank]).map_err(|_| NotFast)
}

/// Per-row state of the fast reader: the tensor type and the dtype last seen.
struct Reader<'a, 'py> {
    reg: &'a Registry,
    fast: &'a FastReader,
    ty: Bound<'py, PyType>,
    last_dtype: Option<(usize, DType)>,
}

impl<'a, 'py> Reader<'a, 'py> {
    fn new(py: Python<'py>, reg: &'a Registry, fast: &'a FastReader) -> Result<Self, NotFast> {
        Ok(Reader {
            reg,
            fast,
            ty: reg
                .tensor_type
                .bind(py)
                .cast::<PyType>()
                .map_err(|_| NotFast)?
                .clone(),
            last_dtype: None,
        })
    }

    fn dtype(&mut self, dt: &Bound<'_, PyAny>) -> Result<DType, NotFast> {
        let key = dt.as_ptr() as usize;
        if let Some((k, d)) = self.last_dtype {
            if k == key {
                return Ok(d);
            }
        }
        let d = self
            .reg
            .dtypes
            .iter()
            .find(|(o, _)| o.as_ptr() as usize == key)
            .map(|(_, d)| *d)
            .ok_or(NotFast)?;
        self.last_dtype = Some((key, d));
        Ok(d)
    }

    /// The row's dtype, shape and data pointer. `is_neg()` comes first: it is the one call
    /// here that releases the GIL (torch's generated binding does), so another thread may run
    /// during it (and `set_()`, `resize_()` or reassign `.data`); everything the copy relies on
    /// is read after it, by C getters and methods of `torch.Tensor` that keep the GIL and run
    /// no Python code (the caller has checked that no torch function mode is active, and the
    /// type is exactly `torch.Tensor`), the data pointer last.
    ///
    /// Checked: the negative bit, the dtype (a registered,
    /// non-complex one: a complex row's conjugate bit is left to the full reader), `is_cpu`,
    /// the rank and C-contiguity (from `stride()`, which raises for nested and sparse
    /// compressed tensors), the shape (`nbytes` for rank 1), a non-null data pointer and the
    /// row's bytes inside its untyped storage (`storage_bounds`). The
    /// layout needs no call of its own: every non-strided layout fails `stride()` or
    /// `data_ptr()` (sparse COO, mkldnn: no storage).
    fn read(&mut self, obj: &Bound<'py, PyAny>, rank: usize) -> Result<StageRow, NotFast> {
        let (fast, py) = (self.fast, obj.py());
        // SAFETY: Py_TYPE reads the type pointer of a live object (`obj` is a strong reference).
        if unsafe { ffi::Py_TYPE(obj.as_ptr()) } != self.ty.as_ptr().cast() {
            return Err(NotFast);
        }
        let no = |v: Bound<'_, PyAny>| v.is(PyBool::new(py, false));
        let yes = |v: Bound<'_, PyAny>| v.is(PyBool::new(py, true));
        // Every dtype can carry the negative bit (`torch._neg_view` sets it on bool tensors too).
        if !no(call(&fast.is_neg, &fast.no_args, obj)?) {
            return Err(NotFast);
        }
        let dt = get(&fast.dtype, obj, &self.ty)?;
        let dtype = self.dtype(&dt)?;
        if matches!(dtype, DType::C64 | DType::C128) {
            return Err(NotFast);
        }
        let ty = &self.ty;
        if !yes(get(&fast.is_cpu, obj, ty)?) {
            return Err(NotFast);
        }
        // `stride()` gives the rank and raises for a nested tensor (a plain `torch.Tensor`
        // whose `nbytes` looks like a tensor's) and for sparse compressed layouts.
        let strides = dims_of(&call(&fast.stride, &fast.no_args, obj)?, rank)?;
        let shape = if rank == 1 {
            rank1_shape(as_usize(&get(&fast.nbytes, obj, ty)?)?, dtype)?
        } else {
            dims_of(&get(&fast.shape, obj, ty)?, rank)?
        };
        if !crate::tensor::is_c_contiguous(&shape, &strides) {
            return Err(NotFast);
        }
        let (storage_ptr, storage_nbytes) = self.storage_bounds(obj)?;
        let data_ptr = as_usize(&call(&fast.data_ptr, &fast.no_args, obj)?)?;
        // Sizes (checked), contiguity, a non-null pointer and the row's bytes inside its
        // storage's allocation, or the full reader refuses it.
        Ok(check_row(
            &RowFacts {
                dtype,
                shape: &shape,
                strides: &strides,
                data_ptr,
                storage_ptr,
                storage_nbytes,
            },
            rank,
        )?)
    }
}

impl<'py> Reader<'_, 'py> {
    /// The base address and byte length of the row's untyped storage, read by C methods of
    /// `torch.Tensor` and `torch.UntypedStorage` (the storage's type checked exactly, so no
    /// instance attribute or subclass runs Python code here).
    fn storage_bounds(&self, obj: &Bound<'py, PyAny>) -> Result<(usize, usize), NotFast> {
        let fast = self.fast;
        let storage = call(&fast.untyped_storage, &fast.no_args, obj)?;
        // SAFETY: Py_TYPE reads the type pointer of a live object (`storage` is a strong
        // reference).
        if unsafe { ffi::Py_TYPE(storage.as_ptr()) } != fast.storage_type.as_ptr().cast() {
            return Err(NotFast);
        }
        let base = as_usize(&call(&fast.storage_data_ptr, &fast.no_args, &storage)?)?;
        let len = as_usize(&call(&fast.storage_nbytes, &fast.no_args, &storage)?)?;
        Ok((base, len))
    }
}

/// The rows of a per-token field, staged where that is safe and cheap (see the module doc);
/// otherwise exactly what the full reader returns.
pub fn per_token_rows<'a>(
    spec: &FieldSpec,
    list: &Bound<'_, PyAny>,
    keep: &'a Owners,
    limits: StageLimits,
) -> PyResult<FieldInput<'a>> {
    let name = spec.name.as_str();
    let full = || -> PyResult<FieldInput<'a>> {
        let (segments, row_offsets) = rows(name, list, keep)?;
        Ok(FieldInput::Segments {
            segments,
            row_offsets,
            ids: None,
        })
    };
    let reg = super::extract::registry()?;
    let (Some(fast), Ok(list_ref)) = (reg.fast.as_ref(), list.cast::<PyList>()) else {
        return full();
    };
    if limits.max_row_bytes == 0 || list_ref.is_empty() || reg.torch_function_mode(list.py()) {
        return full();
    }
    match stage(spec, list_ref, keep, limits, reg, fast) {
        Ok(input) => Ok(input),
        Err(NotFast) => full(),
    }
}

fn stage<'a>(
    spec: &FieldSpec,
    list: &Bound<'_, PyList>,
    keep: &'a Owners,
    limits: StageLimits,
    reg: &Registry,
    fast: &FastReader,
) -> Result<FieldInput<'a>, NotFast> {
    let name = spec.name.as_str();
    let mut plan = StagePlan::new(spec, limits, list.len())?;
    let rank = plan.rank();
    let mut staging: Vec<u8> = Vec::new();
    // The large rows' full views (storage held), in the plan's order.
    let mut large: Vec<TensorRef<'a>> = Vec::new();
    let mut reader = Reader::new(list.py(), reg, fast)?;
    for (row, obj) in list.iter().enumerate() {
        let r = reader.read(&obj, rank)?;
        let reserve = plan.reserve_hint(list.len());
        match plan.push(&r)? {
            Placement::Stage { at, len } => {
                if at != staging.len() || len != r.nbytes {
                    return Err(NotFast);
                }
                staging.reserve(reserve);
                if len > 0 {
                    // SAFETY: torch reports a contiguous CPU tensor of `nbytes` bytes starting
                    // at `ptr`, non-null and inside its storage's allocation (`check_row`). The
                    // GIL has been held since `ptr` was read and no Python code ran since
                    // (`read` calls nothing after data_ptr), so no thread has freed or swapped
                    // the tensor's storage, and the list (held by the caller) keeps the tensor
                    // alive.
                    let bytes = unsafe { std::slice::from_raw_parts(r.ptr as *const u8, len) };
                    staging.extend_from_slice(bytes);
                }
            }
            Placement::Large { .. } => {
                let loc = || format!("field {name:?}, row {row}");
                let strides = crate::tensor::contiguous_strides(&r.shape);
                let view = held_view(&obj, r.dtype, &r.shape, &strides, keep, &loc)
                    .map_err(|_| NotFast)?;
                large.push(view);
            }
        }
    }
    let field = plan.finish(staging.len())?;
    let bytes = keep.stage(staging);
    let values =
        TensorRef::contiguous(field.dtype, &field.values_shape, bytes).map_err(|_| NotFast)?;
    let Some(spans) = field.spans else {
        return Ok(FieldInput::Jagged {
            values,
            offsets: field.offsets,
        });
    };
    // Some rows are views of their own: rows as spans of [staging, large rows...].
    let mut sources = Vec::with_capacity(large.len() + 1);
    sources.push(values);
    sources.extend(large);
    Ok(FieldInput::Ranges { sources, spans })
}
