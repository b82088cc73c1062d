//! `contract::check_contracts` on a parsed frame, with the contracts of every bundled schema
//! (JSON exactly as `Schema._contracts_json` hands it to the codec, copied from
//! py_wire/schemas/*.toml through pydantic's `model_dump_json`), plus one `count = "field"`
//! contract, a rule no bundled schema uses yet (Nemotron's ids, counting from `num_frames`).
//! Each set runs on every parsed input: the frame's own field table decides which apply.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use py_wire_codec::contract::{check_contracts, PlaceholderContract};
use py_wire_codec::parse_frame;

mod common;

const QWEN_IMAGE: &str = r#"{"kind":"placeholder","name":"image_placeholders","media_field":"pixel_values","token_id":151655,"begin_token_id":151652,"end_token_id":151653,"count":"grid_thw","grid_field":"image_grid_thw","merge_size":2,"tokens_per_image":null,"sizes_field":null,"count_field":null,"patch_size":16,"downsample_ratio":0.5}"#;
const QWEN_VIDEO: &str = r#"{"kind":"placeholder","name":"video_placeholders","media_field":"pixel_values_videos","token_id":151656,"begin_token_id":151652,"end_token_id":151653,"count":"grid_thw","grid_field":"video_grid_thw","merge_size":2,"tokens_per_image":null,"sizes_field":null,"count_field":null,"patch_size":16,"downsample_ratio":0.5}"#;
const GEMMA3: &str = r#"{"kind":"placeholder","name":"image_placeholders","media_field":"pixel_values","token_id":262144,"begin_token_id":255999,"end_token_id":256000,"count":"fixed","grid_field":null,"merge_size":2,"tokens_per_image":256,"sizes_field":null,"count_field":null,"patch_size":16,"downsample_ratio":0.5}"#;
const NEMOTRON: &str = r#"{"kind":"placeholder","name":"image_placeholders","media_field":"pixel_values","token_id":131072,"begin_token_id":131073,"end_token_id":131074,"count":"image_size","grid_field":null,"merge_size":2,"tokens_per_image":null,"sizes_field":"imgs_sizes","count_field":null,"patch_size":16,"downsample_ratio":0.5}"#;
const FIELD_RULE: &str = r#"{"kind":"placeholder","name":"frame_placeholders","media_field":"pixel_values","token_id":131072,"begin_token_id":131073,"end_token_id":131074,"count":"field","grid_field":null,"merge_size":2,"tokens_per_image":null,"sizes_field":null,"count_field":"num_frames","patch_size":16,"downsample_ratio":0.5}"#;

/// Per bundled schema, its contract list (qwen2_5_vl and qwen3_vl share one).
fn sets() -> &'static [Vec<PlaceholderContract>] {
    static SETS: OnceLock<Vec<Vec<PlaceholderContract>>> = OnceLock::new();
    SETS.get_or_init(|| {
        let parse =
            |s: &str| serde_json::from_str::<PlaceholderContract>(s).expect("contract JSON");
        vec![
            vec![parse(QWEN_IMAGE)],
            vec![parse(QWEN_IMAGE), parse(QWEN_VIDEO)],
            vec![parse(GEMMA3)],
            vec![parse(NEMOTRON)],
            vec![parse(FIELD_RULE)],
        ]
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(layout) = parse_frame(data) else {
        return;
    };
    for set in sets() {
        let _ = check_contracts(data, &layout, set);
    }
});
