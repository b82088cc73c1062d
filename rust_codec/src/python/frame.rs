//! `py_wire.Frame`: one frame's bytes (owned, or borrowed from a Python buffer), its validated
//! layout, the buffer protocol and zero-copy pickling.

use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex};

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use super::errors::{guarded, to_py, OnPanic};
use super::owners::HeldViews;
use crate::frame::compact::HeldRef;
use crate::frame::header::parse_header;
use crate::frame::layout::{parse_frame, parse_frame_known, FrameLayout};
use crate::frame_err;
use crate::memory::buffer::AlignedBuf;
use crate::memory::remap::PrivateMapping;

/// Views of a base this aligned need no copy: every element type's natural alignment.
const MIN_BASE_ALIGNMENT: usize = 16;

enum Storage {
    Owned(AlignedBuf),
    /// A private copy-on-write mapping of a pinned source's file pages. Untouched private
    /// pages still show the file, so the source frame is held: its owner keeps the bytes
    /// unchanged while held (see [`PinnedOwner`]).
    Remapped {
        mapping: PrivateMapping,
        source: Py<Frame>,
    },
    Borrowed {
        /// Keeps the exporter's memory alive and pinned.
        _buffer: PyBuffer<u8>,
        ptr: usize,
        len: usize,
        readonly: bool,
        pinned: Option<PinnedOwner>,
    },
}

/// An exporter that promises its bytes neither change nor go away while a buffer export of
/// them is held: only then may a decode map the pages privately instead of copying them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PinnedOwner {
    /// A Ray object-store buffer (`ray._raylet.Buffer` / `SubBuffer`): sealed objects are
    /// immutable, and the store neither evicts nor reuses an object while a reader holds it.
    RayObjectStore,
}

impl PinnedOwner {
    /// The owner of `data`'s bytes when it is one that pins them (a memoryview is looked
    /// through to the object it exports), else `None`.
    fn of(data: &Bound<'_, PyAny>) -> Option<PinnedOwner> {
        let exporter = if data.is_instance_of::<pyo3::types::PyMemoryView>() {
            data.getattr("obj").ok()?
        } else {
            data.clone()
        };
        let ty = exporter.get_type();
        let module = ty.module().ok()?;
        let name = ty.name().ok()?;
        let is_ray = module.to_str().ok()? == "ray._raylet"
            && matches!(name.to_str().ok()?, "Buffer" | "SubBuffer");
        is_ray.then_some(PinnedOwner::RayObjectStore)
    }

    fn describe(self) -> &'static str {
        match self {
            PinnedOwner::RayObjectStore => "Ray's object store",
        }
    }
}

/// An encoded batch: a valid safetensors file in one buffer.
#[pyclass(module = "py_wire", name = "Frame", frozen)]
pub struct Frame {
    storage: Storage,
    layout: FrameLayout,
    schema_view: Mutex<Option<Py<PyAny>>>,
}

/// `out`'s buffer export, refused (a `BatchError`) unless it is writable and C-contiguous:
/// what `encode(out=)` and `pack_into` write into.
pub(super) fn writable_buffer(out: &Bound<'_, PyAny>) -> PyResult<PyBuffer<u8>> {
    let bad = |m: String| super::errors::BatchError::new_err(m);
    let buffer: PyBuffer<u8> =
        PyBuffer::get(out).map_err(|e| bad(format!("out is not a writable byte buffer: {e}")))?;
    if buffer.readonly() || !buffer.is_c_contiguous() {
        return Err(bad("out must be a writable, C-contiguous buffer".into()));
    }
    Ok(buffer)
}

impl Frame {
    pub fn from_owned(buf: AlignedBuf, layout: FrameLayout) -> Frame {
        Frame {
            storage: Storage::Owned(buf),
            layout,
            schema_view: Mutex::new(None),
        }
    }

    pub fn bytes(&self) -> &[u8] {
        match &self.storage {
            Storage::Owned(b) => b.as_slice(),
            Storage::Remapped { mapping, .. } => mapping.as_slice(),
            // SAFETY: the PyBuffer held in `_buffer` keeps [ptr, ptr+len) alive and unmoved for
            // as long as this Frame exists.
            Storage::Borrowed { ptr, len, .. } => unsafe {
                std::slice::from_raw_parts(*ptr as *const u8, *len)
            },
        }
    }

