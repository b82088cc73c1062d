//! Python objects → borrowed tensor views. Duck-typed: torch tensors through `data_ptr()`,
//! `shape` and `stride()` (with their untyped storage held), anything else through the buffer
//! protocol (numpy, memoryview, array.array). Rust never imports torch; the Python layer
//! registers torch's tensor type, dtype objects and `torch.strided` once.

use std::sync::OnceLock;

use pyo3::buffer::PyUntypedBuffer;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

use super::errors::BatchError;
use super::owners::Owners;
use super::tensor_getters::FastReader;
use crate::encode::input::ResolvedRows;
use crate::frame::identity::{SegId, ID_LEN, NO_ID};
use crate::schema::dtype::DType;
use crate::tensor::{extent_bytes, Dims, TensorRef, MAX_RANK};

pub(super) struct Registry {
    pub(super) tensor_type: Py<PyAny>,
    /// `torch.Tensor.__torch_dispatch__`: a subclass that overrides it (FakeTensor,
    /// FunctionalTensor, DTensor, jagged NestedTensor, other wrapper subclasses) does not hold
    /// its data in its own storage.
    tensor_dispatch: Py<PyAny>,
    /// `torch.strided`, compared by identity: one attribute read per tensor.
    pub(super) strided: Option<Py<PyAny>>,
    pub(super) dtypes: Vec<(Py<PyAny>, DType)>,
    /// `torch._C._is_torch_function_mode_enabled`: under a torch function mode every tensor
    /// getter runs the mode's Python code, so only the full reader (which holds storages) is
    /// used.
    mode_enabled: Option<Py<PyAny>>,
    /// Direct calls of `torch.Tensor`'s getters, for per-token rows of small tensors.
    pub(super) fast: Option<FastReader>,
}

static REGISTRY: OnceLock<Registry> = OnceLock::new();

/// Called once by `py_wire` with `torch.Tensor`, `[(torch.float32, "float32"), ...]`,
/// `torch.strided` and `torch._C._is_torch_function_mode_enabled`.
#[pyfunction]
#[pyo3(signature = (tensor_type, dtypes, strided=None, mode_enabled=None))]
pub fn register_torch(
    tensor_type: Bound<'_, PyAny>,
    dtypes: Vec<(Bound<'_, PyAny>, String)>,
    strided: Option<Bound<'_, PyAny>>,
    mode_enabled: Option<Bound<'_, PyAny>>,
) -> PyResult<()> {
    let mut table = Vec::with_capacity(dtypes.len());
    for (obj, name) in dtypes {
        let dt = DType::from_name(&name).map_err(super::errors::to_py)?;
        table.push((obj.unbind(), dt));
    }
    let tensor_dispatch = tensor_type
        .getattr(intern!(tensor_type.py(), "__torch_dispatch__"))?
        .unbind();
    // The fast reader needs both: identity checks against torch.strided, and a way to tell
    // that no torch function mode is active.
    let fast = match (&strided, &mode_enabled) {
        (Some(_), Some(_)) => FastReader::new(&tensor_type),
        _ => None,
    };
    let _ = REGISTRY.set(Registry {
        tensor_type: tensor_type.unbind(),
        tensor_dispatch,
        strided: strided.map(Bound::unbind),
        dtypes: table,
        mode_enabled: mode_enabled.map(Bound::unbind),
        fast,
    });
    Ok(())
}

pub(super) fn registry() -> PyResult<&'static Registry> {
    REGISTRY
        .get()
        .ok_or_else(|| BatchError::new_err("py_wire is not initialised (import py_wire first)"))
}

impl Registry {
    /// Whether a torch function mode is active (or it cannot be told): then tensor getters run
    /// Python code and nothing read from them may be trusted without holding storages.
    pub(super) fn torch_function_mode(&self, py: Python<'_>) -> bool {
        let Some(check) = &self.mode_enabled else {
            return true;
        };
        check
            .bind(py)
            .call0()
            .and_then(|v| v.is_truthy())
            .unwrap_or(true)
    }
}

