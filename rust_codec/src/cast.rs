//! TEMPORARY stub until the cast kernels land.
use crate::dtype::DType;
use crate::error::{Error, Result};
pub fn is_supported(from: DType, to: DType) -> bool {
    from == to
}
pub fn is_lossy(_from: DType, _to: DType) -> bool {
    false
}
pub fn cast_run(from: DType, to: DType, src: &[u8], dst: &mut [u8]) -> Result<()> {
    if from != to || src.len() != dst.len() {
        return Err(Error::Schema("unsupported cast".into()));
    }
    dst.copy_from_slice(src);
    Ok(())
}
