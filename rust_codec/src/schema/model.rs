//! The schema model: the one reader of a schema's content. Whoever hands in a schema (a schema
//! file through Python's loader, a frame's embedded text, a `Schema(...)` built in Python) gets
//! it read here: every key typed, every default filled, every rule applied, and the canonical
//! form written, from which the fingerprint is taken. Python's models are typed views of what
//! [`resolve`] returns, with no defaults or rules of their own.
//!
//! The keys, their types and defaults (a schema file may leave out any key that has one):
//!
//! | schema key | type | default |
//! |---|---|---|
//! | `name` | string | required |
//! | `version` | integer in `[0, 2^31)` | `1` |
//! | `description` | string | `""` |
//! | `sequence_field`, `lengths_field` | field name or null | null |
//! | `stages` | strings | [`DEFAULT_STAGES`] |
//! | `fields` | table of field name to field | required |
//! | `contracts` | list of contracts | `[]` |
//!
//! A field's keys are in [`FIELD_DEFAULTS`] (and `tier`, `dtype`, required), a contract's in
//! [`CONTRACT_DEFAULTS`] (and `name`, `media_field`, `token_id`, `count`, required). The
//! canonical form holds every key but a field's `encoding` and `gather` when null and its
//! `column` when `"text"` (keys added after schemas were fingerprinted: leaving their defaults
//! out kept those fingerprints).

use crate::contract::spec::{CountRule, PlaceholderContract};
use crate::error::{Error, Result};
use crate::schema::cast::widens_exactly;
use crate::schema::dtype::DType;
use crate::schema::spec::{FieldDecl, FieldSpec, Tier};
use crate::schema::stages::{Declared, StagePlan};
use crate::schema::text::{canonical, code_points_to_string, fingerprint, Json};
use crate::tier::rules::Items;
use crate::{internal_err, schema_err};

/// The stages a schema has when it names none.
pub const DEFAULT_STAGES: [&str; 4] = ["generation", "logprob", "ref_logprob", "train"];
/// The most items a declared list (a shape, stages, accepted dtypes, contracts) or table of
/// fields may hold.
pub const MAX_DECLARED_ITEMS: usize = 4096;
/// A field's keys with a default, and the default as JSON text.
pub const FIELD_DEFAULTS: [(&str, &str); 12] = [
    ("shape", "[]"),
    ("required", "true"),
    ("stages", "null"),
    ("pack_dim", "0"),
    ("pad_value", "0"),
    ("wire_dtype", "null"),
    ("lossy", "false"),
    ("accept", "[]"),
    ("encoding", "null"),
    ("gather", "null"),
    ("column", "\"text\""),
    ("description", "\"\""),
];
/// A contract's keys with a default, and the default as JSON text.
pub const CONTRACT_DEFAULTS: [(&str, &str); 10] = [
    ("kind", "\"placeholder\""),
    ("begin_token_id", "null"),
    ("end_token_id", "null"),
    ("grid_field", "null"),
    ("merge_size", "2"),
    ("tokens_per_image", "null"),
    ("sizes_field", "null"),
    ("count_field", "null"),
    ("patch_size", "16"),
    ("downsample_ratio", "0.5"),
];
/// A schema's keys with a default, and the default as JSON text.
pub const SCHEMA_DEFAULTS: [(&str, &str); 6] = [
    ("version", "1"),
    ("description", "\"\""),
    ("sequence_field", "null"),
    ("lengths_field", "null"),
    (
        "stages",
        "[\"generation\",\"logprob\",\"ref_logprob\",\"train\"]",
    ),
    ("contracts", "[]"),
];

const COUNT_RULES: [&str; 4] = ["grid_thw", "fixed", "image_size", "field"];

/// A schema read by [`resolve`].
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// The canonical form: what frames embed and the fingerprint is taken of.
    pub canonical: String,
    /// `"sha256:" + hex(sha256(canonical))`.
    pub fingerprint: String,
    /// Every key, defaults included, fields in their declared order: what Python's typed view
    /// is built from.
    pub full: String,
    /// Per field, in declared order, the spec a frame stores.
    pub specs: Vec<FieldSpec>,
    /// The sequence field, if the schema names one.
    pub sequence_field: Option<String>,
}

/// Reads a whole schema: see the module docs. Every failure is a `SchemaError` that names the
/// key's path (`fields.pixel_values.pad_value: ...`) and the value found.
pub fn resolve(value: &Json) -> Result<Resolved> {
    let schema = Schema::read(value)?;
    let canonical = canonical(&schema.to_json(false));
    Ok(Resolved {
        fingerprint: fingerprint(&canonical),
        canonical,
        full: ordered(&schema.to_json(true)),
        specs: schema.fields.iter().map(|(_, f)| f.spec.clone()).collect(),
        sequence_field: schema.sequence_field.clone(),
    })
}

/// Reads a whole schema as [`resolve`] does and returns which fields and contracts each of its
/// stages needs (the rules: [`stages`](crate::schema::stages)).
pub fn stage_plan(value: &Json) -> Result<StagePlan> {
    let schema = Schema::read(value)?;
    let fields: Vec<Declared<'_>> = schema
        .fields
        .iter()
        .map(|(name, f)| Declared {
            name,
            stages: f.stages.as_deref(),
            required: f.required,
        })
        .collect();
    let media: Vec<&str> = schema
        .contracts
        .iter()
        .map(|c| c.contract.media_field.as_str())
        .collect();
    Ok(crate::schema::stages::plan(&schema.stages, &fields, &media))
}