    /// Writes a frame of `len` bytes into the caller's writable buffer `out` (without the GIL)
    /// and wraps it; the frame borrows `out` from then on. `check` gets the destination's
    /// address and length before any of it is touched, and must refuse every source of `fill`
    /// that overlaps it.
    pub fn write_into_buffer(
        py: Python<'_>,
        out: &Bound<'_, PyAny>,
        len: usize,
        check: impl FnOnce(usize, usize) -> PyResult<()>,
        fill: impl Send + FnOnce(&mut [u8]) -> crate::Result<FrameLayout>,
    ) -> PyResult<Frame> {
        let bad = |m: String| super::errors::BatchError::new_err(m);
        let buffer = writable_buffer(out)?;
        let ptr = buffer.buf_ptr() as usize;
        if buffer.len_bytes() < len {
            return Err(bad(format!(
                "out holds {} bytes but this frame needs {len}",
                buffer.len_bytes()
            )));
        }
        if !ptr.is_multiple_of(MIN_BASE_ALIGNMENT) {
            return Err(bad(format!(
                "out starts at an address that is not {MIN_BASE_ALIGNMENT}-byte aligned"
            )));
        }
        check(ptr, len)?;
        // SAFETY: `buffer` is a writable, C-contiguous export of at least `len` bytes that
        // stays pinned while `buffer` lives: for this call, then inside the returned Frame.
        // `check` has refused every source `fill` reads that overlaps these bytes, so this is
        // the only reference to them while `fill` runs.
        let dst = unsafe { std::slice::from_raw_parts_mut(ptr as *mut u8, len) };
        let layout = py.detach(|| fill(dst)).map_err(to_py)?;
        Ok(Frame {
            storage: Storage::Borrowed {
                _buffer: buffer,
                ptr,
                len,
                readonly: false,
                pinned: None,
            },
            layout,
            schema_view: Mutex::new(None),
        })
    }

    fn readonly(&self) -> bool {
        matches!(self.storage, Storage::Borrowed { readonly: true, .. })
    }

    pub fn layout(&self) -> &FrameLayout {
        &self.layout
    }
}