fn dims(obj: &Bound<'_, PyAny>, what: &str, location: &dyn Fn() -> String) -> PyResult<Dims> {
    let tuple = obj.cast::<PyTuple>().map_err(|_| {
        BatchError::new_err(format!("{}: {what} is not a tuple of ints", location()))
    })?;
    let mut out = [0u64; MAX_RANK];
    if tuple.len() > MAX_RANK {
        return Err(BatchError::new_err(format!(
            "{}: {} dims; py_wire supports up to {MAX_RANK}",
            location(),
            tuple.len()
        )));
    }
    for (slot, item) in out.iter_mut().zip(tuple.iter()) {
        let v: i64 = item.extract().map_err(|_| {
            BatchError::new_err(format!(
                "{}: {what} {tuple} is not a tuple of ints (a nested tensor where a plain one \
                 is expected?)",
                location()
            ))
        })?;
        *slot = u64::try_from(v)
            .map_err(|_| BatchError::new_err(format!("{}: negative {what} {tuple}", location())))?;
    }
    Dims::new(&out[..tuple.len()]).map_err(super::errors::to_py)
}

/// A torch call that failed (a tensor state torch itself cannot answer for): a `BatchError`
/// naming the location, never torch's own `RuntimeError`.
fn torch_failed(
    obj: &Bound<'_, PyAny>,
    what: &str,
    err: PyErr,
    location: &dyn Fn() -> String,
) -> PyErr {
    let py = obj.py();
    let nested = obj
        .getattr(intern!(py, "is_nested"))
        .and_then(|v| v.is_truthy())
        .unwrap_or(false);
    let hint = if nested {
        "a nested tensor where a plain one is expected: pass its rows (t.unbind())"
    } else {
        "a tensor without host data of its own (functional, fake or lazy)? pass a plain CPU tensor"
    };
    BatchError::new_err(format!(
        "{}: cannot read the tensor's {what} ({}); {hint}",
        location(),
        err.value(py)
    ))
}

/// A view of a tensor or buffer-protocol array. `location` names the field/row/segment for
/// errors. The view's owner is pushed onto `keep`, which the view borrows.
pub fn tensor_ref<'a>(
    obj: &Bound<'_, PyAny>,
    keep: &'a Owners,
    location: &dyn Fn() -> String,
) -> PyResult<TensorRef<'a>> {
    let reg = registry()?;
    let tensor_type = reg.tensor_type.bind(obj.py());
    if obj.get_type().is(tensor_type) {
        torch_ref(obj, reg, keep, location)
    } else if obj.is_instance(tensor_type)? {
        // Subclasses: torch.nn.Parameter and the like are plain tensors; one that overrides
        // `__torch_dispatch__` keeps its data elsewhere (or nowhere).
        let dispatch = obj
            .get_type()
            .getattr(intern!(obj.py(), "__torch_dispatch__"))?;
        if !dispatch.is(reg.tensor_dispatch.bind(obj.py())) {
            return Err(BatchError::new_err(format!(
                "{}: {} is a tensor subclass with its own __torch_dispatch__ (fake, functional, \
                 distributed or nested); py_wire encodes plain CPU tensors: materialise it first \
                 (e.g. .full_tensor(), torch._from_functional_tensor, or pass a nested tensor's \
                 rows)",
                location(),
                obj.get_type().name()?
            )));
        }
        torch_ref(obj, reg, keep, location)
    } else {
        buffer_ref(obj, keep, location)
    }
}