impl Schema {
    /// The schema `value` declares: keys typed, defaults filled, every rule applied.
    fn read(value: &Json) -> Result<Schema> {
        let obj = Obj::of(value, "")?;
        obj.only(&[
            "name",
            "version",
            "description",
            "sequence_field",
            "lengths_field",
            "stages",
            "fields",
            "contracts",
        ])?;
        let name = obj.req("name", string)?;
        let version = obj.opt("version", |v, at| int_in(v, at, 0, (1 << 31) - 1))?;
        let description = obj.opt("description", string)?;
        let sequence_field = obj.opt("sequence_field", |v, at| nullable(v, at, string))?;
        let lengths_field = obj.opt("lengths_field", |v, at| nullable(v, at, string))?;
        let stages = obj
            .opt("stages", |v, at| list(v, at, string))?
            .unwrap_or_else(|| DEFAULT_STAGES.iter().map(|s| s.to_string()).collect());
        let fields_value = obj.get("fields").ok_or_else(|| missing("fields"))?;
        let Json::Object(items) = fields_value else {
            return Err(at_err(
                "fields",
                format!("must be a table, not {}", kind(fields_value)),
            ));
        };
        if items.len() > MAX_DECLARED_ITEMS {
            return Err(at_err(
                "fields",
                format!("{} entries; at most {MAX_DECLARED_ITEMS}", items.len()),
            ));
        }
        let mut fields: Vec<(String, Field)> = Vec::with_capacity(items.len());
        for (key, decl) in last_values(items) {
            let field_name = code_points_to_string(key)
                .ok_or_else(|| at_err("fields", "a field name holds a lone surrogate".into()))?;
            let field = Field::read(decl, &format!("fields.{field_name}"), &field_name)?;
            fields.push((field_name, field));
        }
        let contracts = obj
            .opt("contracts", |v, at| list(v, at, Contract::read))?
            .unwrap_or_default();
        let schema = Schema {
            name,
            version: version.unwrap_or(1),
            description: description.unwrap_or_default(),
            sequence_field: sequence_field.flatten(),
            lengths_field: lengths_field.flatten(),
            stages,
            fields,
            contracts,
        };
        schema.check()?;
        Ok(schema)
    }
}

/// The schema a frame written by the codec alone embeds (an encode request with no schema of
/// its own: the crate's tests, a Rust producer): its fields as `specs` declare them, in order,
/// each required, `sequence_field` its sequence field, named `name`. Every frame carries a
/// schema, so readers read one form.
pub fn schema_of_specs(
    name: &str,
    specs: &[FieldSpec],
    sequence_field: Option<&str>,
) -> Result<Resolved> {
    let fields = specs
        .iter()
        .map(|spec| {
            let lossy = spec
                .wire_dtype
                .is_some_and(|w| crate::schema::cast::is_lossy(spec.dtype, w));
            let field = object(vec![
                ("tier", text(spec.tier.name())),
                ("dtype", text(spec.dtype.name())),
                (
                    "wire_dtype",
                    spec.wire_dtype.map_or(Json::Null, |w| text(w.name())),
                ),
                ("lossy", Json::Bool(lossy)),
                ("shape", shape_json(&spec.shape)),
                ("pack_dim", Json::Int(spec.pack_dim.to_string())),
            ]);
            (code_points(&spec.name), field)
        })
        .collect();
    resolve(&object(vec![
        ("name", text(name)),
        ("sequence_field", sequence_field.map_or(Json::Null, text)),
        ("fields", Json::Object(fields)),
    ]))
}

/// Reads one field (as `FieldDef(...)` in Python builds one, outside a schema): its keys
/// typed, defaults filled, its own rules applied. Returns its full JSON.
pub fn resolve_field(value: &Json) -> Result<String> {
    Ok(ordered(&Field::read(value, "", "field")?.to_json(true)))
}

/// Reads one contract (as `PlaceholderContract(...)` in Python builds one): keys typed,
/// defaults filled, its own parameter rules applied. Returns its full JSON.
pub fn resolve_contract(value: &Json) -> Result<String> {
    Ok(ordered(&Contract::read(value, "")?.json))
}

// -- the model ----------------------------------------------------------------------------------

struct Schema {
    name: String,
    version: i128,
    description: String,
    sequence_field: Option<String>,
    lengths_field: Option<String>,
    stages: Vec<String>,
    fields: Vec<(String, Field)>,
    contracts: Vec<Contract>,
}

struct Field {
    tier: Tier,
    dtype: DType,
    /// The declared shape, `None` for `"*"`.
    shape: Vec<Option<u64>>,
    required: bool,
    stages: Option<Vec<String>>,
    pad_value: Json,
    lossy: bool,
    accept: Vec<DType>,
    encoding: Option<String>,
    gather: Option<Vec<String>>,
    column: String,
    description: String,
    declared_wire_dtype: Option<DType>,
    /// What the codec's field rules settle it to (pack_dim resolved).
    spec: FieldSpec,
}

struct Contract {
    contract: PlaceholderContract,
    /// Every key, defaults included.
    json: Json,
}