#[pymethods]
impl Frame {
    /// Wraps any C-contiguous buffer (bytes, bytearray, memoryview, mmap, numpy uint8 array)
    /// without copying, after validating it. A base not aligned to 16 bytes is copied once
    /// into an aligned buffer. The frame is read by its own length (from its header): bytes
    /// after its end (a reused shared-memory segment) are ignored and not part of the Frame.
    /// `Frame.from_buffer` (which also holds a `schema=` first) calls this.
    #[staticmethod]
    fn _wrap(py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<Frame> {
        let buffer: PyBuffer<u8> = PyBuffer::get(data).map_err(|e| {
            super::errors::FrameError::new_err(format!(
                "cannot read a frame from {}: {e}",
                data.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?;
        if !buffer.is_c_contiguous() {
            return Err(super::errors::FrameError::new_err(
                "frame buffer must be C-contiguous",
            ));
        }
        let ptr = buffer.buf_ptr() as usize;
        let len = buffer.len_bytes();
        let readonly = buffer.readonly();
        let pinned = PinnedOwner::of(data);
        let bytes: &[u8] = if len == 0 {
            &[]
        } else {
            // SAFETY: the buffer is C-contiguous, `len` bytes long, and `buffer` pins it for
            // the rest of this call; afterwards it moves into the Frame (which moves the
            // handle, not the memory) and pins it for the Frame's lifetime.
            unsafe { std::slice::from_raw_parts(ptr as *const u8, len) }
        };
        if !ptr.is_multiple_of(MIN_BASE_ALIGNMENT) && len > 0 {
            // Copy the frame only, not bytes after it; `copied` validates the copy in full.
            let frame_len = py
                .detach(|| guarded(OnPanic::Frame, || parse_header(bytes)))
                .map_err(|e| to_py(e.context("frame")))?
                .frame_len;
            return copied(py, bytes.get(..frame_len).unwrap_or(bytes), None);
        }
        let layout = py
            .detach(|| guarded(OnPanic::Frame, || parse_frame(bytes)))
            .map_err(|e| to_py(e.context("frame")))?;
        // A frame inside a larger buffer is its own prefix: bytes after it are not exported.
        let len = layout.header.frame_len.min(len);
        Ok(Frame {
            storage: Storage::Borrowed {
                _buffer: buffer,
                ptr,
                len,
                readonly,
                pinned,
            },
            layout,
            schema_view: Mutex::new(None),
        })
    }

    /// A private copy: the frame's bytes copied once, without the GIL, into a writable,
    /// 64-byte-aligned buffer of its own (from the frame pool when one fits), validated again.
    /// Writing to views of the copy never reaches this frame's source.
    /// A compact frame's copy is read under the schema this frame was read under, and keeps
    /// its `Schema` view: a frame its user holds decodes whatever the registry let go since.
    fn copy(&self, py: Python<'_>) -> PyResult<Frame> {
        let copy = copied(py, self.bytes(), self.layout.held.as_ref())?;
        *copy.schema_view.lock().map_err(|_| poisoned())? = self._schema_view(py)?;
        Ok(copy)
    }

    /// This frame's bytes without a copy and safe to write, for a read-only source whose
    /// owner pins its bytes (Ray's object store): a private copy-on-write mapping of the same
    /// file pages, validated again, that holds this frame (so the owner keeps the object pinned
    /// and unchanged while any view lives); a write gets a private page and never reaches the
    /// source. `None` for every other source (`bytes`, a read-only `mmap` or numpy view of
    /// shared memory, whose owner may rewrite or truncate it; anonymous memory; a writable
    /// frame) and where the pages cannot be mapped again: `copy()` is then the safe choice.
    fn copy_on_write(slf: &Bound<'_, Self>) -> PyResult<Option<Frame>> {
        let py = slf.py();
        let (ptr, len) = match &slf.get().storage {
            Storage::Borrowed {
                ptr,
                len,
                readonly: true,
                pinned: Some(_),
                ..
            } => (*ptr, *len),
            _ => return Ok(None),
        };
        let Ok(mapping) = PrivateMapping::of(ptr, len) else {
            return Ok(None);
        };
        let known = slf.get().layout.held.as_ref();
        let layout = py
            .detach(|| {
                guarded(OnPanic::Frame, || {
                    parse_frame_known(mapping.as_slice(), known)
                })
            })
            .map_err(to_py)?;
        Ok(Some(Frame {
            storage: Storage::Remapped {
                mapping,
                source: slf.clone().unbind(),
            },
            layout,
            schema_view: Mutex::new(slf.get()._schema_view(py)?),
        }))
    }

    /// Why `copy_on_write()` gives `None` for this frame, or `None` when it gives a frame.
    fn copy_on_write_refusal(&self) -> Option<String> {
        match &self.storage {
            Storage::Borrowed {
                ptr,
                len,
                readonly: true,
                pinned: Some(_),
                ..
            } => PrivateMapping::of(*ptr, *len).err().map(|r| r.to_string()),
            Storage::Borrowed { readonly: true, .. } => Some(
                "the source's owner does not keep its bytes unchanged while py_wire holds it \
                 (only Ray's object store does): its pages may be rewritten or truncated"
                    .into(),
            ),
            Storage::Remapped { .. } => Some("already a copy-on-write mapping".into()),
            _ => Some("the frame's memory is writable".into()),
        }
    }

    /// How this frame holds its bytes: `"owned"` (py_wire's buffer), `"buffer"` (a writable
    /// buffer it borrows), `"readonly-buffer"` (a read-only one), `"pinned-buffer"` (a
    /// read-only one whose owner keeps it unchanged while held: Ray's object store) or
    /// `"copy-on-write"` (a private mapping of a pinned buffer's pages).
    #[getter]
    fn storage(&self) -> &'static str {
        match &self.storage {
            Storage::Owned(_) => "owned",
            Storage::Remapped { .. } => "copy-on-write",
            Storage::Borrowed {
                readonly: true,
                pinned: Some(_),
                ..
            } => "pinned-buffer",
            Storage::Borrowed { readonly: true, .. } => "readonly-buffer",
            Storage::Borrowed { .. } => "buffer",
        }
    }

    /// Who pins this frame's bytes (`"Ray's object store"`), or `None`. A copy-on-write frame
    /// names its source's owner.
    #[getter]
    fn pinned_by(&self) -> Option<&'static str> {
        match &self.storage {
            Storage::Borrowed { pinned, .. } => pinned.map(PinnedOwner::describe),
            Storage::Remapped { source, .. } => source.get().pinned_by(),
            Storage::Owned(_) => None,
        }
    }

    fn __len__(&self) -> usize {
        self.bytes().len()
    }

    #[getter]
    fn nbytes(&self) -> usize {
        self.bytes().len()
    }

    #[getter]
    fn num_rows(&self) -> u64 {
        self.layout.num_rows
    }

    #[getter]
    fn readonly_buffer(&self) -> bool {
        self.readonly()
    }

    /// `__metadata__` of the header, as a dict of strings.
    #[getter]
    fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in &self.layout.header.metadata {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    /// Wraps and validates `data` (see `_wrap`); `schema` (a `Schema`, bundled name or path) is
    /// held first, so that a compact frame naming it can be read, and a frame of another
    /// schema is read under it as `decode(frame, schema=)` reads one. What a reader's schema
    /// means (versions, contracts, warnings) is Python's: this calls `py_wire._decode`.
    #[staticmethod]
    #[pyo3(signature = (data, schema=None))]
    fn from_buffer(
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        schema: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        Ok(py
            .import("py_wire._decode")?
            .getattr("_frame_from_buffer")?
            .call1((data, schema))?
            .unbind())
    }

    /// The schema this frame was encoded with (`Schema.from_frame`), read on first access and
    /// kept with the frame. Its typed view is Python's (`py_wire._schema`), which this calls.
    #[getter]
    fn schema(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        if let Some(view) = slf.get()._schema_view(py)? {
            return Ok(view);
        }
        let view = py
            .import("py_wire._schema")?
            .getattr("Schema")?
            .call_method1("from_frame", (slf,))?
            .unbind();
        slf.get().set_schema_view(Some(view.clone_ref(py)))?;
        Ok(view)
    }

    /// Reads the frame under `view` from now on (`decode(frame, schema=)` sets the reader's).
    #[setter]
    fn set_schema(&self, view: Py<PyAny>) -> PyResult<()> {
        self.set_schema_view(Some(view))
    }

    /// The `Schema` view `Frame.schema` built of this frame's schema (None until it does),
    /// kept here. The codec never reads it.
    #[getter]
    fn _schema_view(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        Ok(self
            .schema_view
            .lock()
            .map_err(|_| poisoned())?
            .as_ref()
            .map(|s| s.clone_ref(py)))
    }

    #[setter(_schema_view)]
    fn set_schema_view(&self, view: Option<Py<PyAny>>) -> PyResult<()> {
        *self.schema_view.lock().map_err(|_| poisoned())? = view;
        Ok(())
    }

    /// The frame's schema as the reader validated it, in one call: `(fingerprint, text)` for
    /// an embedded frame (the text checked against the fingerprint, canonical, and the tensors
    /// against the field table derived from it: `schema::embedded`), `(fingerprint, None)`
    /// for a compact one
    /// (the fingerprint it names), `(None, None)` for a frame that names no schema.
    #[getter]
    fn schema_source(&self) -> (Option<&str>, Option<&str>) {
        use crate::schema::spec::meta;
        let md = &self.layout.header.metadata;
        match md.get(meta::SCHEMA_REF) {
            Some(reference) => (Some(reference.as_str()), None),
            None => (
                md.get(meta::FINGERPRINT).map(String::as_str),
                md.get(meta::SCHEMA).map(String::as_str),
            ),
        }
    }

    /// A compact frame's schema text as the registry held it when the frame was read (None
    /// for an embedded frame, or a schema held without its text): `Schema.from_frame` reads
    /// it when the registry has let the schema go since.
    #[getter]
    fn _held_text(&self) -> Option<&str> {
        self.layout.held.as_ref().and_then(|h| h.text.as_deref())
    }

    /// Whether the frame is compact: its header names its schema by fingerprint
    /// (`py_wire.schema_ref`) instead of embedding it (`encode(..., compact=True)`).
    #[getter]
    fn compact(&self) -> bool {
        self.layout
            .header
            .metadata
            .contains_key(crate::schema::spec::meta::SCHEMA_REF)
    }

    /// Whether the frame carries payload checksums (`encode(..., checksum=True)`).
    #[getter]
    fn has_checksum(&self) -> bool {
        crate::frame::checksum::present(&self.layout.header.metadata)
    }

    /// Checks every byte of the frame against its stored checksums (one xxh3-64 per field, one
    /// for the shared tables and padding, one for the header), without the GIL. Raises
    /// `FrameError` naming the field whose bytes changed, or when the frame carries no
    /// checksums. O(bytes): about a fifth of a memcpy of the frame.
    fn verify(&self, py: Python<'_>) -> PyResult<()> {
        let names: Vec<String> = self
            .layout
            .fields
            .iter()
            .map(|f| f.spec.name.clone())
            .collect();
        let (header, bytes) = (&self.layout.header, self.bytes());
        py.detach(|| {
            guarded(OnPanic::Frame, || {
                crate::frame::checksum::verify(header, &names, bytes)
            })
        })
        .map_err(to_py)
    }

    /// The validated layout: where each field's tensors lie, as typed objects (O(fields)).
    #[getter(layout)]
    fn py_layout(&self, py: Python<'_>) -> PyResult<super::layout::PyFrameLayout> {
        super::layout::frame_layout(py, &self.layout)
    }

    fn __repr__(&self) -> String {
        let names: Vec<&str> = self
            .layout
            .fields
            .iter()
            .map(|f| f.spec.name.as_str())
            .collect();
        format!(
            "Frame(num_rows={}, nbytes={}, fields=[{}])",
            self.layout.num_rows,
            self.bytes().len(),
            names.join(", ")
        )
    }

    /// Pickles zero-copy under protocol 5 (a `PickleBuffer` over the frame), by value below.
    fn __reduce_ex__<'py>(
        slf: &Bound<'py, Self>,
        protocol: u32,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        let rebuild = py.get_type::<Frame>().getattr("_wrap")?;
        let payload = if protocol >= 5 {
            py.import("pickle")?
                .getattr("PickleBuffer")?
                .call1((slf,))?
        } else {
            PyBytes::new(py, slf.get().bytes()).into_any()
        };
        Ok((rebuild, PyTuple::new(py, [payload])?))
    }

    /// # Safety
    /// Called by CPython with a valid `Py_buffer` to fill.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let this = slf.get();
        let (ptr, len) = match &this.storage {
            Storage::Owned(b) => (b.as_mut_ptr(), b.len()),
            Storage::Remapped { mapping, .. } => (mapping.as_mut_ptr(), mapping.len()),
            Storage::Borrowed { ptr, len, .. } => (*ptr as *mut u8, *len),
        };
        // SAFETY: the bytes belong to `slf` (owned, or pinned by the buffer export it holds),
        // which the export keeps alive; a frame never moves or frees its bytes while it lives.
        // A writable export is over owned memory or a writable source buffer.
        unsafe { export(slf.as_any(), view, ptr, len, this.readonly(), flags) }
    }

    /// # Safety
    /// Nothing to release: the frame owns its memory.
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}

/// Fills `view` with the `len` bytes at `ptr`, owned by `owner`.
///
/// # Safety
/// `view` must be CPython's buffer to fill, and `[ptr, ptr + len)` must stay valid and unmoved
/// for as long as `owner` lives (PyBuffer_FillInfo stores a new reference to `owner` in the
/// view); when `readonly` is false, the memory must be writable by the export's holders.
unsafe fn export(
    owner: &Bound<'_, PyAny>,
    view: *mut ffi::Py_buffer,
    ptr: *mut u8,
    len: usize,
    readonly: bool,
    flags: c_int,
) -> PyResult<()> {
    let len =
        isize::try_from(len).map_err(|_| PyBufferError::new_err("buffer too large to export"))?;
    // SAFETY: guaranteed by the caller, as documented above.
    let rc = unsafe {
        ffi::PyBuffer_FillInfo(
            view,
            owner.as_ptr(),
            ptr.cast::<c_void>(),
            len,
            c_int::from(readonly),
            flags,
        )
    };
    if rc == -1 {
        return Err(PyErr::fetch(owner.py()));
    }
    Ok(())
}

/// `bytes` copied once, without the GIL, into a writable, 64-byte-aligned buffer of its own
/// (from the frame pool when one fits) and validated there: a writable source may change after
/// it was wrapped, so the copy is what is checked.
fn copied(py: Python<'_>, bytes: &[u8], known: Option<&HeldRef>) -> PyResult<Frame> {
    let (owned, layout) = py
        .detach(|| {
            guarded(OnPanic::Frame, || {
                let owned = AlignedBuf::from_slice(bytes).ok_or_else(|| {
                    frame_err!("cannot allocate {} bytes for a copy", bytes.len())
                })?;
                let layout = parse_frame_known(owned.as_slice(), known)?;
                Ok((owned, layout))
            })
        })
        .map_err(|e| to_py(e.context("frame")))?;
    Ok(Frame::from_owned(owned, layout))
}

fn poisoned() -> PyErr {
    PyBufferError::new_err("frame schema lock poisoned")
}

/// A read-only buffer over a caller's tensor memory, one part of `encode_parts`. It holds
/// what owns the bytes of every input of the batch (torch storages, buffer exports) until the
/// last part is dropped, so freeing or `set_()`-ing an input leaves the part valid.
#[pyclass(module = "py_wire", frozen)]
pub struct BorrowedBytes {
    /// The batch's borrowed views and their owners, shared by all its parts.
    held: Arc<HeldViews>,
    /// Which of `held`'s views this part is.
    index: usize,
}

impl BorrowedBytes {
    pub fn new(held: Arc<HeldViews>, index: usize) -> Self {
        BorrowedBytes { held, index }
    }
}

#[pymethods]
impl BorrowedBytes {
    fn __len__(&self) -> usize {
        self.held.view(self.index).len()
    }

    /// # Safety
    /// Called by CPython with a valid `Py_buffer` to fill.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let this = slf.get();
        let bytes = this.held.view(this.index);
        // SAFETY: `bytes` is borrowed from `held`, which owns the storage or buffer export its
        // allocation belongs to; the export holds a reference to `slf` (so to `held`), and is
        // read-only, so nothing writes through the pointer.
        unsafe {
            export(
                slf.as_any(),
                view,
                bytes.as_ptr() as *mut u8,
                bytes.len(),
                true,
                flags,
            )
        }
    }

    /// # Safety
    /// Nothing to release.
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}

/// A writable, 64-byte-aligned buffer of `nbytes` taken from the frame pool (a dropped frame's
/// warm pages when one fits), for a receiver to fill (`torch.frombuffer(buf, dtype=torch.uint8)`)
/// and then wrap, validated and without a copy, with `Frame.from_buffer(buf)`. The memory goes
/// back to the pool when the buffer, every Frame over it and every view are dropped. Contents
/// before the fill are unspecified (zeros, or a dropped frame's bytes).
#[pyclass(module = "py_wire", frozen)]
pub struct ReceiveBuffer {
    buf: AlignedBuf,
}

impl ReceiveBuffer {
    /// A buffer the codec filled itself (a padded decode's output).
    pub(crate) fn from_buf(buf: AlignedBuf) -> ReceiveBuffer {
        ReceiveBuffer { buf }
    }
}

#[pymethods]
impl ReceiveBuffer {
    #[new]
    fn new(py: Python<'_>, nbytes: &Bound<'_, PyAny>) -> PyResult<ReceiveBuffer> {
        let wire_error = |m: String| super::errors::WireError::new_err(m);
        // Checked here rather than by PyO3's conversion, whose OverflowError names nothing.
        if nbytes.is_instance_of::<pyo3::types::PyBool>()
            || !nbytes.is_instance_of::<pyo3::types::PyInt>()
        {
            let kind = nbytes.get_type().name()?;
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "nbytes must be an int, not {kind}"
            )));
        }
        let len = nbytes
            .extract::<u64>()
            .ok()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n <= isize::MAX as usize)
            .ok_or_else(|| {
                wire_error(format!(
                    "a receive buffer needs 0 <= nbytes <= {}, not {nbytes}",
                    isize::MAX
                ))
            })?;
        let buf = py.detach(|| AlignedBuf::recycled(len)).ok_or_else(|| {
            wire_error(format!(
                "nbytes = {len}: cannot allocate a receive buffer that large"
            ))
        })?;
        Ok(ReceiveBuffer { buf })
    }

    fn __len__(&self) -> usize {
        self.buf.len()
    }

    /// The address of the first byte (64-byte aligned).
    #[getter]
    fn address(&self) -> usize {
        self.buf.as_ptr() as usize
    }

    /// # Safety
    /// Called by CPython with a valid `Py_buffer` to fill.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let buf = &slf.get().buf;
        // SAFETY: `buf` is owned by `slf`, which the export keeps alive, and never moves or
        // frees its memory while it lives; Rust never reads or writes these bytes through the
        // buffer itself, so writers through the export alias no Rust reference.
        unsafe {
            export(
                slf.as_any(),
                view,
                buf.as_mut_ptr(),
                buf.len(),
                false,
                flags,
            )
        }
    }

    /// # Safety
    /// Nothing to release: the buffer owns its memory.
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}
