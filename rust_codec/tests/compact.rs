//! Compact frames (`frame::compact`): the schema named by fingerprint, the field table derived
//! from the schema the reader holds.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests panic on purpose

mod common;

use std::collections::BTreeMap;

use common::spec;
use py_wire_codec::error::Code;
use py_wire_codec::frame::compact::{hold, HeldSchema};
use py_wire_codec::frame::header::parse_header;
use py_wire_codec::ops::{gather, Rows, Source};
use py_wire_codec::schema::spec::meta;
use py_wire_codec::{parse_frame, DType, EncodeRequest, Error, Tier};

fn fields() -> Vec<py_wire_codec::FieldSpec> {
    vec![
        spec("ids", Tier::PerToken, DType::I64, vec![]),
        spec("reward", Tier::Scalar, DType::F32, vec![]),
    ]
}

fn request(metadata: BTreeMap<String, String>) -> EncodeRequest<'static> {
    common::ids_and_reward(metadata, DType::F32)
}

fn fingerprint(byte: &str) -> String {
    format!("sha256:{}", byte.repeat(32))
}

#[test]
fn compact_frames_need_the_schema_and_match_the_embedded_form() {
    let fp = fingerprint("3d");
    let compact_meta = BTreeMap::from([(meta::SCHEMA_REF.to_string(), fp.clone())]);
    let embedded = py_wire_codec::encode(&request(BTreeMap::new()), Default::default()).unwrap();
    let compact = py_wire_codec::encode(&request(compact_meta), Default::default()).unwrap();
    // Before the schema is held, a reader refuses the frame, naming the fingerprint.
    match parse_frame(compact.as_slice()) {
        Err(Error::Frame(d)) => {
            assert_eq!(d.code.map(Code::as_str), Some("unknown_schema"));
            assert!(d.message.contains(&fp), "{}", d.message);
        }
        other => panic!("{:?}", other.map(|l| l.num_rows)),
    }
    let held = HeldSchema {
        fingerprint: fp.clone(),
        specs: fields(),
        sequence_field: Some("ids".into()),
    };
    assert!(hold(held, false).unwrap());
    let (e, c) = (embedded.as_slice(), compact.as_slice());
    let (he, hc) = (parse_header(e).unwrap(), parse_header(c).unwrap());
    assert_eq!(e[he.data_start..], c[hc.data_start..]);
    assert!(!hc.metadata.contains_key(meta::FIELDS));
    assert!(!hc.metadata.contains_key(meta::SEQUENCE_FIELD));
    let layout = parse_frame(c).unwrap();
    assert_eq!(layout.sequence_field.as_deref(), Some("ids"));
    assert_eq!(
        layout.fields.iter().map(|f| &f.spec).collect::<Vec<_>>(),
        parse_frame(e)
            .unwrap()
            .fields
            .iter()
            .map(|f| &f.spec)
            .collect::<Vec<_>>()
    );
    // Frame ops keep the form.
    let source = Source {
        bytes: c,
        layout: &layout,
    };
    let picked = gather(&[source], &Rows::List(vec![1, 0, 1])).unwrap();
    let out = py_wire_codec::encode(&picked, Default::default()).unwrap();
    let again = parse_frame(out.as_slice()).unwrap();
    assert_eq!(again.num_rows, 3);
    assert!(again.header.metadata.contains_key(meta::SCHEMA_REF));
}

#[test]
fn a_held_schema_that_disagrees_with_the_tensors_is_a_frame_error() {
    let fp = fingerprint("4e");
    let mut specs = fields();
    specs[1].dtype = DType::F64; // the held schema says float64, the tensor is float32
    hold(
        HeldSchema {
            fingerprint: fp.clone(),
            specs,
            sequence_field: Some("ids".into()),
        },
        false,
    )
    .unwrap();
    let real = fingerprint("5f");
    hold(
        HeldSchema {
            fingerprint: real.clone(),
            specs: fields(),
            sequence_field: Some("ids".into()),
        },
        false,
    )
    .unwrap();
    let meta_real = BTreeMap::from([(meta::SCHEMA_REF.to_string(), real.clone())]);
    let frame = py_wire_codec::encode(&request(meta_real), Default::default()).unwrap();
    let lying: Vec<u8> = String::from_utf8_lossy(frame.as_slice())
        .replace(&real, &fp)
        .into_bytes();
    assert_eq!(lying.len(), frame.as_slice().len());
    match parse_frame(&lying) {
        Err(Error::Frame(d)) => {
            assert!(
                d.message.contains(&fp) && d.message.contains("reward"),
                "{}",
                d.message
            )
        }
        other => panic!("{:?}", other.map(|l| l.num_rows)),
    }
    // A held schema without the tensor's field: the tensor belongs to no field.
    let fewer = fingerprint("6a");
    hold(
        HeldSchema {
            fingerprint: fewer.clone(),
            specs: fields()[..1].to_vec(),
            sequence_field: Some("ids".into()),
        },
        false,
    )
    .unwrap();
    let lying: Vec<u8> = String::from_utf8_lossy(frame.as_slice())
        .replace(&real, &fewer)
        .into_bytes();
    match parse_frame(&lying) {
        Err(Error::Frame(d)) => assert!(d.message.contains("belongs to no field"), "{}", d.message),
        other => panic!("{:?}", other.map(|l| l.num_rows)),
    }
}