/// A torch tensor, refused unless it is a plain strided CPU tensor with no lazy flag set.
///
/// Checked, in order: the dtype is one py_wire registered (quantized dtypes are not:
/// `.dequantize()`); `layout is torch.strided` (sparse COO/CSR/CSC/BSR/BSC, mkldnn and jagged
/// layouts are refused: `.to_dense()`); `is_cpu` (CUDA and meta tensors are refused);
/// `is_neg()` (the lazy negative bit, settable on any dtype: `.resolve_neg()`); `is_conj()`
/// for complex dtypes (the lazy conjugate bit: `.resolve_conj()`); shape and stride are plain
/// tuples of non-negative ints (nested tensors fail here); `untyped_storage()` exists (functional
/// and lazy tensors fail here) and the view lies inside it.
fn torch_ref<'py, 'a>(
    obj: &Bound<'py, PyAny>,
    reg: &Registry,
    keep: &'a Owners,
    location: &dyn Fn() -> String,
) -> PyResult<TensorRef<'a>> {
    let py = obj.py();
    let call = |name: &Bound<'py, PyString>, what: &str| {
        obj.call_method0(name)
            .map_err(|e| torch_failed(obj, what, e, location))
    };
    let dt_obj = obj.getattr(intern!(py, "dtype"))?;
    let dtype = match reg.dtypes.iter().find(|(o, _)| o.bind(py).is(&dt_obj)) {
        Some((_, d)) => *d,
        None => {
            let quantized = obj
                .getattr(intern!(py, "is_quantized"))
                .and_then(|v| v.is_truthy())
                .unwrap_or(false);
            let hint = if quantized {
                "; a quantized tensor: call .dequantize() first"
            } else {
                ""
            };
            return Err(BatchError::new_err(format!(
                "{}: dtype {dt_obj} is not supported{hint}",
                location()
            )));
        }
    };
    if let Some(strided) = &reg.strided {
        let layout = obj.getattr(intern!(py, "layout"))?;
        if !layout.is(strided.bind(py)) {
            return Err(BatchError::new_err(format!(
                "{}: tensor has layout {layout}; py_wire encodes strided (dense) tensors: call \
                 .to_dense() first (for a nested tensor, pass its rows)",
                location()
            )));
        }
    }
    if !obj.getattr(intern!(py, "is_cpu"))?.is_truthy()? {
        let device = obj.getattr(intern!(py, "device"))?;
        let hint = if device.getattr(intern!(py, "type"))?.eq("meta")? {
            "py_wire encodes host memory, and a meta tensor has no data"
        } else {
            "py_wire encodes host memory, move it with .cpu() first"
        };
        return Err(BatchError::new_err(format!(
            "{}: tensor is on {device}; {hint}",
            location()
        )));
    }
    if call(intern!(py, "is_neg"), "negative bit")?.is_truthy()? {
        return Err(BatchError::new_err(format!(
            "{}: tensor has a pending negation (torch's lazy negative bit, e.g. the imaginary \
             part of a conjugated complex tensor); call .resolve_neg() first",
            location()
        )));
    }
    if matches!(dtype, DType::C64 | DType::C128)
        && call(intern!(py, "is_conj"), "conjugate bit")?.is_truthy()?
    {
        return Err(BatchError::new_err(format!(
            "{}: tensor has a pending conjugation; call .resolve_conj() first",
            location()
        )));
    }
    let shape_obj = obj
        .getattr(intern!(py, "shape"))
        .map_err(|e| torch_failed(obj, "shape", e, location))?;
    let shape = dims(&shape_obj, "shape", location)?;
    let strides = dims(&call(intern!(py, "stride"), "strides")?, "stride", location)?;
    held_view(obj, dtype, &shape, &strides, keep, location)
}

/// The view of a torch tensor whose dtype, shape and strides have been read: its untyped
/// storage is held by `keep` (so dropping the tensor, `set_()` or a shrinking `resize_()` in
/// another thread cannot free the bytes), then its data pointer is read and checked to lie
/// inside that storage.
pub(super) fn held_view<'py, 'a>(
    obj: &Bound<'py, PyAny>,
    dtype: DType,
    shape: &[u64],
    strides: &[u64],
    keep: &'a Owners,
    location: &dyn Fn() -> String,
) -> PyResult<TensorRef<'a>> {
    let py = obj.py();
    let call = |name: &Bound<'py, PyString>, what: &str| {
        obj.call_method0(name)
            .map_err(|e| torch_failed(obj, what, e, location))
    };
    // The storage first, then the pointer: if another thread swaps the tensor's storage in
    // between, the pointer no longer lies inside the storage held, and the check below refuses.
    let storage = call(intern!(py, "untyped_storage"), "storage")?;
    let ptr: usize = call(intern!(py, "data_ptr"), "data pointer")?.extract()?;
    let (base, len) = keep.hold_storage(storage, |storage| {
        let measure = |name: &Bound<'py, PyString>| -> PyResult<usize> {
            storage
                .call_method0(name)
                .map_err(|e| torch_failed(obj, "storage", e, location))?
                .extract()
        };
        Ok((
            measure(intern!(py, "data_ptr"))?,
            measure(intern!(py, "nbytes"))?,
        ))
    })?;
    let extent = extent_bytes(shape, strides, dtype.size())
        .ok_or_else(|| BatchError::new_err(format!("{}: shape {shape:?} overflows", location())))?;
    if extent != 0 && crate::tensor::span_in_storage(ptr, extent, base, len).is_none() {
        return Err(BatchError::new_err(format!(
            "{}: the tensor's {extent} bytes at {ptr:#x} do not lie inside its storage \
             ({len} bytes at {base:#x}); was it resized or set_() while being encoded?",
            location()
        )));
    }
    // SAFETY: [ptr, ptr + extent) lies inside the allocation [base, base + len) of the storage
    // `keep` now holds (checked just above; `hold_storage` returned its bounds), or is empty.
    let bytes = unsafe { keep.storage_view(ptr, extent as usize) };
    TensorRef::strided(dtype, shape, strides, bytes)
        .map_err(|e| BatchError::new_err(format!("{}: {}", location(), e.message())))
}

