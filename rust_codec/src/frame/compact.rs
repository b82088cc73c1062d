//! Compact frames: a header that names its schema by fingerprint (`py_wire.schema_ref`) instead
//! of embedding it, for readers that already hold the schema (a data plane, a replay buffer, a
//! stream of frames after the first).
//!
//! A compact header carries `py_wire.format`, `py_wire.num_rows` and `py_wire.schema_ref`
//! (plus a producer's own entries and `py_wire.checksum`), nothing else: no schema JSON, no
//! field table, no sequence field. The reader derives the field table from the schema it holds
//! as it does from an embedded schema
//! ([`schema_field_table`](crate::frame::layout::schema_field_table): the schema's fields that
//! have a values tensor in the frame, in data-section order) and the sequence field from the same
//! schema; every other check of the layout is the embedded form's, so tensors that are not the
//! held schema's (a lying fingerprint) are a `FrameError`.
//!
//! What a process holds lives in a process-wide registry, filled by the Python layer
//! (`load_schema` and every schema an API call is handed, and schemas learnt from embedded
//! frames, those up to a cap).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock, RwLock};

use crate::error::{Code, Detail, Error, Result};
use crate::schema::spec::{meta, FieldSpec};
use crate::{frame_err, internal_err, schema_err};

/// The most schemas learnt from frames (not loaded by the process itself) the registry keeps:
/// hostile embedded frames, each with a schema of its own, cannot grow it without bound.
pub const MAX_LEARNT: usize = 4096;

/// A schema as a reader of compact frames needs it: its fingerprint, field specs (schema order)
/// and sequence field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldSchema {
    /// `sha256:` + the hex digest of the schema's canonical JSON, as `py_wire.fingerprint`.
    pub fingerprint: String,
    /// The schema's field specs, in schema order.
    pub specs: Vec<FieldSpec>,
    /// The field whose rows define the per-token lengths, when the schema has one.
    pub sequence_field: Option<String>,
}

struct Registry {
    by_fingerprint: HashMap<String, Arc<HeldSchema>>,
    /// The schema's JSON as it was held (every key; fields in declared order), for readers
    /// that build their own view of it (Python's `Schema`).
    texts: HashMap<String, Arc<str>>,
    learnt: usize,
}

fn registry() -> &'static RwLock<Registry> {
    static REGISTRY: OnceLock<RwLock<Registry>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        RwLock::new(Registry {
            by_fingerprint: HashMap::new(),
            texts: HashMap::new(),
            learnt: 0,
        })
    })
}

