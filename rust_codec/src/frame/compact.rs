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
//! frames). Schemas the process holds (pinned: [`pin`], [`unpin`]) stay while it holds them.
//!
//! The registry is also the one account of what the process keeps for schemas it no longer
//! references, under one byte budget ([`learnt_budget`], by default [`DEFAULT_LEARNT_BYTES`]):
//! the schemas learnt from frames and those the process held and released (their specs and
//! text), the embedded texts the frame reader checked ([`checked_facts`]), and the typed views
//! Python built of held schemas (charged here by their measured size: [`charge_view`]). Each is
//! charged what it costs the allocator (capacities, and a block header per allocation), not
//! the length of its JSON; the least recently used goes first, whichever cache it is in, and a
//! view let go is named to Python ([`released_views`]) so that it drops its object. A peer
//! sending many large schemas, or a loop building a schema per step, cannot pin memory for
//! the life of a process.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use crate::error::{Code, Detail, Error, Result};
use crate::schema::embedded::{check_text, SchemaFacts};
use crate::schema::spec::{meta, FieldSpec};
use crate::{frame_err, internal_err, schema_err};

/// The most schemas learnt from frames (not loaded by the process itself) the registry keeps.
pub const MAX_LEARNT: usize = 4096;

/// The most embedded schema texts the frame reader remembers as checked.
pub const MAX_CHECKED: usize = 256;

/// The bytes that everything kept for schemas the process no longer references may take
/// (learnt and released schemas, checked texts, Python's typed views of them) unless the
/// process sets another budget ([`set_learnt_budget`]; Python: `PY_WIRE_LEARNT_SCHEMA_BYTES`).
pub const DEFAULT_LEARNT_BYTES: usize = 64 << 20;

/// What a heap block costs beyond the bytes asked for (glibc's header and rounding).
const BLOCK: usize = 16;

/// The bytes a string's heap block takes.
pub fn string_bytes(capacity: usize) -> usize {
    if capacity == 0 {
        0
    } else {
        capacity + BLOCK
    }
}

/// The bytes a list of field specs keeps on the heap (the vector's block and each spec's name
/// and shape).
pub fn specs_bytes(specs: &Vec<FieldSpec>) -> usize {
    let each: usize = specs
        .iter()
        .map(|s| {
            string_bytes(s.name.capacity())
                + string_bytes(s.shape.capacity() * std::mem::size_of::<Option<u64>>())
        })
        .sum();
    string_bytes(specs.capacity() * std::mem::size_of::<FieldSpec>()) + each
}

/// The bytes a hash map keeps for one more entry of `K`, `V` (its slot, a control byte, and
/// the spare slots of a map at most 7/8 full).
fn slot_bytes<K, V>() -> usize {
    (std::mem::size_of::<(K, V)>() + 1) * 8 / 7
}

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

impl HeldSchema {
    /// The bytes this schema keeps in its `Arc`'s block and on the heap.
    fn kept_bytes(&self) -> usize {
        string_bytes(2 * std::mem::size_of::<usize>() + std::mem::size_of::<Self>())
            + string_bytes(self.fingerprint.capacity())
            + specs_bytes(&self.specs)
            + self
                .sequence_field
                .as_ref()
                .map_or(0, |f| string_bytes(f.capacity()))
    }
}

/// The bytes an `Arc<str>` of `text` keeps (its counts and the text, one block).
fn arc_text_bytes(text: &str) -> usize {
    string_bytes(2 * std::mem::size_of::<usize>() + text.len())
}

/// An embedded schema text the frame reader checked ([`checked_facts`]) and what it implies.
struct Checked {
    text: String,
    facts: Arc<SchemaFacts>,
    /// What the entry keeps: the text, the facts, the key and its slot.
    bytes: usize,
    last_used: AtomicU64,
}