/// The dtype a buffer-protocol format string describes (native or little-endian byte order).
fn format_dtype(format: &[u8], itemsize: usize) -> Option<DType> {
    let code = match format {
        [b'@' | b'=' | b'<', rest @ ..] => rest,
        [b'>' | b'!', ..] if itemsize > 1 && cfg!(target_endian = "little") => return None,
        [b'>' | b'!', rest @ ..] => rest,
        other => other,
    };
    let signed = |size: usize| match size {
        1 => Some(DType::I8),
        2 => Some(DType::I16),
        4 => Some(DType::I32),
        8 => Some(DType::I64),
        _ => None,
    };
    let unsigned = |size: usize| match size {
        1 => Some(DType::U8),
        2 => Some(DType::U16),
        4 => Some(DType::U32),
        8 => Some(DType::U64),
        _ => None,
    };
    let dtype = match code {
        b"?" => DType::Bool,
        b"b" | b"h" | b"i" | b"l" | b"q" | b"n" => signed(itemsize)?,
        b"B" | b"c" | b"H" | b"I" | b"L" | b"Q" | b"N" => unsigned(itemsize)?,
        b"e" => DType::F16,
        b"f" => DType::F32,
        b"d" => DType::F64,
        b"Zf" => DType::C64,
        b"Zd" => DType::C128,
        _ => return None,
    };
    (dtype.size() == itemsize).then_some(dtype)
}

/// A view of a buffer-protocol export: dtype from its format string, shape and strides from
/// the export itself. The export (not the object's say-so) is what is read, and it is held.
fn buffer_ref<'a>(
    obj: &Bound<'_, PyAny>,
    keep: &'a Owners,
    location: &dyn Fn() -> String,
) -> PyResult<TensorRef<'a>> {
    let py = obj.py();
    let bad = |what: String| BatchError::new_err(format!("{}: {what}", location()));
    let buffer = match PyUntypedBuffer::get(obj) {
        Ok(b) => b,
        Err(e) => {
            let kind = obj.get_type().name()?;
            return Err(
                if obj
                    .hasattr(intern!(py, "__array_interface__"))
                    .unwrap_or(false)
                {
                    bad(format!(
                        "{kind} has __array_interface__ but no buffer protocol; py_wire does \
                         not trust a raw pointer: pass a numpy array or a torch tensor"
                    ))
                } else if e.is_instance_of::<pyo3::exceptions::PyTypeError>(py) {
                    bad(format!(
                        "expected a torch.Tensor or numpy array, got {kind}"
                    ))
                } else {
                    bad(format!("cannot export {kind} as a buffer: {}", e.value(py)))
                },
            );
        }
    };
    if buffer
        .suboffsets()
        .is_some_and(|s| s.iter().any(|&o| o >= 0))
    {
        return Err(bad("indirect (PIL-style) buffers are not supported".into()));
    }
    let itemsize = buffer.item_size();
    let format = buffer.format().to_bytes();
    let dtype = format_dtype(format, itemsize).ok_or_else(|| {
        bad(format!(
            "array format {:?} ({itemsize}-byte items) is not supported",
            String::from_utf8_lossy(format)
        ))
    })?;
    if buffer.dimensions() > MAX_RANK {
        return Err(bad(format!(
            "{} dims; py_wire supports up to {MAX_RANK}",
            buffer.dimensions()
        )));
    }
    let shape: Vec<u64> = buffer.shape().iter().map(|&d| d as u64).collect();
    let mut strides = Vec::with_capacity(shape.len());
    for (&stride, &dim) in buffer.strides().iter().zip(&shape) {
        // A dim of size 0 or 1 never steps, so its stride does not matter.
        if dim <= 1 {
            strides.push(0);
        } else if stride < 0 || !(stride as usize).is_multiple_of(itemsize) {
            return Err(bad(format!(
                "array strides {:?} are negative or not whole elements; use np.ascontiguousarray",
                buffer.strides()
            )));
        } else {
            strides.push((stride as usize / itemsize) as u64);
        }
    }
    let shape = Dims::new(&shape).map_err(super::errors::to_py)?;
    let strides = Dims::new(&strides).map_err(super::errors::to_py)?;
    let extent = extent_bytes(&shape, &strides, itemsize)
        .ok_or_else(|| bad(format!("shape {shape:?} overflows")))?;
    // SAFETY: the exporter filled this buffer with these shape and strides (all non-negative,
    // checked above), so every element lies in [buf, buf + extent).
    let bytes = unsafe { keep.hold_buffer(buffer, extent as usize) };
    TensorRef::strided(dtype, &shape, &strides, bytes).map_err(|e| bad(e.message().to_string()))
}

