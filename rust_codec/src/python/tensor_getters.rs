//! `torch.Tensor`'s getters and C methods, found once on the type and called directly (no
//! attribute lookup, no bound method): the [`FastReader`] that `extract`'s registry holds and
//! `staged` reads rows with.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyTuple, PyType};

/// `tp_descr_get`: what `descr.__get__(obj, type)` calls.
type DescrGet = unsafe extern "C" fn(
    *mut ffi::PyObject,
    *mut ffi::PyObject,
    *mut ffi::PyObject,
) -> *mut ffi::PyObject;

/// A data descriptor of `torch.Tensor` (a getter such as `dtype`), called without a lookup.
pub(super) struct Getter {
    descr: Py<PyAny>,
    get: DescrGet,
}

/// `torch.Tensor`'s getters and methods that the fast reader calls, found once on the type
/// (through its MRO, as attribute lookup finds them).
pub struct FastReader {
    pub(super) dtype: Getter,
    pub(super) is_cpu: Getter,
    pub(super) nbytes: Getter,
    pub(super) shape: Getter,
    pub(super) is_neg: Method,
    pub(super) stride: Method,
    pub(super) data_ptr: Method,
    pub(super) untyped_storage: Method,
    /// `torch.UntypedStorage` and its C methods: a row's bytes must lie inside its storage,
    /// as the full reader checks (a storage shrunk with `resize_()` leaves the tensor's shape
    /// as it was, and copying that shape would read past the allocation).
    pub(super) storage_type: Py<PyAny>,
    pub(super) storage_data_ptr: Method,
    pub(super) storage_nbytes: Method,
    /// `()`, the arguments of a METH_VARARGS call without arguments.
    pub(super) no_args: Py<PyTuple>,
}

/// A method of `torch.Tensor` implemented in C: its function and calling convention, taken
/// from a bound method with `PyCFunction_GetFunction` (stable ABI), so that a call is the C
/// function itself, as the method descriptor would call it after checking `self`'s type.
/// `descr` is the unbound method, the fallback for any other calling convention.
pub(super) struct Method {
    func: usize,
    flags: std::ffi::c_int,
    descr: Py<PyAny>,
}

/// The attribute `name` as `torch.Tensor`'s MRO defines it (not bound to an instance).
fn type_attr<'py>(ty: &Bound<'py, PyAny>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    for class in ty.getattr("__mro__")?.try_iter()? {
        if let Ok(found) = class?.getattr("__dict__")?.get_item(name) {
            return Ok(found);
        }
    }
    Err(pyo3::exceptions::PyAttributeError::new_err(
        name.to_string(),
    ))
}

fn getter(ty: &Bound<'_, PyAny>, name: &str) -> PyResult<Getter> {
    let descr = type_attr(ty, name)?;
    // SAFETY: PyType_GetSlot reads a slot of a live type object (getset_descriptor and
    // property are static types, readable since Python 3.10); a null slot is checked below.
    let slot =
        unsafe { ffi::PyType_GetSlot(descr.get_type().as_ptr().cast(), ffi::Py_tp_descr_get) };
    if slot.is_null() {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "torch.Tensor.{name} is not a descriptor"
        )));
    }
    // SAFETY: a non-null Py_tp_descr_get slot holds a `descrgetfunc`, which is `DescrGet`.
    let get = unsafe { std::mem::transmute::<*mut std::ffi::c_void, DescrGet>(slot) };
    Ok(Getter {
        descr: descr.unbind(),
        get,
    })
}

fn method(ty: &Bound<'_, PyAny>, sample: &Bound<'_, PyAny>, name: &str) -> PyResult<Method> {
    let found = type_attr(ty, name)?;
    // Called as `method(tensor)`: only plain functions and C method descriptors bind that way.
    let kind = found.get_type().name()?;
    if kind != "method_descriptor" && kind != "function" {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "torch.Tensor.{name} is a {kind}"
        )));
    }
    let bound = sample.getattr(name)?;
    let (mut func, mut flags) = (0usize, 0);
    if bound.get_type().name()? == "builtin_function_or_method" {
        // SAFETY: `bound` is a live builtin method object (checked just above), which is what
        // PyCFunction_GetFunction and PyCFunction_GetFlags read.
        unsafe {
            func = ffi::PyCFunction_GetFunction(bound.as_ptr()).map_or(0, |f| f as usize);
            flags = ffi::PyCFunction_GetFlags(bound.as_ptr());
        }
    }
    Ok(Method {
        func,
        flags,
        descr: found.unbind(),
    })
}