struct Entry {
    schema: Arc<HeldSchema>,
    /// The schema's JSON as it was held (every key; fields in declared order), for readers
    /// that build their own view of it (Python's `Schema`).
    text: Option<Arc<str>>,
    /// The measured bytes of Python's typed views of the schema ([`charge_view`]): of its held
    /// text, and of an embedded frame's text.
    views: [usize; 2],
    /// What the entry keeps: the schema, its text, the views, the key and its slot.
    bytes: usize,
    /// Not held by the process (read from a frame, or loaded and since released by every
    /// holder): counted against the learnt bounds, and let go (least recently used first) to
    /// stay within them. Exactly when `pins` is 0.
    learnt: bool,
    /// How many holds of the process keep the schema ([`pin`] and loading each add one,
    /// [`unpin`] takes one away: Python's `Schema` objects, each while it lives).
    pins: usize,
    /// The registry's clock when the entry was last held or read.
    last_used: AtomicU64,
}

/// The schemas a process holds, by fingerprint, and the embedded texts it checked.
struct Registry {
    entries: HashMap<String, Entry>,
    checked: HashMap<String, Checked>,
    /// How many entries are learnt (not pinned).
    learnt: usize,
    /// The bytes of the learnt entries and the checked texts: what the budget bounds.
    learnt_bytes: usize,
    budget: usize,
    clock: AtomicU64,
    /// Fingerprints let go whose entry Python had charged a view to, for Python to drop it.
    released_views: Vec<String>,
}

