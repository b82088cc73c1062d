//! Python objects → borrowed tensor views. Duck-typed: torch tensors through `data_ptr()`,
//! `shape` and `stride()`, anything else through `__array_interface__` (numpy). Rust never
//! imports torch; the Python layer registers torch's dtype objects once.

use std::sync::OnceLock;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use super::errors::BatchError;
use crate::dtype::DType;
use crate::tensor::{contiguous_strides, extent_bytes, Dims, TensorRef, MAX_RANK};

struct Registry {
    tensor_type: Py<PyAny>,
    dtypes: Vec<(Py<PyAny>, DType)>,
}

static REGISTRY: OnceLock<Registry> = OnceLock::new();

/// Called once by `py_wire` with `torch.Tensor` and `[(torch.float32, "float32"), ...]`.
#[pyfunction]
pub fn register_torch(
    tensor_type: Bound<'_, PyAny>,
    dtypes: Vec<(Bound<'_, PyAny>, String)>,
) -> PyResult<()> {
    let mut table = Vec::with_capacity(dtypes.len());
    for (obj, name) in dtypes {
        let dt = DType::from_name(&name).map_err(super::errors::to_py)?;
        table.push((obj.unbind(), dt));
    }
    let _ = REGISTRY.set(Registry {
        tensor_type: tensor_type.unbind(),
        dtypes: table,
    });
    Ok(())
}

fn registry() -> PyResult<&'static Registry> {
    REGISTRY
        .get()
        .ok_or_else(|| BatchError::new_err("py_wire is not initialised (import py_wire first)"))
}

/// Python objects whose memory the extracted views borrow; held for as long as the views.
#[derive(Default)]
pub struct KeepAlive(pub Vec<Py<PyAny>>);

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
                "{}: {what} {tuple} is not a tuple of ints (a nested tensor where a plain one is expected?)",
                location()
            ))
        })?;
        *slot = u64::try_from(v)
            .map_err(|_| BatchError::new_err(format!("{}: negative {what} {tuple}", location())))?;
    }
    Dims::new(&out[..tuple.len()]).map_err(super::errors::to_py)
}

/// A view of a tensor or ndarray. `location` names the field/row/segment for errors.
pub fn tensor_ref(
    obj: &Bound<'_, PyAny>,
    keep: &mut KeepAlive,
    location: &dyn Fn() -> String,
) -> PyResult<TensorRef<'static>> {
    let py = obj.py();
    let reg = registry()?;
    let tensor_type = reg.tensor_type.bind(py);
    let is_tensor = obj.get_type().is(tensor_type) || obj.is_instance(tensor_type)?;
    let (dtype, shape, strides, ptr) = if is_tensor {
        let dt_obj = obj.getattr(intern!(py, "dtype"))?;
        let dtype = reg
            .dtypes
            .iter()
            .find(|(o, _)| o.bind(py).is(&dt_obj))
            .map(|(_, d)| *d)
            .ok_or_else(|| {
                BatchError::new_err(format!("{}: dtype {dt_obj} is not supported", location()))
            })?;
        if !obj.getattr(intern!(py, "is_cpu"))?.is_truthy()? {
            let device = obj.getattr(intern!(py, "device"))?;
            return Err(BatchError::new_err(format!(
                "{}: tensor is on {device}; py_wire encodes host memory, move it with .cpu() first",
                location()
            )));
        }
        if matches!(dtype, DType::C64 | DType::C128)
            && obj.call_method0(intern!(py, "is_conj"))?.is_truthy()?
        {
            return Err(BatchError::new_err(format!(
                "{}: tensor has a pending conjugation; call .resolve_conj() first",
                location()
            )));
        }
        let shape = dims(&obj.getattr(intern!(py, "shape"))?, "shape", location)?;
        let strides = dims(
            &obj.call_method0(intern!(py, "stride"))?,
            "stride",
            location,
        )?;
        let ptr: usize = obj.call_method0(intern!(py, "data_ptr"))?.extract()?;
        (dtype, shape, strides, ptr)
    } else if let Ok(iface) = obj.getattr(intern!(py, "__array_interface__")) {
        array_interface(&iface, location)?
    } else {
        return Err(BatchError::new_err(format!(
            "{}: expected a torch.Tensor or numpy array, got {}",
            location(),
            obj.get_type().name()?
        )));
    };
    let extent = extent_bytes(&shape, &strides, dtype.size())
        .ok_or_else(|| BatchError::new_err(format!("{}: shape {shape:?} overflows", location())))?;
    let bytes: &'static [u8] = if extent == 0 {
        &[]
    } else {
        // SAFETY: the tensor (or array) owns at least `extent` bytes from `ptr`, as its own
        // shape and strides say; `keep` holds a strong reference to it for as long as the
        // returned view is used, so the memory outlives the view.
        unsafe { std::slice::from_raw_parts(ptr as *const u8, extent as usize) }
    };
    keep.0.push(obj.clone().unbind());
    TensorRef::strided(dtype, &shape, &strides, bytes)
        .map_err(|e| BatchError::new_err(format!("{}: {}", location(), e.message())))
}

