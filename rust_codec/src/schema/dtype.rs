//! Element types: their names (torch's), their safetensors codes and their sizes.

use crate::error::Result;
use crate::schema_err;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
/// An element type a field may hold or store; each has a torch name, a safetensors code and a size
/// (see `TABLE`).
pub enum DType {
    /// `torch.bool`, one byte per element.
    Bool,
    /// `torch.uint8`.
    U8,
    /// `torch.int8`.
    I8,
    /// `torch.int16`.
    I16,
    /// `torch.uint16`.
    U16,
    /// `torch.int32`.
    I32,
    /// `torch.uint32`.
    U32,
    /// `torch.int64`, also the dtype of every offset and index table in a frame.
    I64,
    /// `torch.uint64`.
    U64,
    /// `torch.float16` (IEEE half).
    F16,
    /// `torch.bfloat16`.
    BF16,
    /// `torch.float32`.
    F32,
    /// `torch.float64`.
    F64,
    /// `torch.float8_e4m3fn`: 4 exponent bits, 3 mantissa bits, no infinities.
    F8E4M3,
    /// `torch.float8_e5m2`: 5 exponent bits, 2 mantissa bits.
    F8E5M2,
    /// `torch.complex64`: two `float32`s.
    C64,
    /// `torch.complex128`: two `float64`s.
    C128,
}

/// (dtype, torch name, safetensors code, size in bytes)
const TABLE: &[(DType, &str, &str, usize)] = &[
    (DType::Bool, "bool", "BOOL", 1),
    (DType::U8, "uint8", "U8", 1),
    (DType::I8, "int8", "I8", 1),
    (DType::I16, "int16", "I16", 2),
    (DType::U16, "uint16", "U16", 2),
    (DType::I32, "int32", "I32", 4),
    (DType::U32, "uint32", "U32", 4),
    (DType::I64, "int64", "I64", 8),
    (DType::U64, "uint64", "U64", 8),
    (DType::F16, "float16", "F16", 2),
    (DType::BF16, "bfloat16", "BF16", 2),
    (DType::F32, "float32", "F32", 4),
    (DType::F64, "float64", "F64", 8),
    (DType::F8E4M3, "float8_e4m3fn", "F8_E4M3", 1),
    (DType::F8E5M2, "float8_e5m2", "F8_E5M2", 1),
    (DType::C64, "complex64", "C64", 8),
    (DType::C128, "complex128", "C128", 16),
];

impl DType {
    fn row(self) -> &'static (DType, &'static str, &'static str, usize) {
        TABLE
            .iter()
            .find(|r| r.0 == self)
            .expect("every DType has a row in TABLE")
    }

    /// torch's name for the dtype, as used in schema files (`"float32"`).
    pub fn name(self) -> &'static str {
        self.row().1
    }

    /// safetensors' dtype code (`"F32"`).
    pub fn safetensors_code(self) -> &'static str {
        self.row().2
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        self.row().3
    }

    /// The dtype torch calls `name` (`"float32"`), or a `SchemaError` naming it.
    pub fn from_name(name: &str) -> Result<DType> {
        TABLE
            .iter()
            .find(|r| r.1 == name)
            .map(|r| r.0)
            .ok_or_else(|| schema_err!("unknown dtype {name:?}"))
    }

    /// The dtype whose safetensors code is `code` (`"F32"`), if any.
    pub fn from_safetensors_code(code: &str) -> Option<DType> {
        TABLE.iter().find(|r| r.2 == code).map(|r| r.0)
    }

    /// Every dtype, in the table's order.
    pub fn all() -> impl Iterator<Item = DType> {
        TABLE.iter().map(|r| r.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_codes_round_trip() {
        for dt in DType::all() {
            assert_eq!(DType::from_name(dt.name()).unwrap(), dt);
            assert_eq!(
                DType::from_safetensors_code(dt.safetensors_code()),
                Some(dt)
            );
        }
        assert!(DType::from_name("float128").is_err());
    }
}