impl Registry {
    fn new(budget: usize) -> Self {
        Registry {
            entries: HashMap::new(),
            checked: HashMap::new(),
            learnt: 0,
            learnt_bytes: 0,
            budget,
            clock: AtomicU64::new(0),
            released_views: Vec::new(),
        }
    }

    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed)
    }

    /// The entry held under `fingerprint`, marked as used now.
    fn get(&self, fingerprint: &str) -> Option<&Entry> {
        let entry = self.entries.get(fingerprint)?;
        entry.last_used.store(self.tick(), Ordering::Relaxed);
        Some(entry)
    }

    /// Holds `schema` (with its `text`, when given), or marks it used if it is held already;
    /// returns whether it is held afterwards. A learnt schema larger than the whole budget is
    /// not held; holding one lets go of the least recently used learnt schemas it displaces.
    /// A schema the process loads itself (`learnt` false: one more pin) is not let go while
    /// pinned, even if it was learnt before.
    fn insert(&mut self, schema: HeldSchema, text: Option<Arc<str>>, learnt: bool) -> bool {
        let now = self.tick();
        let fingerprint = schema.fingerprint.clone();
        if let Some(entry) = self.entries.get_mut(&fingerprint) {
            entry.last_used.store(now, Ordering::Relaxed);
            let mut added = 0;
            if entry.text.is_none() {
                if let Some(text) = text {
                    added = arc_text_bytes(&text);
                    entry.bytes += added;
                    entry.text = Some(text);
                }
            }
            if !learnt {
                entry.pins += 1;
            }
            if entry.learnt && !learnt {
                entry.learnt = false;
                self.learnt -= 1;
                self.learnt_bytes -= entry.bytes - added;
            } else if entry.learnt {
                self.learnt_bytes += added;
                self.fit(0, 0);
            }
            return self.entries.contains_key(&fingerprint);
        }
        let bytes = schema.kept_bytes()
            + string_bytes(fingerprint.capacity())
            + slot_bytes::<String, Entry>()
            + text.as_ref().map_or(0, |t| arc_text_bytes(t));
        if learnt {
            if bytes > self.budget {
                return false;
            }
            self.fit(1, bytes);
            self.learnt += 1;
            self.learnt_bytes += bytes;
        }
        let entry = Entry {
            schema: Arc::new(schema),
            text,
            views: [0, 0],
            bytes,
            learnt,
            pins: usize::from(!learnt),
            last_used: AtomicU64::new(now),
        };
        self.entries.insert(fingerprint, entry);
        true
    }

    /// Pins the schema held under `fingerprint` (not let go until every pin is released) and
    /// marks it used now; returns whether one is held.
    fn pin(&mut self, fingerprint: &str) -> bool {
        let now = self.tick();
        let Some(entry) = self.entries.get_mut(fingerprint) else {
            return false;
        };
        entry.last_used.store(now, Ordering::Relaxed);
        entry.pins += 1;
        if entry.learnt {
            entry.learnt = false;
            self.learnt = self.learnt.saturating_sub(1);
            self.learnt_bytes = self.learnt_bytes.saturating_sub(entry.bytes);
        }
        true
    }

    /// Releases one pin of the schema held under `fingerprint`; the last one makes it learnt
    /// (counted against the learnt bounds and let go, least recently used first, beyond
    /// them). Returns whether one is held afterwards.
    fn unpin(&mut self, fingerprint: &str) -> bool {
        let Some(entry) = self.entries.get_mut(fingerprint) else {
            return false;
        };
        if entry.pins == 0 {
            return true;
        }
        entry.pins -= 1;
        if entry.pins == 0 {
            entry.learnt = true;
            self.learnt += 1;
            self.learnt_bytes += entry.bytes;
            self.fit(0, 0);
        }
        self.entries.contains_key(fingerprint)
    }

    /// Lets go of what the budget bounds, least recently used first (a learnt schema or a
    /// checked text), until `count` more learnt schemas of `bytes` more bytes fit within the
    /// bounds.
    fn fit(&mut self, count: usize, bytes: usize) {
        loop {
            let over_count = self.learnt > 0 && self.learnt + count > MAX_LEARNT;
            let over_bytes = self.learnt_bytes + bytes > self.budget;
            if !over_count && !over_bytes {
                return;
            }
            let entry = self
                .entries
                .iter()
                .filter(|(_, e)| e.learnt)
                .map(|(fp, e)| (e.last_used.load(Ordering::Relaxed), fp))
                .min();
            let checked = if over_bytes {
                self.checked
                    .iter()
                    .map(|(fp, c)| (c.last_used.load(Ordering::Relaxed), fp))
                    .min()
            } else {
                None
            };
            match (entry, checked) {
                (Some(e), Some(c)) if c < e => {
                    let fp = c.1.clone();
                    self.forget_checked(&fp);
                }
                (Some((_, fp)), _) => {
                    let fp = fp.clone();
                    self.forget(&fp);
                }
                (None, Some((_, fp))) => {
                    let fp = fp.clone();
                    self.forget_checked(&fp);
                }
                (None, None) => return,
            }
        }
    }

    /// Lets go of the learnt schema held under `fingerprint`.
    fn forget(&mut self, fingerprint: &str) {
        let Some((fp, entry)) = self.entries.remove_entry(fingerprint) else {
            return;
        };
        if entry.learnt {
            self.learnt -= 1;
            self.learnt_bytes -= entry.bytes;
        }
        if entry.views != [0, 0] {
            self.released_views.push(fp);
        }
    }

    /// Lets go of the checked text under `fingerprint`.
    fn forget_checked(&mut self, fingerprint: &str) {
        if let Some(gone) = self.checked.remove(fingerprint) {
            self.learnt_bytes -= gone.bytes;
        }
    }

    /// The facts of `text`, checked before under `fingerprint`, marked used now.
    fn checked(&self, fingerprint: &str, text: &str) -> Option<Arc<SchemaFacts>> {
        let found = self.checked.get(fingerprint)?;
        if found.text != text {
            return None;
        }
        found.last_used.store(self.tick(), Ordering::Relaxed);
        Some(found.facts.clone())
    }

    /// Remembers `text`, checked under `fingerprint`, with its facts (not when it alone is
    /// larger than the budget).
    fn remember_checked(&mut self, fingerprint: &str, text: &str, facts: Arc<SchemaFacts>) {
        let bytes = string_bytes(text.len())
            + string_bytes(fingerprint.len())
            + string_bytes(2 * std::mem::size_of::<usize>() + std::mem::size_of::<SchemaFacts>())
            + specs_bytes(&facts.specs)
            + facts
                .sequence_field
                .as_ref()
                .map_or(0, |f| string_bytes(f.capacity()))
            + slot_bytes::<String, Checked>();
        if bytes > self.budget {
            return;
        }
        self.forget_checked(fingerprint);
        if self.checked.len() >= MAX_CHECKED {
            let oldest = self
                .checked
                .iter()
                .map(|(fp, c)| (c.last_used.load(Ordering::Relaxed), fp.clone()))
                .min();
            if let Some((_, fp)) = oldest {
                self.forget_checked(&fp);
            }
        }
        self.fit(0, bytes);
        let last_used = AtomicU64::new(self.tick());
        self.checked.insert(
            fingerprint.to_string(),
            Checked {
                text: text.to_string(),
                facts,
                bytes,
                last_used,
            },
        );
        self.learnt_bytes += bytes;
    }

    /// Charges the entry under `fingerprint` `bytes` for its typed view of form `form` (in
    /// place of what it was charged before); returns whether it is held afterwards.
    fn charge_view(&mut self, fingerprint: &str, form: usize, bytes: usize) -> bool {
        let now = self.tick();
        let Some(entry) = self.entries.get_mut(fingerprint) else {
            return false;
        };
        entry.last_used.store(now, Ordering::Relaxed);
        let before = entry.bytes;
        entry.bytes = entry.bytes - entry.views[form] + bytes;
        entry.views[form] = bytes;
        if entry.learnt {
            self.learnt_bytes = self.learnt_bytes - before + entry.bytes;
            self.fit(0, 0);
        }
        self.entries.contains_key(fingerprint)
    }
}