impl Field {
    fn read(value: &Json, at: &str, name: &str) -> Result<Field> {
        let obj = Obj::of(value, at)?;
        let mut keys = vec!["tier", "dtype"];
        keys.extend(FIELD_DEFAULTS.iter().map(|(k, _)| *k));
        obj.only(&keys)?;
        let tiers = Tier::ALL.map(Tier::name);
        let tier = obj.req("tier", |v, at| one_of(v, at, &tiers))?;
        let tier = Tier::from_name(&tier).ok_or_else(|| internal_err!("tier {tier:?} unnamed"))?;
        let dtype = obj.req("dtype", dtype_named)?;
        let shape = obj
            .opt("shape", |v, at| list(v, at, dim))?
            .unwrap_or_default();
        let required = obj.opt("required", boolean)?.unwrap_or(true);
        let stages = obj.opt("stages", strings_or_null)?.flatten();
        let pack_dim = obj
            .opt("pack_dim", |v, at| {
                int_in(v, at, i64::MIN.into(), i64::MAX.into())
            })?
            .unwrap_or(0);
        let pad_value = obj.opt("pad_value", pad)?.unwrap_or(Json::Int("0".into()));
        let wire_dtype = obj
            .opt("wire_dtype", |v, at| nullable(v, at, dtype_named))?
            .flatten();
        let lossy = obj.opt("lossy", boolean)?.unwrap_or(false);
        let accept = obj
            .opt("accept", |v, at| list(v, at, dtype_named))?
            .unwrap_or_default();
        let encoding = obj
            .opt("encoding", |v, at| {
                nullable(v, at, |v, at| one_of(v, at, &["utf8", "json"]))
            })?
            .flatten();
        let gather = obj.opt("gather", strings_or_null)?.flatten();
        let column = obj
            .opt("column", |v, at| one_of(v, at, &["text", "media"]))?
            .unwrap_or_else(|| "text".into());
        let description = obj.opt("description", string)?.unwrap_or_default();
        // The codec's field rules (name, ranks, pack dim, casts): its error names the field.
        let spec = FieldDecl {
            name: name.to_string(),
            tier,
            dtype,
            wire_dtype,
            shape: shape.clone(),
            pack_dim: i64::try_from(pack_dim).unwrap_or_default(),
            lossy,
        }
        .resolve()
        .map_err(|e| at_err(at, e.message().to_string()))?;
        let field = Field {
            tier,
            dtype,
            shape,
            required,
            stages,
            pad_value,
            lossy,
            accept,
            encoding,
            gather,
            column,
            description,
            declared_wire_dtype: wire_dtype,
            spec,
        };
        field.check(at)?;
        Ok(field)
    }