/// Reads a 1-D integer tensor (offsets or lengths) into u64s.
pub fn index_values(
    obj: &Bound<'_, PyAny>,
    keep: &Owners,
    location: &dyn Fn() -> String,
) -> PyResult<Vec<u64>> {
    let t = tensor_ref(obj, keep, location)?;
    let values = t
        .to_i64_vec()
        .map_err(|e| BatchError::new_err(format!("{}: {}", location(), e.message())))?;
    non_negative(values, location)
}

/// The values as u64s; a negative entry is a `BatchError` naming it.
fn non_negative(values: Vec<i64>, location: &dyn Fn() -> String) -> PyResult<Vec<u64>> {
    values
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            u64::try_from(v).map_err(|_| {
                BatchError::new_err(format!("{}: entry {i} is negative ({v})", location()))
            })
        })
        .collect()
}

/// Rows of a packed or per-token field: each row is a tensor, `None` or a list of tensors.
pub fn rows<'a>(
    field: &str,
    list: &Bound<'_, PyAny>,
    keep: &'a Owners,
) -> PyResult<(Vec<TensorRef<'a>>, Vec<u64>)> {
    let list = list
        .cast::<PyList>()
        .map_err(|_| BatchError::new_err(format!("field {field:?}: expected a list of rows")))?;
    let mut segments = Vec::with_capacity(list.len());
    let mut offsets = Vec::with_capacity(list.len() + 1);
    offsets.push(0u64);
    for (row, item) in list.iter().enumerate() {
        if item.is_none() {
            // A row without segments.
        } else if item.is_instance_of::<PyList>() || item.is_instance_of::<PyTuple>() {
            for (seg, t) in item.try_iter()?.enumerate() {
                let t = t?;
                let loc = || format!("field {field:?}, row {row}, segment {seg}");
                if t.is_none() {
                    return Err(BatchError::new_err(format!(
                        "{}: None inside a row's segment list (use an empty list or None for \
                         the whole row)",
                        loc()
                    )));
                }
                segments.push(tensor_ref(&t, keep, &loc)?);
            }
        } else {
            let loc = || format!("field {field:?}, row {row}");
            segments.push(tensor_ref(&item, keep, &loc)?);
        }
        offsets.push(segments.len() as u64);
    }
    Ok((segments, offsets))
}

/// A list of non-negative ints, or a 1-D integer tensor, as u64s.
fn int_list(
    obj: &Bound<'_, PyAny>,
    keep: &Owners,
    location: &dyn Fn() -> String,
) -> PyResult<Vec<u64>> {
    if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        let values: Vec<i64> = obj
            .extract()
            .map_err(|_| BatchError::new_err(format!("{}: expected a list of ints", location())))?;
        non_negative(values, location)
    } else {
        index_values(obj, keep, location)
    }
}