fn registry() -> &'static RwLock<Registry> {
    static REGISTRY: OnceLock<RwLock<Registry>> = OnceLock::new();
    REGISTRY.get_or_init(|| RwLock::new(Registry::new(DEFAULT_LEARNT_BYTES)))
}

fn write_registry() -> Result<std::sync::RwLockWriteGuard<'static, Registry>> {
    registry()
        .write()
        .map_err(|_| internal_err!("schema registry lock poisoned"))
}

/// What this process keeps for schemas it no longer references: how many entries (learnt
/// schemas and checked texts), the bytes they keep (with Python's views of them), and the
/// budget those bytes stay within.
pub fn learnt_usage() -> (usize, usize, usize) {
    registry().read().map_or((0, 0, 0), |r| {
        (r.learnt + r.checked.len(), r.learnt_bytes, r.budget)
    })
}

/// The bytes everything kept for schemas the process no longer references may take.
pub fn learnt_budget() -> usize {
    learnt_usage().2
}

/// Sets the bytes everything kept for schemas the process no longer references may take,
/// letting go of the least recently used beyond it; returns the budget it replaces.
pub fn set_learnt_budget(bytes: usize) -> Result<usize> {
    let mut reg = write_registry()?;
    let previous = std::mem::replace(&mut reg.budget, bytes);
    reg.fit(0, 0);
    Ok(previous)
}