    fn check(&self, at: &str) -> Result<()> {
        if let Some(encoding) = &self.encoding {
            if self.tier.items() != Items::Segments
                || self.dtype != DType::U8
                || self.shape != [None]
            {
                return Err(at_err(
                    at,
                    format!(
                        "encoding = \"{encoding}\" needs tier = \"packed\", dtype = \"uint8\" and \
                         shape = [\"*\"], not tier = \"{}\", dtype = \"{}\", shape = {}",
                        self.tier.name(),
                        self.dtype.name(),
                        crate::schema::spec::pattern_string(&self.shape)
                    ),
                ));
            }
        }
        if self.gather.is_some() && self.encoding.as_deref() != Some("json") {
            let found = self
                .encoding
                .as_deref()
                .map_or("None".to_string(), |e| format!("'{e}'"));
            return Err(at_err(
                at,
                format!(
                    "gather needs encoding = \"json\" (one JSON object per row), not encoding = \
                     {found}"
                ),
            ));
        }
        let stored = self.spec.stored_dtype();
        for dtype in [self.dtype, stored] {
            if let Some(problem) = pad_problem(&self.pad_value, dtype) {
                return Err(at_err(
                    at,
                    format!(
                        "pad_value {} does not fit {}: {problem}",
                        python_repr(&self.pad_value),
                        dtype.name()
                    ),
                ));
            }
        }
        for &src in &self.accept {
            if src == self.dtype {
                return Err(at_err(
                    at,
                    format!("accept: {} is the field's own dtype", src.name()),
                ));
            }
            if !widens_exactly(src, self.dtype) {
                let into: Vec<&str> = {
                    let mut names: Vec<&str> = DType::all()
                        .filter(|&to| widens_exactly(src, to))
                        .map(DType::name)
                        .collect();
                    names.sort_unstable();
                    names
                };
                let into = if into.is_empty() {
                    "nothing".to_string()
                } else {
                    format!("{into:?}").replace('"', "'")
                };
                return Err(at_err(
                    at,
                    format!(
                        "accept: {} does not widen losslessly into {} (it does into {into}); a \
                         narrowing is a wire_dtype with lossy = true",
                        src.name(),
                        self.dtype.name()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The field as JSON: every key (`full`), or the canonical form's keys.
    fn to_json(&self, full: bool) -> Json {
        let mut out = vec![
            ("tier", text(self.tier.name())),
            ("dtype", text(self.dtype.name())),
            ("shape", shape_json(&self.shape)),
            ("required", Json::Bool(self.required)),
            (
                "stages",
                self.stages.as_ref().map_or(Json::Null, |s| {
                    Json::Array(s.iter().map(|x| text(x)).collect())
                }),
            ),
            ("pack_dim", Json::Int(self.spec.pack_dim.to_string())),
            ("pad_value", self.pad_value.clone()),
            (
                "wire_dtype",
                self.declared_wire_dtype
                    .map_or(Json::Null, |d| text(d.name())),
            ),
            ("lossy", Json::Bool(self.lossy)),
            (
                "accept",
                Json::Array(self.accept.iter().map(|d| text(d.name())).collect()),
            ),
        ];
        if full || self.encoding.is_some() {
            let encoding = self.encoding.as_deref().map_or(Json::Null, text);
            out.push(("encoding", encoding));
        }
        if full || self.gather.is_some() {
            let gather = self.gather.as_ref().map_or(Json::Null, |g| {
                Json::Array(g.iter().map(|x| text(x)).collect())
            });
            out.push(("gather", gather));
        }
        if full || self.column != "text" {
            out.push(("column", text(&self.column)));
        }
        out.push(("description", text(&self.description)));
        object(out)
    }
}

impl Contract {
    fn read(value: &Json, at: &str) -> Result<Contract> {
        let obj = Obj::of(value, at)?;
        let mut keys = vec!["name", "media_field", "token_id", "count"];
        keys.extend(CONTRACT_DEFAULTS.iter().map(|(k, _)| *k));
        obj.only(&keys)?;
        let int64 = |v: &Json, at: &str| int_in(v, at, i64::MIN.into(), i64::MAX.into());
        let uint64 = |v: &Json, at: &str| int_in(v, at, 0, u64::MAX.into());
        let opt_str = |key: &str| -> Result<Option<String>> {
            Ok(obj.opt(key, |v, at| nullable(v, at, string))?.flatten())
        };
        let kind = obj
            .opt("kind", |v, at| one_of(v, at, &["placeholder"]))?
            .unwrap_or_else(|| "placeholder".into());
        let name = obj.req("name", string)?;
        let media_field = obj.req("media_field", string)?;
        let token_id = obj.req("token_id", int64)?;
        let begin = obj
            .opt("begin_token_id", |v, at| nullable(v, at, int64))?
            .flatten();
        let end = obj
            .opt("end_token_id", |v, at| nullable(v, at, int64))?
            .flatten();
        let count = obj.req("count", |v, at| one_of(v, at, &COUNT_RULES))?;
        let grid_field = opt_str("grid_field")?;
        let merge_size = obj.opt("merge_size", uint64)?.unwrap_or(2);
        let tokens_per_image = obj
            .opt("tokens_per_image", |v, at| nullable(v, at, uint64))?
            .flatten();
        let sizes_field = opt_str("sizes_field")?;
        let count_field = opt_str("count_field")?;
        let patch_size = obj.opt("patch_size", uint64)?.unwrap_or(16);
        let downsample_ratio = obj.opt("downsample_ratio", float)?.unwrap_or(0.5);
        let int = |n: i128| Json::Int(n.to_string());
        let opt_int = |n: Option<i128>| n.map_or(Json::Null, int);
        let opt_text = |s: &Option<String>| s.as_deref().map_or(Json::Null, text);
        let json = object(vec![
            ("kind", text(&kind)),
            ("name", text(&name)),
            ("media_field", text(&media_field)),
            ("token_id", int(token_id)),
            ("begin_token_id", opt_int(begin)),
            ("end_token_id", opt_int(end)),
            ("count", text(&count)),
            ("grid_field", opt_text(&grid_field)),
            ("merge_size", int(merge_size)),
            ("tokens_per_image", opt_int(tokens_per_image)),
            ("sizes_field", opt_text(&sizes_field)),
            ("count_field", opt_text(&count_field)),
            ("patch_size", int(patch_size)),
            ("downsample_ratio", Json::Float(downsample_ratio)),
        ]);
        // The contract's typed form is the codec's own (its parameter rules run on it).
        let count_rule = match count.as_str() {
            "grid_thw" => CountRule::GridThw,
            "fixed" => CountRule::Fixed,
            "image_size" => CountRule::ImageSize,
            _ => CountRule::Field,
        };
        let as_i64 = |n: i128| i64::try_from(n).unwrap_or_default(); // range-checked above
        let as_u64 = |n: i128| u64::try_from(n).unwrap_or_default();
        let contract = PlaceholderContract {
            kind: Some(kind),
            name,
            media_field,
            token_id: as_i64(token_id),
            begin_token_id: begin.map(as_i64),
            end_token_id: end.map(as_i64),
            count: count_rule,
            grid_field,
            merge_size: as_u64(merge_size),
            tokens_per_image: tokens_per_image.map(as_u64),
            sizes_field,
            count_field,
            patch_size: as_u64(patch_size),
            downsample_ratio,
        };
        contract
            .validate()
            .map_err(|e| at_err(at, e.message().to_string()))?;
        Ok(Contract { contract, json })
    }
}

impl Schema {
    /// The rules across fields and contracts.
    fn check(&self) -> Result<()> {
        let field = |name: &str| self.fields.iter().find(|(n, _)| n == name).map(|(_, f)| f);
        for (name, f) in &self.fields {
            if let Some(stages) = &f.stages {
                let mut unknown: Vec<&String> =
                    stages.iter().filter(|s| !self.stages.contains(s)).collect();
                if !unknown.is_empty() {
                    unknown.sort();
                    unknown.dedup();
                    return Err(at_err(
                        &format!("fields.{name}"),
                        format!(
                            "stages {} are not among the schema's stages {}",
                            py_list(unknown.iter().map(|s| s.as_str())),
                            py_list(self.stages.iter().map(String::as_str))
                        ),
                    ));
                }
            }
        }
        let per_token: Vec<&str> = self
            .fields
            .iter()
            .filter(|(_, f)| f.tier.items() == Items::Tokens)
            .map(|(n, _)| n.as_str())
            .collect();
        match &self.sequence_field {
            None if !per_token.is_empty() => {
                return Err(schema_err!(
                    "per-token fields {} need a sequence_field",
                    py_list(per_token.iter().copied())
                ))
            }
            Some(seq) if field(seq).is_none_or(|f| f.tier.items() != Items::Tokens) => {
                return Err(at_err(
                    "sequence_field",
                    format!("sequence_field '{seq}' must name a per_token field"),
                ))
            }
            Some(seq) if field(seq).is_some_and(|f| f.column != "text") => {
                let column = field(seq).map_or("", |f| f.column.as_str());
                return Err(at_err(
                    "sequence_field",
                    format!(
                        "sequence_field '{seq}': column = '{column}', but the sequence field \
                         travels in every column (leave it \"text\")"
                    ),
                ));
            }
            _ => {}
        }
        if let Some(lengths) = &self.lengths_field {
            let ok = field(lengths).is_some_and(|f| {
                f.tier.items() == Items::Rows
                    && f.shape.is_empty()
                    && matches!(f.dtype, DType::I32 | DType::I64)
            });
            if !ok {
                return Err(at_err(
                    "lengths_field",
                    format!("lengths_field '{lengths}' must name a 0-d int scalar field"),
                ));
            }
        }
        let gathering: Vec<&str> = self
            .fields
            .iter()
            .filter(|(_, f)| f.gather.is_some())
            .map(|(n, _)| n.as_str())
            .collect();
        if gathering.len() > 1 {
            return Err(schema_err!(
                "fields {} all declare gather: one field gathers a source's undeclared keys (list \
                 every pattern in it)",
                py_list(gathering.iter().copied())
            ));
        }
        let specs: Vec<FieldSpec> = self.fields.iter().map(|(_, f)| f.spec.clone()).collect();
        for (i, c) in self.contracts.iter().enumerate() {
            let at = format!("contracts.{i}");
            let named: Vec<(&str, &str)> = [
                Some(c.contract.media_field.as_str()),
                c.contract.grid_field.as_deref(),
                c.contract.sizes_field.as_deref(),
                c.contract.count_field.as_deref(),
            ]
            .into_iter()
            .flatten()
            .filter_map(|n| field(n).map(|f| (n, f.column.as_str())))
            .collect();
            if named.iter().any(|(_, col)| *col != named[0].1) {
                let columns: Vec<String> = named
                    .iter()
                    .map(|(n, col)| format!("'{n}': '{col}'"))
                    .collect();
                return Err(at_err(
                    &at,
                    format!(
                        "contract '{}': the fields it names must share a column, but their \
                         columns are {{{}}}",
                        c.contract.name,
                        columns.join(", ")
                    ),
                ));
            }
        }
        for (i, c) in self.contracts.iter().enumerate() {
            let times = self
                .contracts
                .iter()
                .filter(|o| o.contract.name == c.contract.name)
                .count();
            if times > 1 {
                return Err(at_err(
                    "contracts",
                    format!("contract name '{}' appears {times} times", c.contract.name),
                ));
            }
            c.contract
                .validate_fields(&specs, self.sequence_field.as_deref())
                .map_err(|e| at_err(&format!("contracts.{i}"), e.message().to_string()))?;
        }
        Ok(())
    }

    fn to_json(&self, full: bool) -> Json {
        let opt_text = |s: &Option<String>| s.as_deref().map_or(Json::Null, text);
        object(vec![
            ("name", text(&self.name)),
            ("version", Json::Int(self.version.to_string())),
            ("description", text(&self.description)),
            ("sequence_field", opt_text(&self.sequence_field)),
            ("lengths_field", opt_text(&self.lengths_field)),
            (
                "stages",
                Json::Array(self.stages.iter().map(|s| text(s)).collect()),
            ),
            (
                "fields",
                Json::Object(
                    self.fields
                        .iter()
                        .map(|(n, f)| (code_points(n), f.to_json(full)))
                        .collect(),
                ),
            ),
            (
                "contracts",
                Json::Array(self.contracts.iter().map(|c| c.json.clone()).collect()),
            ),
        ])
    }
}

// -- pad values ---------------------------------------------------------------------------------

/// Why `value` cannot be stored exactly as one `dtype` element, or None: integers exactly,
/// floats up to the largest finite value (NaN always, infinities where the dtype has them).
fn pad_problem(value: &Json, dtype: DType) -> Option<String> {
    use DType::*;
    let int_range: Option<(i128, i128)> = match dtype {
        U8 => Some((0, u8::MAX.into())),
        I8 => Some((i8::MIN.into(), i8::MAX.into())),
        I16 => Some((i16::MIN.into(), i16::MAX.into())),
        U16 => Some((0, u16::MAX.into())),
        I32 => Some((i32::MIN.into(), i32::MAX.into())),
        U32 => Some((0, u32::MAX.into())),
        I64 => Some((i64::MIN.into(), i64::MAX.into())),
        // torch builds the pad element from a Python int through int64.
        U64 => Some((0, i64::MAX.into())),
        _ => None,
    };
    if dtype == Bool {
        return match value {
            Json::Bool(_) => None,
            Json::Int(n) if n == "0" || n == "1" => None,
            _ => Some("a bool field pads with true, false, 0 or 1".into()),
        };
    }
    if let Some((lo, hi)) = int_range {
        let Json::Int(n) = value else {
            return Some("an integer field needs an integer pad value".into());
        };
        return match n.parse::<i128>() {
            Ok(x) if lo <= x && x <= hi => None,
            _ => Some(format!("expected {lo} <= pad_value <= {hi}")),
        };
    }
    let limit = match dtype {
        F16 => 65504.0,
        BF16 => 3.389_531_389_251_535_5e38,
        F32 | C64 => 3.402_823_466_385_288_6e38,
        F8E4M3 => 448.0,
        F8E5M2 => 57344.0,
        _ => f64::MAX,
    };
    let limit_text = {
        let mut s = String::new();
        crate::schema::text::write_float(&mut s, limit);
        s
    };
    let x = match value {
        Json::Bool(_) => return Some("a floating-point field needs a number, not a bool".into()),
        Json::Float(x) => *x,
        // Python's float(int): an int past the float range does not convert.
        Json::Int(n) => match n.parse::<f64>() {
            Ok(x) if x.is_finite() => x,
            _ => return Some(format!("expected |pad_value| <= {limit_text}")),
        },
        _ => return Some("a pad value is a number".into()),
    };
    let no_inf = dtype == F8E4M3;
    if x.is_nan() || x.abs() <= limit || (x.is_infinite() && !no_inf) {
        return None;
    }
    Some(format!(
        "expected |pad_value| <= {limit_text}{}",
        if no_inf { " (no infinities)" } else { "" }
    ))
}

/// A JSON scalar as Python's `repr` shows it.
fn python_repr(value: &Json) -> String {
    match value {
        Json::Bool(true) => "True".into(),
        Json::Bool(false) => "False".into(),
        Json::Float(x) if x.is_nan() => "nan".into(),
        Json::Float(x) if x.is_infinite() => (if *x > 0.0 { "inf" } else { "-inf" }).into(),
        other => canonical(other),
    }
}

// -- reading typed values -----------------------------------------------------------------------

/// An object being read, and where it is (`fields.x`), for errors.
struct Obj<'a> {
    items: &'a [(Vec<u32>, Json)],
    at: &'a str,
}

impl<'a> Obj<'a> {
    fn of(value: &'a Json, at: &'a str) -> Result<Obj<'a>> {
        match value {
            Json::Object(items) => Ok(Obj { items, at }),
            other => Err(at_err(
                if at.is_empty() { "schema" } else { at },
                format!("must be a table (object), not {}", kind(other)),
            )),
        }
    }

    fn path(&self, key: &str) -> String {
        if self.at.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.at)
        }
    }

    /// Refuses keys not in `allowed` (the first, in text order).
    fn only(&self, allowed: &[&str]) -> Result<()> {
        for (key, _) in self.items {
            let name = code_points_to_string(key).unwrap_or_else(|| "\u{fffd}".into());
            if !allowed.contains(&name.as_str()) {
                return Err(at_err(&self.path(&name), "extra key, not allowed".into()));
            }
        }
        Ok(())
    }

    fn get(&self, key: &str) -> Option<&'a Json> {
        let key: Vec<u32> = key.chars().map(u32::from).collect();
        self.items
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
    }

    fn req<T>(&self, key: &str, read: impl Fn(&Json, &str) -> Result<T>) -> Result<T> {
        let value = self.get(key).ok_or_else(|| missing(&self.path(key)))?;
        read(value, &self.path(key))
    }

    fn opt<T>(&self, key: &str, read: impl Fn(&Json, &str) -> Result<T>) -> Result<Option<T>> {
        self.get(key).map(|v| read(v, &self.path(key))).transpose()
    }
}

fn string(v: &Json, at: &str) -> Result<String> {
    match v {
        Json::Str(s) => {
            code_points_to_string(s).ok_or_else(|| at_err(at, "holds a lone surrogate".into()))
        }
        other => Err(at_err(at, format!("must be a string, not {}", kind(other)))),
    }
}

fn one_of(v: &Json, at: &str, allowed: &[&str]) -> Result<String> {
    let s = string(v, at)?;
    if allowed.contains(&s.as_str()) {
        return Ok(s);
    }
    let listed: Vec<String> = allowed.iter().map(|a| format!("'{a}'")).collect();
    Err(at_err(
        at,
        format!("must be one of {}, got '{}'", listed.join(", "), clip(&s)),
    ))
}

fn dtype_named(v: &Json, at: &str) -> Result<DType> {
    let s = string(v, at)?;
    DType::from_name(&s).map_err(|_| {
        let names: Vec<&str> = DType::all().map(DType::name).collect();
        at_err(
            at,
            format!("must be a dtype ({}), got '{}'", names.join(", "), clip(&s)),
        )
    })
}

fn boolean(v: &Json, at: &str) -> Result<bool> {
    match v {
        Json::Bool(b) => Ok(*b),
        other => Err(at_err(at, format!("must be a bool, not {}", shown(other)))),
    }
}

fn int_in(v: &Json, at: &str, lo: i128, hi: i128) -> Result<i128> {
    let Json::Int(n) = v else {
        return Err(at_err(at, format!("must be an integer, not {}", shown(v))));
    };
    match n.parse::<i128>() {
        Ok(x) if lo <= x && x <= hi => Ok(x),
        _ => Err(at_err(
            at,
            format!("must be between {lo} and {hi}, got {}", clip(n)),
        )),
    }
}

fn float(v: &Json, at: &str) -> Result<f64> {
    match v {
        Json::Float(x) => Ok(*x),
        // As a float field takes an int in Python (1 -> 1.0), one that converts exactly enough.
        Json::Int(n) => n
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite())
            .ok_or_else(|| at_err(at, format!("{} does not fit a float", clip(n)))),
        other => Err(at_err(
            at,
            format!("must be a number, not {}", shown(other)),
        )),
    }
}

