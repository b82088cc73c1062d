//! Which fields and contracts each stage of a schema needs, the rules owned here: a field
//! travels in the stages its `stages` name (every stage of the schema when it names none, or
//! gives an empty list); a stage is demanded the required fields it carries; a stage is held to
//! a contract only when it carries the contract's media field (generation gets its images
//! another way), and a stage that carries the field, even as optional, is held to it
//! (placeholder tokens without their media there would train image-blind). Python's typed view
//! reads the plan ([`StagePlan::to_json`]) and holds no rule of its own.

use crate::schema::text::{in_order, Json};

/// One field as the stage rules read it.
pub struct Declared<'a> {
    /// The field's name.
    pub name: &'a str,
    /// Its `stages` key: `None` is every stage of the schema.
    pub stages: Option<&'a [String]>,
    /// Its `required` key.
    pub required: bool,
}

/// What one stage needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    /// The stage's name.
    pub name: String,
    /// The fields it carries, in schema order.
    pub fields: Vec<String>,
    /// The required fields among them: what an encode for the stage demands.
    pub required: Vec<String>,
    /// The indices (in the schema's `contracts`) of the contracts it is held to.
    pub contracts: Vec<usize>,
}

/// Every stage's needs, and each field's stages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagePlan {
    /// Per stage of the schema, in its order.
    pub stages: Vec<Stage>,
    /// Per field, in schema order, the stages that carry it (its own order when it names them).
    pub field_stages: Vec<(String, Vec<String>)>,
    /// Every required field, in schema order: what an encode for no stage demands.
    pub required: Vec<String>,
}

/// The plan of a schema whose stages are `stages`, fields `fields` (in order) and contracts'
/// media fields `media_fields` (in order).
pub fn plan(stages: &[String], fields: &[Declared<'_>], media_fields: &[&str]) -> StagePlan {
    let field_stages: Vec<(String, Vec<String>)> = fields
        .iter()
        .map(|f| {
            // An empty list is every stage, as a missing one is (what the loader always did).
            let on = f.stages.filter(|s| !s.is_empty()).unwrap_or(stages);
            (f.name.to_string(), on.to_vec())
        })
        .collect();
    let stages = stages
        .iter()
        .map(|stage| {
            let carried: Vec<&Declared<'_>> = fields
                .iter()
                .zip(&field_stages)
                .filter(|(_, (_, on))| on.contains(stage))
                .map(|(f, _)| f)
                .collect();
            Stage {
                name: stage.clone(),
                fields: carried.iter().map(|f| f.name.to_string()).collect(),
                required: carried
                    .iter()
                    .filter(|f| f.required)
                    .map(|f| f.name.to_string())
                    .collect(),
                contracts: media_fields
                    .iter()
                    .enumerate()
                    .filter(|(_, media)| carried.iter().any(|f| f.name == **media))
                    .map(|(i, _)| i)
                    .collect(),
            }
        })
        .collect();
    StagePlan {
        stages,
        field_stages,
        required: fields
            .iter()
            .filter(|f| f.required)
            .map(|f| f.name.to_string())
            .collect(),
    }
}

impl StagePlan {
    /// The plan as JSON, keys in order: `{"stages": {stage: {"fields": [..], "required": [..],
    /// "contracts": [i, ..]}}, "field_stages": {field: [stage, ..]}, "required": [..]}`.
    pub fn to_json(&self) -> String {
        let text = |s: &str| Json::Str(s.chars().map(u32::from).collect());
        let names = |v: &[String]| Json::Array(v.iter().map(|s| text(s)).collect());
        let key = |s: &str| s.chars().map(u32::from).collect::<Vec<u32>>();
        let stages = self
            .stages
            .iter()
            .map(|s| {
                let contracts = s
                    .contracts
                    .iter()
                    .map(|i| Json::Int(i.to_string()))
                    .collect();
                let body = Json::Object(vec![
                    (key("fields"), names(&s.fields)),
                    (key("required"), names(&s.required)),
                    (key("contracts"), Json::Array(contracts)),
                ]);
                (key(&s.name), body)
            })
            .collect();
        let field_stages = self
            .field_stages
            .iter()
            .map(|(name, on)| (key(name), names(on)))
            .collect();
        in_order(&Json::Object(vec![
            (key("stages"), Json::Object(stages)),
            (key("field_stages"), Json::Object(field_stages)),
            (key("required"), names(&self.required)),
        ]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_stage_carries_its_fields_and_the_contracts_on_its_media() {
        let stages = strings(&["generation", "train"]);
        let train = strings(&["train"]);
        let fields = [
            Declared {
                name: "input_ids",
                stages: None,
                required: true,
            },
            Declared {
                name: "pixel_values",
                stages: Some(&train),
                required: false,
            },
        ];
        let plan = plan(&stages, &fields, &["pixel_values"]);
        assert_eq!(plan.stages[0].fields, strings(&["input_ids"]));
        assert!(plan.stages[0].contracts.is_empty());
        assert_eq!(
            plan.stages[1].fields,
            strings(&["input_ids", "pixel_values"])
        );
        assert_eq!(plan.stages[1].required, strings(&["input_ids"]));
        assert_eq!(plan.stages[1].contracts, vec![0]);
        assert_eq!(plan.field_stages[0].1, stages);
        assert_eq!(
            plan.to_json(),
            r#"{"stages":{"generation":{"fields":["input_ids"],"required":["input_ids"],"contracts":[]},"train":{"fields":["input_ids","pixel_values"],"required":["input_ids"],"contracts":[0]}},"field_stages":{"input_ids":["generation","train"],"pixel_values":["train"]},"required":["input_ids"]}"#
        );
    }
}
