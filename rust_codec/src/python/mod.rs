//! The PyO3 layer: convert Python objects to views, call the core with the GIL released, map
//! errors. Nothing here decides meaning. One file per job, each thin; this file only declares
//! the `_native` module and what it exports.

mod batch;
mod codec;
mod constants;
mod contracts;
mod copies;
mod digests;
mod encode;
mod errors;
mod extract;
mod frame;
mod layout;
mod ops;
mod owners;
mod padding;
mod registry;
mod rows;
mod schema;
mod schema_data;
mod staged;
mod tensor_getters;
mod transport;
mod windows;

use pyo3::prelude::*;

#[pymodule]
mod _native {
    use pyo3::prelude::*;

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        super::errors::init_classes(m.py())?;
        super::constants::add(m)?;
        m.add("__version__", env!("CARGO_PKG_VERSION"))
    }

    #[pymodule_export]
    use super::codec::Codec;
    #[pymodule_export]
    use super::contracts::{check_frame_contracts, placeholder_runs};
    #[pymodule_export]
    use super::copies::{pack_into, streaming_threshold};
    #[pymodule_export]
    use super::digests::content_digest;
    #[pymodule_export]
    use super::encode::{encode, encode_parts};
    #[pymodule_export]
    use super::errors::{BatchError, ContractError, FrameError, SchemaError, WireError};
    #[pymodule_export]
    use super::errors::{InternalError, RowIndexError};
    #[pymodule_export]
    use super::extract::register_torch;
    #[pymodule_export]
    use super::frame::{BorrowedBytes, Frame, ReceiveBuffer};
    #[pymodule_export]
    use super::layout::{PyFieldLayout, PyFrameLayout, PyTensorLoc};
    #[pymodule_export]
    use super::ops::{gather, split_rows};
    #[pymodule_export]
    use super::padding::{fill_padding_with_first_token, pad_fields, pad_micro_batches, pad_rows};
    #[pymodule_export]
    use super::registry::{
        charge_schema_view, held_schema, hold_schema, holds_schema, learnt_schemas, pin_schema,
        released_schema_views, set_learnt_schema_budget, unpin_schema,
    };
    #[pymodule_export]
    use super::schema::{
        canonical_json, check_schema_text, reserved_metadata_key, resolve_contract, resolve_field,
        resolve_schema, schema_stages, validate_field_spec,
    };
    #[pymodule_export]
    use super::schema_data::{check_schema_source, schema_data};
    #[pymodule_export]
    use super::transport::{
        encoded_nbytes, frame_nbytes, frame_validation_ranges, interleaved_shard_ranges,
        micro_batch_rows, pack_rows,
    };
    #[pymodule_export]
    use super::windows::mask_windows;
}