/// Rows of a packed field in CSR form (a `PackedTensor`'s tables): row `r` references
/// `segments[row_segments[i]]` for `i` in `row_offsets[r]..row_offsets[r + 1]`; a `None`
/// segment contributes nothing. Each segment is read once; rows that share one reference the
/// same view, so the encoder stores it once. `expected_rows` is the value's `len()`.
pub fn shared_rows<'a>(
    field: &str,
    tensors: &Bound<'_, PyAny>,
    row_offsets: &Bound<'_, PyAny>,
    row_segments: &Bound<'_, PyAny>,
    expected_rows: u64,
    ids: Option<&Bound<'_, PyAny>>,
    keep: &'a Owners,
) -> PyResult<ResolvedRows<'a>> {
    let list = tensors.cast::<PyList>().map_err(|_| {
        BatchError::new_err(format!(
            "field {field:?}: a packed input's segments must be a list"
        ))
    })?;
    let mut physical = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        if t.is_none() {
            physical.push(None);
        } else {
            let loc = || format!("field {field:?}, segment {i}");
            physical.push(Some(tensor_ref(&t, keep, &loc)?));
        }
    }
    let offsets = int_list(row_offsets, keep, &|| {
        format!("field {field:?} row_offsets")
    })?;
    let indices = int_list(row_segments, keep, &|| {
        format!("field {field:?} row_segments")
    })?;
    let bad = |m: String| BatchError::new_err(format!("field {field:?}: {m}"));
    if offsets.first() != Some(&0) {
        return Err(bad(format!(
            "row_offsets must start at 0, found {:?}",
            offsets.first()
        )));
    }
    let rows_read = offsets.len() as u64 - 1;
    if rows_read != expected_rows {
        return Err(bad(format!(
            "the packed value's len() is {expected_rows} but its row_offsets describe \
             {rows_read} rows"
        )));
    }
    let physical_ids = segment_ids(field, ids, physical.len())?;
    let mut ref_ids = Vec::with_capacity(physical_ids.as_ref().map_or(0, |_| indices.len()));
    let mut segments = Vec::with_capacity(indices.len());
    let mut out_offsets = Vec::with_capacity(offsets.len());
    out_offsets.push(0u64);
    for (row, w) in offsets.windows(2).enumerate() {
        if w[0] > w[1] || w[1] > indices.len() as u64 {
            return Err(bad(format!(
                "row {row}: row_offsets [{}, {}] are decreasing or past the {} segment indices",
                w[0],
                w[1],
                indices.len()
            )));
        }
        for (seg, &p) in indices[w[0] as usize..w[1] as usize].iter().enumerate() {
            let slot = physical.get(p as usize).ok_or_else(|| {
                bad(format!(
                    "row {row}, segment {seg}: row_segments names segment {p} but \
                     there are {}",
                    physical.len()
                ))
            })?;
            if let Some(t) = slot {
                segments.push(t.clone());
                if let Some(ids) = &physical_ids {
                    ref_ids.push(ids[p as usize]);
                }
            }
        }
        out_offsets.push(segments.len() as u64);
    }
    let last = offsets.last().copied().unwrap_or(0);
    if last != indices.len() as u64 {
        return Err(bad(format!(
            "row_offsets end at {last} but there are {} segment indices",
            indices.len()
        )));
    }
    Ok((segments, out_offsets, physical_ids.map(|_| ref_ids)))
}

/// A packed value's segment ids as Python hands them: `None`, or `bytes` of 16 per segment
/// (`count` segments); all-zero ids mean no identity.
pub fn segment_ids(
    field: &str,
    ids: Option<&Bound<'_, PyAny>>,
    count: usize,
) -> PyResult<Option<Vec<SegId>>> {
    let Some(ids) = ids.filter(|i| !i.is_none()) else {
        return Ok(None);
    };
    let bytes = ids.cast::<PyBytes>().map_err(|_| {
        BatchError::new_err(format!(
            "field {field:?}: segment ids must be bytes ({ID_LEN} per segment), not {}",
            ids.get_type()
                .name()
                .map_or_else(|_| "?".to_string(), |n| n.to_string())
        ))
    })?;
    let bytes = bytes.as_bytes();
    if Some(bytes.len()) != count.checked_mul(ID_LEN) {
        return Err(BatchError::new_err(format!(
            "field {field:?}: {} bytes of segment ids for {count} segments (expected {ID_LEN} \
             per segment)",
            bytes.len()
        )));
    }
    Ok(Some(
        bytes
            .chunks_exact(ID_LEN)
            .map(|c| {
                let mut id = NO_ID;
                id.copy_from_slice(c);
                id
            })
            .collect(),
    ))
}