/// Whether `s` is a fingerprint as py_wire writes one: `sha256:` and 64 lowercase hex digits.
pub fn is_fingerprint(s: &str) -> bool {
    s.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// Holds `schema` for this process. `learnt` marks a schema read from a frame rather than
/// loaded by the process: those are kept up to [`MAX_LEARNT`], after which `false` is returned
/// and nothing is stored. The specs are validated (the codec's own rules).
pub fn hold(schema: HeldSchema, learnt: bool) -> Result<bool> {
    if !is_fingerprint(&schema.fingerprint) {
        return Err(schema_err!(
            "{:?} is not a schema fingerprint (sha256: and 64 hex digits)",
            schema.fingerprint
        ));
    }
    for spec in &schema.specs {
        spec.validate()?;
    }
    let mut reg = registry()
        .write()
        .map_err(|_| internal_err!("schema registry lock poisoned"))?;
    if reg.by_fingerprint.contains_key(&schema.fingerprint) {
        return Ok(true);
    }
    if learnt {
        if reg.learnt >= MAX_LEARNT {
            return Ok(false);
        }
        reg.learnt += 1;
    }
    reg.by_fingerprint
        .insert(schema.fingerprint.clone(), Arc::new(schema));
    Ok(true)
}

/// Holds the schema whose JSON is `text` (a schema's full or canonical form, as
/// [`model::resolve`](crate::schema::model::resolve) reads it), keeping the text for
/// [`held_text`]. Returns whether it is held (see [`hold`]) and its fingerprint. A schema the
/// model refuses is a `SchemaError`.
pub fn hold_text(text: &str, learnt: bool) -> Result<(bool, String)> {
    crate::schema::text::check_nesting(text)?;
    let resolved = crate::schema::model::resolve(&crate::schema::text::parse(text)?)?;
    let fingerprint = resolved.fingerprint.clone();
    let held = hold(
        HeldSchema {
            fingerprint: fingerprint.clone(),
            specs: resolved.specs,
            sequence_field: resolved.sequence_field,
        },
        learnt,
    )?;
    if held {
        let mut reg = registry()
            .write()
            .map_err(|_| internal_err!("schema registry lock poisoned"))?;
        reg.texts
            .entry(fingerprint.clone())
            .or_insert_with(|| Arc::from(resolved.full.as_str()));
    }
    Ok((held, fingerprint))
}

/// The JSON of the schema held under `fingerprint` by [`hold_text`].
pub fn held_text(fingerprint: &str) -> Option<Arc<str>> {
    registry()
        .read()
        .ok()
        .and_then(|r| r.texts.get(fingerprint).cloned())
}

/// The schema this process holds under `fingerprint`.
pub fn held(fingerprint: &str) -> Option<Arc<HeldSchema>> {
    registry()
        .read()
        .ok()
        .and_then(|r| r.by_fingerprint.get(fingerprint).cloned())
}

/// The compact form's reference, if `metadata` is a compact header's: the fingerprint checked
/// for form, and the header checked for keys only the embedded form carries.
pub fn schema_ref(metadata: &BTreeMap<String, String>) -> Result<Option<&str>> {
    let Some(reference) = metadata.get(meta::SCHEMA_REF) else {
        return Ok(None);
    };
    if !is_fingerprint(reference) {
        let shown: String = reference.chars().take(80).collect();
        return Err(frame_err!(
            "{:?} = {shown:?} is not a schema fingerprint (sha256: and 64 hex digits)",
            meta::SCHEMA_REF
        ));
    }
    for key in [
        meta::SCHEMA,
        meta::FINGERPRINT,
        meta::FIELDS,
        meta::SEQUENCE_FIELD,
    ] {
        if metadata.contains_key(key) {
            return Err(frame_err!(
                "the header names its schema by {:?} (a compact frame) but also carries {key:?}, \
                 which a compact frame never carries (damaged header?)",
                meta::SCHEMA_REF
            ));
        }
    }
    Ok(Some(reference))
}

/// The held schema a compact frame names, or a `FrameError` naming the fingerprint.
pub fn resolve(fingerprint: &str) -> Result<Arc<HeldSchema>> {
    held(fingerprint).ok_or_else(|| {
        Error::Frame(Box::new(Detail {
            message: format!(
                "the frame is compact: it names its schema by fingerprint {fingerprint} only, \
                 and this process holds no schema with that fingerprint (load it with \
                 py_wire.load_schema, or pass schema= to decode / Frame.from_buffer)"
            ),
            code: Some(Code::UnknownSchema),
            found: Some(fingerprint.into()),
            ..Default::default()
        }))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints() {
        let good = format!("sha256:{}", "0a".repeat(32));
        assert!(is_fingerprint(&good));
        assert!(!is_fingerprint(&good.to_uppercase()));
        assert!(!is_fingerprint(&good[..good.len() - 1]));
        assert!(!is_fingerprint("sha256:"));
        assert!(!is_fingerprint(&format!("md5:{}", "0a".repeat(32))));
    }

    #[test]
    fn reference_checks() {
        let fp = format!("sha256:{}", "1b".repeat(32));
        let mut md = BTreeMap::new();
        assert_eq!(schema_ref(&md).unwrap(), None);
        md.insert(meta::SCHEMA_REF.to_string(), fp.clone());
        assert_eq!(schema_ref(&md).unwrap(), Some(fp.as_str()));
        md.insert(meta::FIELDS.to_string(), "[]".into());
        assert!(matches!(schema_ref(&md), Err(Error::Frame(_))));
        md.remove(meta::FIELDS);
        md.insert(meta::SCHEMA_REF.to_string(), "x".repeat(1000));
        let err = schema_ref(&md).unwrap_err();
        assert!(err.message().len() < 300, "{}", err.message());
    }

    #[test]
    fn registry_holds_and_caps_nothing_loaded() {
        let fp = format!("sha256:{}", "2c".repeat(32));
        assert!(resolve(&fp).is_err());
        let err = resolve(&fp).unwrap_err();
        assert!(err.message().contains(&fp));
        let schema = HeldSchema {
            fingerprint: fp.clone(),
            specs: vec![],
            sequence_field: None,
        };
        assert!(hold(schema.clone(), false).unwrap());
        assert_eq!(*resolve(&fp).unwrap(), schema);
        let bad = HeldSchema {
            fingerprint: "nope".into(),
            ..schema
        };
        assert!(hold(bad, false).is_err());
    }
}