impl FastReader {
    /// `None` when this torch lays its tensor type out differently: encode then uses the full
    /// reader for every row.
    pub fn new(tensor_type: &Bound<'_, PyAny>) -> Option<FastReader> {
        let t = tensor_type;
        let read = || -> PyResult<FastReader> {
            let sample = t.call0()?;
            let storage = sample.call_method0("untyped_storage")?;
            let storage_type = storage.get_type().into_any();
            Ok(FastReader {
                dtype: getter(t, "dtype")?,
                is_cpu: getter(t, "is_cpu")?,
                nbytes: getter(t, "nbytes")?,
                shape: getter(t, "shape")?,
                is_neg: method(t, &sample, "is_neg")?,
                stride: method(t, &sample, "stride")?,
                data_ptr: method(t, &sample, "data_ptr")?,
                untyped_storage: method(t, &sample, "untyped_storage")?,
                storage_data_ptr: method(&storage_type, &storage, "data_ptr")?,
                storage_nbytes: method(&storage_type, &storage, "nbytes")?,
                storage_type: storage_type.unbind(),
                no_args: PyTuple::empty(t.py()).unbind(),
            })
        };
        read().ok()
    }
}

/// `getter.__get__(obj, ty)`.
pub(super) fn get<'py>(
    getter: &Getter,
    obj: &Bound<'py, PyAny>,
    ty: &Bound<'py, PyType>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    // SAFETY: `get` is the tp_descr_get slot of the descriptor's type, called as the descriptor
    // protocol calls it (descriptor, instance, type), with live objects; it returns a new
    // reference, or NULL with an exception set, which from_owned_ptr_or_err turns into Err.
    unsafe {
        let out = (getter.get)(getter.descr.as_ptr(), obj.as_ptr(), ty.as_ptr());
        Bound::from_owned_ptr_or_err(py, out)
    }
}

/// `method(obj)`, `obj` being exactly of the type the method was read from (`torch.Tensor`
/// or `torch.UntypedStorage`).
pub(super) fn call<'py>(
    method: &Method,
    no_args: &Py<PyTuple>,
    obj: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    let (o, args) = (obj.as_ptr(), no_args.as_ptr());
    let flags = method.flags & !(ffi::METH_CLASS | ffi::METH_STATIC | ffi::METH_COEXIST);
    // SAFETY: `func` is the C function of this method of `torch.Tensor` and `flags` its
    // calling convention, both read from a bound method of a `torch.Tensor` instance; `obj`'s
    // type is exactly `torch.Tensor` (checked by the caller), which is the check the method
    // descriptor makes before calling the same function the same way. A zero `func` or another
    // convention falls back to calling the unbound method. Each branch returns a new
    // reference or NULL with an exception set.
    unsafe {
        let out = if method.func == 0 {
            ffi::PyObject_CallFunctionObjArgs(
                method.descr.as_ptr(),
                o,
                std::ptr::null_mut::<ffi::PyObject>(),
            )
        } else if flags == ffi::METH_NOARGS {
            let f: ffi::PyCFunction = std::mem::transmute(method.func);
            f(o, std::ptr::null_mut())
        } else if flags == ffi::METH_VARARGS {
            let f: ffi::PyCFunction = std::mem::transmute(method.func);
            f(o, args)
        } else if flags == ffi::METH_VARARGS | ffi::METH_KEYWORDS {
            let f: ffi::PyCFunctionWithKeywords = std::mem::transmute(method.func);
            f(o, args, std::ptr::null_mut())
        } else {
            ffi::PyObject_CallFunctionObjArgs(
                method.descr.as_ptr(),
                o,
                std::ptr::null_mut::<ffi::PyObject>(),
            )
        };
        Bound::from_owned_ptr_or_err(py, out)
    }
}