fn array_interface(
    iface: &Bound<'_, PyAny>,
    location: &dyn Fn() -> String,
) -> PyResult<(DType, Dims, Dims, usize)> {
    let bad = |what: &str| BatchError::new_err(format!("{}: {what}", location()));
    let d = iface
        .cast::<PyDict>()
        .map_err(|_| bad("__array_interface__ is not a dict"))?;
    let typestr: String = d
        .get_item("typestr")?
        .ok_or_else(|| bad("__array_interface__ has no typestr"))?
        .extract()?;
    let dtype = match typestr.as_str() {
        "|b1" => DType::Bool,
        "|u1" => DType::U8,
        "|i1" => DType::I8,
        "<i2" => DType::I16,
        "<u2" => DType::U16,
        "<i4" => DType::I32,
        "<u4" => DType::U32,
        "<i8" => DType::I64,
        "<u8" => DType::U64,
        "<f2" => DType::F16,
        "<f4" => DType::F32,
        "<f8" => DType::F64,
        "<c8" => DType::C64,
        "<c16" => DType::C128,
        other => return Err(bad(&format!("array dtype {other:?} is not supported"))),
    };
    let shape = dims(
        &d.get_item("shape")?.ok_or_else(|| bad("no shape"))?,
        "shape",
        location,
    )?;
    let es = dtype.size() as i64;
    let strides = match d.get_item("strides")? {
        Some(s) if !s.is_none() => {
            let raw: Vec<i64> = s.extract()?;
            raw.iter()
                .map(|&b| {
                    if b < 0 || b % es != 0 {
                        Err(bad(&format!(
                            "array strides {raw:?} are negative or not whole elements; use np.ascontiguousarray"
                        )))
                    } else {
                        Ok((b / es) as u64)
                    }
                })
                .collect::<PyResult<Vec<u64>>>()
                .and_then(|v| Dims::new(&v).map_err(super::errors::to_py))?
        }
        _ => Dims::new(&contiguous_strides(&shape)).map_err(super::errors::to_py)?,
    };
    let (ptr, _readonly): (usize, bool) = d
        .get_item("data")?
        .ok_or_else(|| bad("no data"))?
        .extract()
        .map_err(|_| bad("array data is not a (pointer, readonly) pair"))?;
    Ok((dtype, shape, strides, ptr))
}

/// Reads a 1-D integer tensor (offsets or lengths) into u64s.
pub fn index_values(
    obj: &Bound<'_, PyAny>,
    keep: &mut KeepAlive,
    location: &dyn Fn() -> String,
) -> PyResult<Vec<u64>> {
    let t = tensor_ref(obj, keep, location)?;
    let values = t
        .to_i64_vec()
        .map_err(|e| BatchError::new_err(format!("{}: {}", location(), e.message())))?;
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
pub fn rows(
    field: &str,
    list: &Bound<'_, PyAny>,
    keep: &mut KeepAlive,
) -> PyResult<(Vec<TensorRef<'static>>, Vec<u64>)> {
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
                        "{}: None inside a row's segment list (use an empty list or None for the whole row)",
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
