//! The metadata a frame embeds, parsed as the codec parses it: the field table
//! (`py_wire.fields`, `Vec<FieldSpec>`, then `FieldSpec::validate` on each, as `parse_frame`
//! does), a placeholder contract (`PlaceholderContract`, as the `check_contracts` binding
//! parses each contract string) and the schema text (`schema::embedded`: its checks and the
//! schema model; `schema::text`: the canonical serializer, whose output must read back as
//! itself).
#![no_main]

use libfuzzer_sys::fuzz_target;
use py_wire_codec::contract::PlaceholderContract;
use py_wire_codec::schema::text;
use py_wire_codec::schema::spec::pattern_string;
use py_wire_codec::{FieldSpec, Tier};

fn exercise(spec: &FieldSpec) {
    if spec.validate().is_ok() {
        let _ = spec.stored_dtype().size();
        let _ = pattern_string(&spec.shape);
        if spec.tier == Tier::Packed {
            // Only meaningful (and only called by the codec) for validated packed fields.
            let _ = spec.values_are_stackable();
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(specs) = serde_json::from_str::<Vec<FieldSpec>>(text) {
        specs.iter().for_each(exercise);
    }
    if let Ok(spec) = serde_json::from_str::<FieldSpec>(text) {
        exercise(&spec);
    }
    let _ = serde_json::from_str::<PlaceholderContract>(text);
    // The schema text's checks, with a matching fingerprint (else they stop at the digest).
    let _ = py_wire_codec::schema::embedded::check_text(text, &text::fingerprint(text));
    if text::check_nesting(text).is_ok() {
        if let Ok(value) = text::parse(text) {
            let canonical = text::canonical(&value);
            // The canonical form is canonical: it reads back as itself.
            assert!(text::check_canonical(&canonical).is_ok(), "{canonical:?}");
        }
    }
});