fn pad(v: &Json, at: &str) -> Result<Json> {
    match v {
        Json::Bool(_) | Json::Int(_) | Json::Float(_) => Ok(v.clone()),
        other => Err(at_err(
            at,
            format!("must be a bool or a number, not {}", kind(other)),
        )),
    }
}

fn dim(v: &Json, at: &str) -> Result<Option<u64>> {
    match v {
        Json::Str(s) if *s == [u32::from('*')] => Ok(None),
        Json::Int(_) => int_in(v, at, 0, i64::MAX.into()).map(|n| u64::try_from(n).ok()),
        other => Err(at_err(
            at,
            format!("a dim is an integer or \"*\", not {}", shown(other)),
        )),
    }
}

fn nullable<T>(v: &Json, at: &str, read: impl Fn(&Json, &str) -> Result<T>) -> Result<Option<T>> {
    match v {
        Json::Null => Ok(None),
        other => read(other, at).map(Some),
    }
}

fn list<T>(v: &Json, at: &str, read: impl Fn(&Json, &str) -> Result<T>) -> Result<Vec<T>> {
    let Json::Array(items) = v else {
        return Err(at_err(at, format!("must be a list, not {}", kind(v))));
    };
    if items.len() > MAX_DECLARED_ITEMS {
        return Err(at_err(
            at,
            format!("{} items; at most {MAX_DECLARED_ITEMS}", items.len()),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| read(item, &format!("{at}.{i}")))
        .collect()
}

fn strings_or_null(v: &Json, at: &str) -> Result<Option<Vec<String>>> {
    nullable(v, at, |v, at| list(v, at, string))
}

/// An object's entries, each key once with its last value, in the order keys first appear.
fn last_values(items: &[(Vec<u32>, Json)]) -> Vec<(&Vec<u32>, &Json)> {
    // By index, not by a scan of what is seen: a table of 4,096 fields is read in linear time.
    let mut out: Vec<(&Vec<u32>, &Json)> = Vec::with_capacity(items.len());
    let mut seen: std::collections::HashMap<&Vec<u32>, usize> =
        std::collections::HashMap::with_capacity(items.len());
    for (k, v) in items {
        match seen.get(k) {
            Some(&slot) => out[slot].1 = v,
            None => {
                seen.insert(k, out.len());
                out.push((k, v));
            }
        }
    }
    out
}

// -- writing ------------------------------------------------------------------------------------

fn code_points(s: &str) -> Vec<u32> {
    s.chars().map(u32::from).collect()
}

fn text(s: &str) -> Json {
    Json::Str(code_points(s))
}

/// A shape as a schema writes it: sizes, and `"*"` for a ragged dim.
fn shape_json(shape: &[Option<u64>]) -> Json {
    Json::Array(
        shape
            .iter()
            .map(|d| d.map_or_else(|| text("*"), |n| Json::Int(n.to_string())))
            .collect(),
    )
}

fn object(items: Vec<(&str, Json)>) -> Json {
    Json::Object(
        items
            .into_iter()
            .map(|(k, v)| (code_points(k), v))
            .collect(),
    )
}

/// JSON in the order the value holds its keys (the canonical form sorts them): the full form,
/// whose fields keep their declared order.
fn ordered(value: &Json) -> String {
    crate::schema::text::in_order(value)
}

// -- errors -------------------------------------------------------------------------------------

fn at_err(at: &str, what: String) -> Error {
    if at.is_empty() {
        return schema_err!("{what}");
    }
    schema_err!("{at}: {what}")
}

fn missing(at: &str) -> Error {
    at_err(at, "required, missing".into())
}

fn kind(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a bool",
        Json::Int(_) => "an integer",
        Json::Float(_) => "a float",
        Json::Str(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "a table",
    }
}

/// A value for an error: scalars as Python shows them, containers by kind.
fn shown(v: &Json) -> String {
    match v {
        Json::Array(_) | Json::Object(_) | Json::Null => kind(v).to_string(),
        Json::Str(s) => format!(
            "'{}'",
            clip(&code_points_to_string(s).unwrap_or_else(|| "\u{fffd}".into()))
        ),
        scalar => format!("{} {}", kind(v), clip(&python_repr(scalar))),
    }
}

fn clip(s: &str) -> String {
    s.chars().take(80).collect()
}

fn py_list<'s>(items: impl Iterator<Item = &'s str>) -> String {
    let quoted: Vec<String> = items.map(|s| format!("'{s}'")).collect();
    format!("[{}]", quoted.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::text::parse;

    fn read(text: &str) -> Result<Resolved> {
        resolve(&parse(text).unwrap())
    }

    const TWO_FIELDS: &str = r#"{"name":"t","sequence_field":"ids","fields":{
        "reward":{"tier":"scalar","dtype":"float32"},
        "ids":{"tier":"per_token","dtype":"int64","pad_value":-1}}}"#;

    #[test]
    fn defaults_are_filled_and_the_full_form_keeps_declared_order() {
        let r = read(TWO_FIELDS).unwrap();
        let full = parse(&r.full).unwrap();
        let Some(Json::Object(fields)) = full.get("fields") else {
            panic!("{}", r.full);
        };
        let names: Vec<String> = fields
            .iter()
            .map(|(k, _)| code_points_to_string(k).unwrap())
            .collect();
        assert_eq!(names, ["reward", "ids"]);
        let reward = &fields[0].1;
        for (key, default) in FIELD_DEFAULTS {
            assert_eq!(canonical(reward.get(key).unwrap()), default, "{key}");
        }
        for (key, default) in SCHEMA_DEFAULTS {
            if key != "sequence_field" {
                assert_eq!(canonical(full.get(key).unwrap()), default, "{key}");
            }
        }
        // The canonical form: sorted, without a field's unset encoding, gather and column.
        assert!(r
            .canonical
            .starts_with(r#"{"contracts":[],"description":"","fields":{"ids":"#));
        for key in ["\"encoding\"", "\"gather\"", "\"column\""] {
            assert!(!r.canonical.contains(key), "{}", r.canonical);
        }
        assert_eq!(
            r.fingerprint,
            crate::schema::text::fingerprint(&r.canonical)
        );
        assert_eq!(r.sequence_field.as_deref(), Some("ids"));
        // Reading the full form again gives the same schema.
        assert_eq!(read(&r.full).unwrap().canonical, r.canonical);
        assert_eq!(read(&r.canonical).unwrap().canonical, r.canonical);
    }

    #[test]
    fn set_keys_stay_in_the_canonical_form() {
        let text = TWO_FIELDS.replace(
            r#""dtype":"float32"}"#,
            r#""dtype":"float32","column":"media"}"#,
        );
        assert!(read(&text)
            .unwrap()
            .canonical
            .contains(r#""column":"media""#));
    }

    #[test]
    fn refusals_name_the_path_and_the_value() {
        for (from, to, want) in [
            (
                r#""dtype":"float32""#,
                r#""dtype":"f32""#,
                "fields.reward.dtype: must be a dtype",
            ),
            (
                r#""pad_value":-1"#,
                r#""pad_value":-1.5"#,
                "pad_value -1.5 does not fit int64",
            ),
            (
                r#""pad_value":-1"#,
                r#""pad_value":"x""#,
                "fields.ids.pad_value: must be a bool",
            ),
            (r#""name":"t""#, r#""name":"t","nmae":1"#, "nmae: extra key"),
            (
                r#""name":"t""#,
                r#""name":"t","version":-1"#,
                "version: must be between 0",
            ),
            (
                r#""name":"t""#,
                r#""name":"t","version":true"#,
                "version: must be an integer, not a bool True",
            ),
            (
                r#""sequence_field":"ids""#,
                r#""sequence_field":"reward""#,
                "must name a per_token field",
            ),
            (r#""name":"t""#, r#""name":"t","stages":["train"]"#, ""),
        ] {
            let text = TWO_FIELDS.replacen(from, to, 1);
            assert_ne!(text, TWO_FIELDS);
            match read(&text) {
                Err(e) => assert!(
                    e.message().contains(want) && !want.is_empty(),
                    "{}",
                    e.message()
                ),
                Ok(_) => assert!(want.is_empty(), "{text} was read"),
            }
        }
    }

    #[test]
    fn a_field_and_a_contract_read_alone() {
        let field = resolve_field(
            &parse(r#"{"tier":"packed","dtype":"uint8","shape":["*"],"pack_dim":-1}"#).unwrap(),
        )
        .unwrap();
        assert!(field.contains(r#""pack_dim":0"#), "{field}");
        let err = resolve_field(&parse(r#"{"tier":"packed","dtype":"uint8","shape":{}}"#).unwrap())
            .unwrap_err();
        assert!(
            err.message().starts_with("shape: must be a list"),
            "{}",
            err.message()
        );
        let contract = resolve_contract(
            &parse(r#"{"name":"c","media_field":"m","token_id":7,"count":"fixed","tokens_per_image":4}"#)
                .unwrap(),
        )
        .unwrap();
        assert!(contract.contains(r#""downsample_ratio":0.5"#), "{contract}");
        let err = resolve_contract(
            &parse(r#"{"name":"c","media_field":"m","token_id":7,"count":"fixed"}"#).unwrap(),
        )
        .unwrap_err();
        assert!(
            err.message().contains("needs tokens_per_image"),
            "{}",
            err.message()
        );
    }
}
