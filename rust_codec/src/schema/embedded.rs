//! A frame's embedded schema (`py_wire.schema`, `py_wire.fingerprint`): every check a reader
//! makes on it, and what it implies of the frame's field table.
//!
//! [`parse_frame`](crate::frame::layout::parse_frame) runs
//! [`embedded_facts`](crate::frame::compact::embedded_facts) (these checks, remembered within
//! the schema memory budget of `frame::compact`) on every embedded
//! frame, so a damaged schema is a `FrameError` from the codec whichever reader meets it (the
//! Python layer, the frame ops, the fuzz targets). The checks, in order (each cheap before the
//! next, so hostile text is refused before it is parsed):
//!
//! 1. size: at most [`MAX_SCHEMA_BYTES`] bytes;
//! 2. fingerprint: `"sha256:" + hex(sha256(text))`, lowercase hex, equals `py_wire.fingerprint`;
//! 3. nesting: arrays and objects nest at most
//!    [`MAX_NESTING`](crate::schema::text::MAX_NESTING) deep (counted outside strings);
//! 4. JSON, as CPython's `json.loads` reads it ([`parse`](crate::schema::text::parse));
//! 5. canonical form: the text is byte for byte what [`canonical`](crate::schema::text::canonical) writes of the value it holds;
//! 6. the schema model ([`model::resolve`]): types, defaults, every field and contract rule;
//!    and the text is the model's own canonical form (no key left to a default);
//! 7. the reader derives the frame's field table and sequence field from the resolved fields
//!    ([`schema_field_table`](crate::frame::layout::schema_field_table)).

use crate::error::Result;
use crate::frame_err;
use crate::schema::model;
use crate::schema::spec::FieldSpec;
use crate::schema::text::{check_canonical, check_nesting, fingerprint, MAX_SCHEMA_BYTES};

/// What the errors call the text.
const WHERE: &str = "the frame's schema";

/// The facts of a schema that a frame's layout must agree with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaFacts {
    /// Per field (in the schema text's order), the spec the codec's rules resolve it to.
    pub specs: Vec<FieldSpec>,
    /// The schema's sequence field, when it names one.
    pub sequence_field: Option<String>,
}

