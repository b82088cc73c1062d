//! Per-tensor checks against a field's spec: dtype and static dims, with the location (row,
//! segment) formatted only when a check fails.

use crate::batch_err;
use crate::error::{Code, Result, Value};
use crate::schema::spec::{pattern_string, FieldSpec};
use crate::tensor::TensorRef;

/// Where in a field a problem is, rendered only when there is one (formatting a location for
/// every row would cost more than checking it).
#[derive(Clone, Copy)]
pub(super) enum Where {
    Field,
    Row(usize),
    Segment(usize, usize),
}

impl Where {
    /// Adds this location (and the field) to an error's structured context.
    fn tag(self, err: crate::Error, field: &str) -> crate::Error {
        let err = err.field(field);
        match self {
            Where::Field => err,
            Where::Row(r) => err.row(r),
            Where::Segment(r, s) => err.row(r).segment(s),
        }
    }
}

impl std::fmt::Display for Where {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Where::Field => Ok(()),
            Where::Row(r) => write!(f, ", row {r}"),
            Where::Segment(r, s) => write!(f, ", row {r}, segment {s}"),
        }
    }
}

/// A field takes its declared dtype, or its wire dtype as is (already cast: nothing is lost).
pub(super) fn check_dtype(spec: &FieldSpec, t: &TensorRef<'_>, location: Where) -> Result<()> {
    if t.dtype != spec.dtype && Some(t.dtype) != spec.wire_dtype {
        let err = batch_err!(
            "field {:?}{location}: dtype {} but the schema declares {}{}",
            spec.name,
            t.dtype.name(),
            spec.dtype.name(),
            spec.wire_dtype
                .map(|w| format!(" (or its wire dtype {})", w.name()))
                .unwrap_or_default()
        )
        .code(Code::Dtype)
        .expected(spec.dtype.name())
        .found(t.dtype.name());
        return Err(location.tag(err, &spec.name));
    }
    Ok(())
}

/// Checks `dims` against the static dims of `pattern`.
pub(super) fn check_dims(
    spec: &FieldSpec,
    dims: &[u64],
    pattern: &[Option<u64>],
    location: Where,
    what: &str,
) -> Result<()> {
    let shape_values = || {
        let expected: Vec<Value> = pattern
            .iter()
            .map(|d| d.map_or_else(|| Value::from("*"), Value::from))
            .collect();
        (Value::from(expected), Value::from(dims.to_vec()))
    };
    if dims.len() != pattern.len() {
        let (expected, found) = shape_values();
        let err = batch_err!(
            "field {:?}{location}: {what} {dims:?} has rank {} but the schema's {} has rank {}",
            spec.name,
            dims.len(),
            pattern_string(pattern),
            pattern.len()
        );
        return Err(location.tag(
            err.code(Code::Rank).expected(expected).found(found),
            &spec.name,
        ));
    }
    for (d, (&found, expected)) in dims.iter().zip(pattern).enumerate() {
        if let Some(expected) = *expected {
            if found != expected {
                let (expected_shape, found_shape) = shape_values();
                let err = batch_err!(
                    "field {:?}{location}: {what} {dims:?} does not match the schema's {} (dim \
                     {d}: expected {expected}, found {found})",
                    spec.name,
                    pattern_string(pattern)
                );
                return Err(location.tag(
                    err.code(Code::Shape)
                        .expected(expected_shape)
                        .found(found_shape),
                    &spec.name,
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::schema::dtype::DType;
    use crate::schema::spec::Tier;

    fn pixels() -> FieldSpec {
        FieldSpec {
            name: "pixel_values".into(),
            tier: Tier::Packed,
            dtype: DType::F32,
            wire_dtype: Some(DType::BF16),
            shape: vec![None, Some(4)],
            pack_dim: 0,
        }
    }

    #[test]
    fn dtype_takes_the_declared_or_the_wire_dtype_only() {
        let bytes = [0u8; 64];
        let spec = pixels();
        for ok in [DType::F32, DType::BF16] {
            let t = TensorRef::contiguous(ok, &[2, 4], &bytes).unwrap();
            check_dtype(&spec, &t, Where::Segment(0, 0)).unwrap();
        }
        let t = TensorRef::contiguous(DType::F64, &[2, 4], &bytes).unwrap();
        let err = check_dtype(&spec, &t, Where::Segment(3, 1)).unwrap_err();
        let Error::Batch(d) = &err else {
            panic!("{err:?}")
        };
        assert_eq!(err.kind(), "dtype");
        assert_eq!((d.row, d.segment), (Some(3), Some(1)));
        assert_eq!(d.field.as_deref(), Some("pixel_values"));
        assert_eq!(
            (d.expected.clone(), d.found.clone()),
            (Some("float32".into()), Some("float64".into()))
        );
        assert!(d.message.contains("row 3, segment 1"), "{}", d.message);
    }

    #[test]
    fn dims_check_rank_and_static_dims() {
        let spec = pixels();
        check_dims(&spec, &[7, 4], &spec.shape, Where::Row(0), "shape").unwrap();
        let rank = check_dims(&spec, &[7], &spec.shape, Where::Row(2), "shape").unwrap_err();
        assert_eq!(rank.kind(), "rank");
        let dim = check_dims(&spec, &[7, 5], &spec.shape, Where::Row(2), "shape").unwrap_err();
        assert_eq!(dim.kind(), "shape");
        assert_eq!(dim.detail().expected, Some(serde_json::json!(["*", 4])));
        assert_eq!(dim.detail().found, Some(serde_json::json!([7, 5])));
        assert!(dim.message().contains("dim 1: expected 4, found 5"));
    }
}
