//! What owns the bytes the extracted views borrow, with the lifetime in the types.
//!
//! [`Owners`] is an append-only arena: reading a tensor or buffer pushes what owns its memory
//! (a torch untyped storage, a buffer-protocol export, a staging `Vec`) and hands out a view
//! that borrows the arena (`&'a Owners` gives `&'a [u8]`), so the borrow checker proves no view
//! outlives its owner. Nothing is removed before the arena is dropped.
//!
//! A view never points into the arena itself: it points into memory an entry keeps alive (a
//! storage's or exporter's allocation, a `Vec`'s heap buffer), which stays where it is when the
//! arena or its entry vector moves. [`HeldViews`] relies on that: it is the one place where
//! views are kept, with `'static` standing for "as long as the owners", beside the arena they
//! borrow from, for Python objects (the parts `encode_parts` returns) that outlive the call.

use std::cell::{Cell, RefCell};

use pyo3::buffer::PyUntypedBuffer;
use pyo3::prelude::*;

/// One owner of the memory some views borrow.
enum Owner {
    /// A torch tensor's `untyped_storage()`: it keeps the allocation alive after the tensor is
    /// freed, `set_()` to other memory or shrunk by `resize_()`.
    Storage { _storage: Py<PyAny> },
    /// A buffer-protocol export (numpy and other exporters): it keeps the exporter alive, and
    /// numpy refuses to resize an array while an export is held.
    Buffer { _export: PyUntypedBuffer },
    /// Bytes copied out of small tensors while their metadata was read (see `staged`).
    Staged { _bytes: Vec<u8> },
}

/// The owners of the memory the extracted views borrow: every view made while reading a batch
/// borrows this arena, which lives for the whole of an encode (and, inside [`HeldViews`], for
/// as long as any part `encode_parts` returns).
#[derive(Default)]
pub struct Owners {
    entries: RefCell<Vec<Owner>>,
    /// The last torch storage held: its object's address, base address and byte length.
    /// Tensors split from one allocation share one storage object, which is then held and
    /// measured once.
    last_storage: Cell<Option<(usize, usize, usize)>>,
}

impl Owners {
    fn push(&self, owner: Owner) {
        // Never re-entered: nothing here calls out while the vector is borrowed.
        self.entries.borrow_mut().push(owner);
    }

    /// Keeps `bytes` for as long as the arena; returns them borrowed from it.
    pub fn stage(&self, bytes: Vec<u8>) -> &[u8] {
        let (ptr, len) = (bytes.as_ptr(), bytes.len());
        self.push(Owner::Staged { _bytes: bytes });
        // SAFETY: the Vec's heap buffer does not move when the Vec is moved into `entries` (or
        // `entries` reallocates), and entries are only dropped with the arena, which the
        // returned borrow of `self` outlives.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    }

    /// Holds a buffer-protocol export for as long as the arena; returns the first `len` bytes
    /// of its buffer borrowed from it.
    ///
    /// # Safety
    /// The export's buffer must hold at least `len` readable bytes (`len` may be 0).
    pub unsafe fn hold_buffer(&self, export: PyUntypedBuffer, len: usize) -> &[u8] {
        let ptr = export.buf_ptr() as *const u8;
        self.push(Owner::Buffer { _export: export });
        if len == 0 {
            return &[];
        }
        // SAFETY: the caller guarantees `len` readable bytes at `ptr`; the export, now in
        // `entries` until the arena is dropped, keeps the exporter (and numpy's array from
        // being resized) alive for as long as the returned borrow of `self`.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    }

    /// The base address and byte length of `storage` (a torch untyped storage), which the arena
    /// holds from now on. `measure` reads them for a storage not held last.
    pub fn hold_storage(
        &self,
        storage: Bound<'_, PyAny>,
        measure: impl FnOnce(&Bound<'_, PyAny>) -> PyResult<(usize, usize)>,
    ) -> PyResult<(usize, usize)> {
        let id = storage.as_ptr() as usize;
        if let Some((last, base, len)) = self.last_storage.get() {
            if last == id {
                return Ok((base, len));
            }
        }
        let (base, len) = measure(&storage)?;
        self.push(Owner::Storage {
            _storage: storage.unbind(),
        });
        self.last_storage.set(Some((id, base, len)));
        Ok((base, len))
    }

    /// `len` bytes at `ptr`, inside the allocation of a storage this arena holds, borrowed from
    /// the arena.
    ///
    /// # Safety
    /// `[ptr, ptr + len)` must lie inside the allocation `[base, base + nbytes)` that
    /// [`Owners::hold_storage`] returned for a storage held by `self` (`len` may be 0).
    pub unsafe fn storage_view(&self, ptr: usize, len: usize) -> &[u8] {
        if len == 0 {
            return &[];
        }
        // SAFETY: guaranteed by the caller; a storage held by the arena keeps its allocation
        // alive until the arena is dropped, whatever happens to the tensor; only growing the
        // storage itself (documented as forbidden in flight) reallocates it.
        unsafe { std::slice::from_raw_parts(ptr as *const u8, len) }
    }
}

/// Views kept together with the arena they borrow from, for Python objects that outlive the
/// call that made them (every part `encode_parts` returns holds this, shared).
pub struct HeldViews {
    /// Declared first, so dropped before `_owners`. `'static` stands for "as long as `_owners`";
    /// only [`HeldViews::view`] hands them out, borrowed from `self`.
    views: Vec<&'static [u8]>,
    /// Never touched again until dropped; `Vec<Owner>` rather than `Owners`, so that the
    /// struct is `Sync` (it is shared by frozen Python objects).
    _owners: Vec<Owner>,
}

impl HeldViews {
    /// Runs `make` with a fresh arena and keeps the views it returns together with the arena;
    /// `make`'s other result `T` borrows nothing from it.
    pub fn new<T>(
        make: impl for<'a> FnOnce(&'a Owners) -> PyResult<(Vec<&'a [u8]>, T)>,
    ) -> PyResult<(HeldViews, T)> {
        let owners = Owners::default();
        let (views, other) = make(&owners)?;
        let views = views
            .into_iter()
            .map(|view| {
                let view: *const [u8] = view;
                // SAFETY: `view` points into memory that an entry of `owners` keeps alive (a
                // held storage's or export's allocation, a staged Vec's heap buffer; see the
                // module doc), never into the `Owners` value itself, so moving `owners` into
                // the struct below (and its entries out of the RefCell) leaves it valid. The
                // struct never mutates its owners, drops `views` before them (field order),
                // and hands a view out only for as long as a borrow of itself (`view`), so no
                // view is used after its owner is dropped.
                unsafe { &*view }
            })
            .collect();
        let held = HeldViews {
            views,
            _owners: owners.entries.into_inner(),
        };
        Ok((held, other))
    }

    /// View `i`, borrowed from `self` (which holds its owner).
    pub fn view(&self, i: usize) -> &[u8] {
        self.views[i]
    }
}