/// Checks one schema text against its fingerprint (size, digest, nesting, JSON, canonical
/// form, the schema model's types, defaults and rules, and that the text is the model as it is
/// written) and returns the facts it implies.
pub fn check_text(text: &str, fingerprint_entry: &str) -> Result<SchemaFacts> {
    if text.len() > MAX_SCHEMA_BYTES {
        return Err(frame_err!(
            "{WHERE} is {} bytes; a schema is at most {MAX_SCHEMA_BYTES}",
            text.len()
        )
        .expected(MAX_SCHEMA_BYTES)
        .found(text.len()));
    }
    let digest = fingerprint(text);
    if digest != fingerprint_entry {
        let shown: String = fingerprint_entry.chars().take(80).collect();
        return Err(frame_err!(
            "{WHERE} does not match its fingerprint {shown:?}: its digest is {digest} (damaged \
             header?)"
        )
        .expected(digest)
        .found(shown));
    }
    check_nesting(text)?;
    let value = check_canonical(text)?;
    let resolved =
        model::resolve(&value).map_err(|e| frame_err!("{WHERE} is invalid: {}", e.message()))?;
    if resolved.canonical != text {
        // Canonical JSON, but not the model as it is written: a key left to its default, or a
        // value written otherwise (an int where the model writes a float). Read back, such a
        // schema would have another fingerprint than the frame says.
        return Err(frame_err!(
            "{WHERE} is canonical JSON but not the schema model as py_wire writes it (a key left \
             out or a value py_wire would write otherwise); its fingerprint {fingerprint_entry:?}"
        ));
    }
    Ok(SchemaFacts {
        specs: resolved.specs,
        sequence_field: resolved.sequence_field,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::dtype::DType;
    use crate::schema::text::{canonical, parse};

    fn canon(text: &str) -> String {
        canonical(&parse(text).unwrap())
    }

    const SCHEMA: &str = r#"{"fields":{"ids":{"dtype":"int64","shape":[],"tier":"per_token"},"img":{"dtype":"float32","pack_dim":1,"shape":["*",3],"tier":"packed","wire_dtype":"bfloat16","lossy":true},"reward":{"dtype":"float32","shape":[],"tier":"scalar"}},"name":"t","sequence_field":"ids"}"#;

    /// The schema written whole, as py_wire writes it (every key, canonical form).
    fn canonical_schema() -> String {
        model::resolve(&parse(SCHEMA).unwrap()).unwrap().canonical
    }

    #[test]
    fn a_canonical_schema_passes_and_gives_its_facts() {
        let text = canonical_schema();
        let facts = check_text(&text, &fingerprint(&text)).unwrap();
        assert_eq!(facts.sequence_field.as_deref(), Some("ids"));
        let img = facts.specs.iter().find(|s| s.name == "img").unwrap();
        assert_eq!(img.shape, vec![None, Some(3)]);
        assert_eq!((img.pack_dim, img.wire_dtype), (1, Some(DType::BF16)));
    }

    fn refusal(text: &str) -> String {
        check_text(text, &fingerprint(text))
            .unwrap_err()
            .message()
            .to_string()
    }

    #[test]
    fn refusals_name_what_is_wrong() {
        let text = canonical_schema();
        // Size: one byte over the cap.
        let big = format!(
            "{{\"description\":\"{}\"}}",
            "a".repeat(MAX_SCHEMA_BYTES - 17)
        );
        assert_eq!(big.len(), MAX_SCHEMA_BYTES + 1);
        assert!(
            refusal(&big).contains("at most 1048576"),
            "{}",
            refusal(&big)
        );
        // Fingerprint: checked before anything is parsed.
        let err = check_text(&"[".repeat(100_000), &fingerprint("x")).unwrap_err();
        assert!(err.message().contains("does not match its fingerprint"));
        let err = check_text(&text, "sha256:00").unwrap_err();
        assert!(err.message().contains("\"sha256:00\""), "{}", err.message());
        assert!(err.message().contains(&fingerprint(&text)));
        // Nesting.
        let deep = format!("{}{}", "[".repeat(33), "]".repeat(33));
        assert!(refusal(&deep).contains("nested deeper than 32"));
        let ok_deep = format!("{}{}", "[".repeat(32), "]".repeat(32));
        assert!(
            !refusal(&ok_deep).contains("nested"),
            "{}",
            refusal(&ok_deep)
        );
        // Brackets inside strings do not count.
        assert!(check_nesting(&format!("\"{}\"", "[".repeat(100))).is_ok());
        assert!(refusal("[\"\\\"[[[").contains("not valid JSON"));
        // Not canonical: whitespace, key order, escaping, number forms, duplicate keys.
        assert!(refusal(&format!("{text}\n")).contains("not in canonical form"));
        for (from, to, why) in [
            (",", ", ", "whitespace"),
            ("{\"contracts\"", " {\"contracts\"", "leading space"),
            ("\"t\"", "\"\\u0074\"", "needless escape"),
            ("\"t\"", "\"\u{e9}\"", "raw non-ASCII"),
            ("\"t\"", "\"\\u00E9\"", "uppercase hex"),
            ("\"t\"", "\"\\/\"", "escaped slash"),
            ("\"pack_dim\":1", "\"pack_dim\":1.00", "float zeros"),
            ("\"pack_dim\":1", "\"pack_dim\":1e0", "exponent"),
            (
                "{\"contracts\":",
                "{\"name\":\"t\",\"contracts\":",
                "duplicate key",
            ),
        ] {
            let bad = text.replacen(from, to, 1);
            assert_ne!(bad, text, "{why}");
            let msg = refusal(&bad);
            assert!(msg.contains("not in canonical form"), "{why}: {msg}");
        }
        let swapped = text.replacen(
            "\"name\":\"t\",\"sequence_field\":\"ids\"",
            "\"sequence_field\":\"ids\",\"name\":\"t\"",
            1,
        );
        assert_ne!(swapped, text);
        let msg = refusal(&swapped);
        assert!(
            msg.contains("not in canonical form") && msg.contains("at byte"),
            "{msg}"
        );
        // Canonical JSON that the schema model refuses: each names the key's path.
        for (bad, want) in [
            ("[]", "schema: must be a table"),
            ("{}", "name: required, missing"),
            (r#"{"name":"t"}"#, "fields: required, missing"),
            (
                r#"{"fields":{"x":1},"name":"t"}"#,
                "fields.x: must be a table",
            ),
            (
                r#"{"fields":{"x":{"dtype":"int64"}},"name":"t"}"#,
                "fields.x.tier: required, missing",
            ),
            (
                r#"{"fields":{"x":{"dtype":"int9","tier":"scalar"}},"name":"t"}"#,
                "fields.x.dtype: must be a dtype",
            ),
            (
                r#"{"fields":{"a\n":{"dtype":"int64","tier":"scalar"}},"name":"t"}"#,
                "field name",
            ),
            (
                r#"{"fields":{"x":{"dtype":"int64","shape":["*"],"tier":"scalar"}},"name":"t"}"#,
                "ragged",
            ),
            (
                r#"{"fields":{"x":{"dtype":"float32","tier":"scalar","wire_dtype":"bfloat16"}},"name":"t"}"#,
                "lossy",
            ),
            (
                r#"{"fields":{"x":{"dtype":"int64","shape":[18446744073709551616],"tier":"scalar"}},"name":"t"}"#,
                "fields.x.shape.0: must be between 0 and 9223372036854775807",
            ),
            (
                r#"{"fields":{"x":{"dtype":"int64","tier":"scalar"}},"name":"t","sequence_field":1}"#,
                "sequence_field: must be a string",
            ),
            (
                r#"{"fields":{"x":{"dtype":"int64","tier":"scalar","typo":1}},"name":"t"}"#,
                "fields.x.typo: extra key",
            ),
        ] {
            let msg = refusal(bad);
            assert!(msg.contains(want), "{bad}: {msg}");
        }
        // Valid and canonical, but with keys left to their defaults: not the model as written.
        let short = canon(SCHEMA);
        assert!(refusal(&short).contains("not the schema model as py_wire writes it"));
    }
}