/// Whether `s` is a fingerprint as py_wire writes one: `sha256:` and 64 lowercase hex digits.
pub fn is_fingerprint(s: &str) -> bool {
    s.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

fn hold_entry(schema: HeldSchema, text: Option<Arc<str>>, learnt: bool) -> Result<bool> {
    if !is_fingerprint(&schema.fingerprint) {
        return Err(schema_err!(
            "{:?} is not a schema fingerprint (sha256: and 64 hex digits)",
            schema.fingerprint
        ));
    }
    for spec in &schema.specs {
        spec.validate()?;
    }
    Ok(write_registry()?.insert(schema, text, learnt))
}

/// Holds `schema` for this process. `learnt` marks a schema read from a frame rather than
/// loaded by the process: those are kept within the learnt bounds ([`MAX_LEARNT`],
/// [`learnt_budget`]), letting go of the least recently used, and one larger than the whole
/// budget is not kept (`false` is returned). The specs are validated (the codec's own rules).
pub fn hold(schema: HeldSchema, learnt: bool) -> Result<bool> {
    hold_entry(schema, None, learnt)
}

/// Holds the schema whose JSON is `text` (a schema's full or canonical form, as
/// [`model::resolve`](crate::schema::model::resolve) reads it), keeping the text for
/// [`held_text`]. Returns whether it is held (see [`hold`]) and its fingerprint. A schema the
/// model refuses is a `SchemaError`.
pub fn hold_text(text: &str, learnt: bool) -> Result<(bool, String)> {
    crate::schema::text::check_nesting(text)?;
    let resolved = crate::schema::model::resolve(&crate::schema::text::parse(text)?)?;
    let fingerprint = resolved.fingerprint.clone();
    let held = hold_entry(
        HeldSchema {
            fingerprint: fingerprint.clone(),
            specs: resolved.specs,
            sequence_field: resolved.sequence_field,
        },
        Some(Arc::from(resolved.full.as_str())),
        learnt,
    )?;
    Ok((held, fingerprint))
}

/// Pins the schema held under `fingerprint` for this process (as [`hold`] with `learnt` false
/// does): it is not let go until each pin is released ([`unpin`]). Returns whether one is held.
/// The Python layer pins a schema once for each `Schema` object it is handed and releases
/// that pin when the object is freed: the registry is the one record of what the process
/// holds, and a schema the process no longer references is let go within the learnt bounds.
pub fn pin(fingerprint: &str) -> Result<bool> {
    Ok(write_registry()?.pin(fingerprint))
}

/// Releases one pin of the schema held under `fingerprint` (see [`pin`]); returns whether
/// one is held afterwards.
pub fn unpin(fingerprint: &str) -> Result<bool> {
    Ok(write_registry()?.unpin(fingerprint))
}

/// Charges the schema held under `fingerprint` the measured `bytes` of a typed view Python
/// keeps of it (`held`: of its held text; else of an embedded frame's text), in place of what
/// that view was charged before, and lets go of the least recently used beyond the budget.
/// Returns whether the schema is held afterwards: a view is kept only while it is.
pub fn charge_view(fingerprint: &str, held: bool, bytes: usize) -> Result<bool> {
    Ok(write_registry()?.charge_view(fingerprint, usize::from(held), bytes))
}

/// The fingerprints let go since the last call whose schemas Python had charged views to
/// ([`charge_view`]): Python drops those views.
pub fn released_views() -> Result<Vec<String>> {
    Ok(std::mem::take(&mut write_registry()?.released_views))
}

/// [`check_text`], remembering the texts that passed (within the budget, see the module's
/// doc): a process reads many frames of one schema, and each needs only a comparison of its
/// text with the one checked (the checks depend on nothing else).
pub fn checked_facts(text: &str, fingerprint_entry: &str) -> Result<Arc<SchemaFacts>> {
    if let Some(facts) = registry()
        .read()
        .ok()
        .and_then(|r| r.checked(fingerprint_entry, text))
    {
        return Ok(facts);
    }
    let facts = Arc::new(check_text(text, fingerprint_entry)?);
    write_registry()?.remember_checked(fingerprint_entry, text, facts.clone());
    Ok(facts)
}

/// An embedded frame's schema: its text checked against its fingerprint ([`check_text`],
/// remembered by [`checked_facts`]) and the facts it implies, from which the reader derives the
/// frame's field table and sequence field. `None` for a header with neither schema nor
/// fingerprint (a compact frame, or one the reader then refuses); one without the other is a
/// `FrameError`.
pub fn embedded_facts(metadata: &BTreeMap<String, String>) -> Result<Option<Arc<SchemaFacts>>> {
    match (metadata.get(meta::SCHEMA), metadata.get(meta::FINGERPRINT)) {
        (None, None) => Ok(None),
        (Some(_), None) => Err(frame_err!(
            "the frame carries a schema but no fingerprint ({:?})",
            meta::FINGERPRINT
        )),
        (None, Some(_)) => Err(frame_err!(
            "the frame carries a fingerprint but no schema ({:?})",
            meta::SCHEMA
        )),
        (Some(text), Some(fp)) => checked_facts(text, fp).map(Some),
    }
}

/// Whether this process holds a schema under `fingerprint`, marking it used (a learnt schema
/// still received is not the least recently used).
pub fn holds(fingerprint: &str) -> bool {
    registry()
        .read()
        .is_ok_and(|r| r.get(fingerprint).is_some())
}

/// The JSON of the schema held under `fingerprint` by [`hold_text`].
pub fn held_text(fingerprint: &str) -> Option<Arc<str>> {
    registry()
        .read()
        .ok()
        .and_then(|r| r.get(fingerprint).and_then(|e| e.text.clone()))
}

/// The schema this process holds under `fingerprint`.
pub fn held(fingerprint: &str) -> Option<Arc<HeldSchema>> {
    registry()
        .read()
        .ok()
        .and_then(|r| r.get(fingerprint).map(|e| e.schema.clone()))
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

/// A held schema as a frame read under it keeps it (with its text, when held with one): a
/// frame its user holds is read again (copied, checked, operated on) under the schema it was
/// read under, even after the registry has let that schema go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldRef {
    /// The schema the frame was read under.
    pub schema: Arc<HeldSchema>,
    /// Its JSON as the registry held it ([`held_text`]).
    pub text: Option<Arc<str>>,
}

/// The held schema a compact frame names, with its text.
pub fn resolve_held(fingerprint: &str) -> Result<HeldRef> {
    registry()
        .read()
        .ok()
        .and_then(|r| {
            r.get(fingerprint).map(|e| HeldRef {
                schema: e.schema.clone(),
                text: e.text.clone(),
            })
        })
        .ok_or_else(|| unknown_schema(fingerprint))
}

/// The held schema a compact frame names, or a `FrameError` naming the fingerprint.
pub fn resolve(fingerprint: &str) -> Result<Arc<HeldSchema>> {
    resolve_held(fingerprint).map(|h| h.schema)
}

fn unknown_schema(fingerprint: &str) -> Error {
    {
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A schema's canonical text (every key, as frames embed it) with `fields` fields.
    fn canonical_text(name: &str, fields: usize, description: &str) -> String {
        let fields: Vec<String> = (0..fields)
            .map(|i| format!(r#""f{i}":{{"tier":"scalar","dtype":"float32"}}"#))
            .collect();
        let text = format!(
            r#"{{"name":"{name}","description":"{description}","fields":{{{}}}}}"#,
            fields.join(",")
        );
        crate::schema::model::resolve(&crate::schema::text::parse(&text).unwrap())
            .unwrap()
            .canonical
    }

    #[test]
    fn embedded_headers_need_both_entries_and_checked_texts_are_remembered() {
        let text = canonical_text("embedded_headers", 2, "");
        let fp = crate::schema::text::fingerprint(&text);
        let mut md = BTreeMap::new();
        assert!(embedded_facts(&md).unwrap().is_none()); // no schema: compact, or refused
        md.insert(meta::SCHEMA.to_string(), text.clone());
        let err = embedded_facts(&md).unwrap_err();
        assert!(err.message().contains("no fingerprint"));
        md.insert(meta::FINGERPRINT.to_string(), fp.clone());
        let facts = embedded_facts(&md).unwrap().unwrap();
        assert_eq!(facts.specs.len(), 2);
        md.remove(meta::SCHEMA);
        let err = embedded_facts(&md).unwrap_err();
        assert!(err.message().contains("no schema"));
        // Remembered: the same text answers from the registry; another under the same
        // fingerprint is checked, and refused.
        assert!(Arc::ptr_eq(&checked_facts(&text, &fp).unwrap(), &facts));
        assert!(checked_facts(&format!("{text} "), &fp).is_err());
    }

    #[test]
    fn one_budget_bounds_learnt_schemas_checked_texts_and_views_together() {
        let budget = 4 << 20;
        let mut reg = Registry::new(budget);
        let mut views = Vec::new();
        for i in 0..24u8 {
            // Each schema three ways: learnt with its text, its checked text, a view charged.
            let text = canonical_text(&format!("one_budget_{i}"), 4, &"d".repeat(300_000));
            let resolved =
                crate::schema::model::resolve(&crate::schema::text::parse(&text).unwrap()).unwrap();
            let fp = resolved.fingerprint.clone();
            let facts = Arc::new(check_text(&text, &fp).unwrap());
            reg.remember_checked(&fp, &text, facts);
            let schema = HeldSchema {
                fingerprint: fp.clone(),
                specs: resolved.specs,
                sequence_field: None,
            };
            assert!(reg.insert(schema, Some(Arc::from(resolved.full.as_str())), true));
            assert!(reg.charge_view(&fp, 0, 2_000_000));
            views.push(fp);
            let kept: usize = reg
                .entries
                .values()
                .filter(|e| e.learnt)
                .map(|e| e.bytes)
                .sum::<usize>()
                + reg.checked.values().map(|c| c.bytes).sum::<usize>();
            assert_eq!(kept, reg.learnt_bytes);
            assert!(
                reg.learnt_bytes <= budget,
                "{} > {budget}",
                reg.learnt_bytes
            );
        }
        // Each schema costs about 2.6 MB: one fits with the checked text of the next.
        assert!(reg.entries.len() <= 2, "{}", reg.entries.len());
        // The views let go are named for Python, each once.
        let released = std::mem::take(&mut reg.released_views);
        assert_eq!(released.len() + reg.entries.len(), views.len());
        assert!(released.iter().all(|fp| !reg.entries.contains_key(fp)));
        // A view costs its entry: recharged smaller, the entry shrinks by the difference.
        let last = views.last().unwrap();
        let before = reg.learnt_bytes;
        assert!(reg.charge_view(last, 0, 1_000));
        assert_eq!(reg.learnt_bytes, before - 1_999_000);
        // Not held: nothing to charge.
        assert!(!reg.charge_view(&format!("sha256:{}", "ee".repeat(32)), 1, 10));
    }

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

    /// A schema of `fields` fields with names of `name_len` bytes, so that it keeps about
    /// `fields * name_len` bytes.
    fn large_schema(tag: u8, fields: usize, name_len: usize) -> HeldSchema {
        let specs = (0..fields)
            .map(|i| FieldSpec {
                name: format!("f{i}_{}", "x".repeat(name_len)),
                tier: crate::schema::spec::Tier::Scalar,
                dtype: crate::schema::dtype::DType::F32,
                wire_dtype: None,
                shape: vec![],
                pack_dim: 0,
            })
            .collect();
        HeldSchema {
            fingerprint: format!("sha256:{}", format!("{tag:02x}").repeat(32)),
            specs,
            sequence_field: None,
        }
    }

    #[test]
    fn learnt_schemas_stay_within_the_byte_budget_least_recently_used_out() {
        let budget = 1 << 20;
        let mut reg = Registry::new(budget);
        let loaded = large_schema(0, 64, 4096);
        assert!(reg.insert(loaded.clone(), Some(Arc::from("{}")), false));
        let schemas: Vec<HeldSchema> = (1..=40).map(|t| large_schema(t, 16, 4096)).collect();
        let each = schemas[0].kept_bytes();
        assert!(each > 64 << 10, "{each}");
        for (i, schema) in schemas.iter().enumerate() {
            assert!(reg.insert(schema.clone(), Some(Arc::from("{}")), true));
            assert!(
                reg.learnt_bytes <= budget,
                "{} > {budget}",
                reg.learnt_bytes
            );
            if i >= 2 {
                // The first learnt schema is used all along: never the least recently used.
                assert!(
                    reg.get(&schemas[0].fingerprint).is_some(),
                    "schema 0 let go"
                );
            }
        }
        let kept: usize = reg
            .entries
            .values()
            .filter(|e| e.learnt)
            .map(|e| e.bytes)
            .sum();
        assert_eq!(
            (reg.learnt_bytes, reg.learnt),
            (kept, budget / (each + 2 + 71))
        );
        // The oldest unused went first; the newest and the loaded schema (beyond the learnt
        // budget on its own) stay.
        assert!(reg.get(&schemas[1].fingerprint).is_none());
        assert!(reg.get(&schemas[39].fingerprint).is_some());
        assert!(reg.get(&loaded.fingerprint).is_some());
        // One larger than the whole budget is not held, and displaces nothing.
        let held_before = reg.learnt;
        assert!(!reg.insert(large_schema(99, 512, 4096), None, true));
        assert_eq!(reg.learnt, held_before);
    }

    #[test]
    fn learnt_schemas_past_the_default_budget_are_let_go_oldest_first() {
        // 72 schemas of 1 MB (a long description, as a peer may send) against the default
        // 64 MiB: the oldest are let go, the newest is held.
        let description = "d".repeat(1 << 20);
        let fingerprints: Vec<String> = (0..72)
            .map(|i| {
                let text = format!(
                    r#"{{"name":"budget_default_{i}","fields":{{"r":{{"tier":"scalar","dtype":"float32","description":"{description}"}}}}}}"#
                );
                let (held, fingerprint) = hold_text(&text, true).unwrap();
                assert!(held, "schema {i}");
                fingerprint
            })
            .collect();
        assert!(
            held_text(&fingerprints[0]).is_none(),
            "the oldest learnt schema is pinned"
        );
        assert!(held(&fingerprints[0]).is_none());
        let newest = held_text(&fingerprints[71]).unwrap();
        assert!(newest.len() > 1 << 20);
    }

    #[test]
    fn learnt_schemas_stay_within_the_count_cap() {
        let mut reg = Registry::new(usize::MAX);
        for i in 0..MAX_LEARNT + 10 {
            let fingerprint = format!("sha256:{i:064x}");
            let schema = HeldSchema {
                fingerprint,
                specs: vec![],
                sequence_field: None,
            };
            assert!(reg.insert(schema, None, true));
        }
        assert_eq!(reg.learnt, MAX_LEARNT);
        assert!(reg.get(&format!("sha256:{:064x}", 9)).is_none());
        assert!(reg.get(&format!("sha256:{:064x}", 10)).is_some());
    }

    #[test]
    fn a_pinned_schema_is_never_let_go_and_pinning_nothing_holds_nothing() {
        let mut reg = Registry::new(1 << 20);
        let schema = large_schema(61, 16, 4096);
        assert!(!reg.pin(&schema.fingerprint));
        assert!(reg.entries.is_empty());
        assert!(reg.insert(schema.clone(), None, true));
        assert!(reg.pin(&schema.fingerprint));
        assert_eq!((reg.learnt, reg.learnt_bytes), (0, 0));
        reg.budget = 0;
        reg.fit(0, 0);
        assert!(reg.get(&schema.fingerprint).is_some());
    }

    #[test]
    fn a_schema_is_let_go_only_once_every_pin_is_released() {
        let mut reg = Registry::new(1 << 20);
        let schema = large_schema(70, 16, 4096);
        assert!(reg.insert(schema.clone(), None, false));
        assert!(reg.pin(&schema.fingerprint));
        assert_eq!((reg.learnt, reg.learnt_bytes), (0, 0));
        assert!(reg.unpin(&schema.fingerprint));
        reg.budget = 0;
        reg.fit(0, 0);
        assert!(reg.get(&schema.fingerprint).is_some(), "one pin is left");
        reg.budget = 1 << 20;
        assert!(reg.unpin(&schema.fingerprint));
        assert_eq!(reg.learnt, 1);
        assert!(reg.learnt_bytes >= schema.kept_bytes());
        // Released, it is learnt: let go within the learnt bounds.
        reg.budget = 0;
        reg.fit(0, 0);
        assert!(reg.get(&schema.fingerprint).is_none());
        assert!(!reg.unpin(&schema.fingerprint));
    }

    #[test]
    fn a_learnt_schema_loaded_later_is_never_let_go() {
        let mut reg = Registry::new(1 << 20);
        let schema = large_schema(1, 16, 4096);
        assert!(reg.insert(schema.clone(), None, true));
        assert_eq!(reg.learnt, 1);
        assert!(reg.insert(schema.clone(), Some(Arc::from("{}")), false));
        assert_eq!((reg.learnt, reg.learnt_bytes), (0, 0));
        for t in 2..60 {
            assert!(reg.insert(large_schema(t, 16, 4096), None, true));
        }
        assert!(reg.get(&schema.fingerprint).is_some());
        // A smaller budget lets go of learnt schemas only.
        reg.budget = 0;
        reg.fit(0, 0);
        assert_eq!((reg.learnt, reg.learnt_bytes, reg.entries.len()), (0, 0, 1));
    }
}
