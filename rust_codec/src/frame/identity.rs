//! Segment identity: a packed field's optional `f.seg_ids` table, one 16-byte id per physical
//! segment (all zeros: no identity). Two segments with one id are one segment wherever they
//! travel: an encode or a frame operation stores them once, so a gather after decode stores a
//! shared image once, as the gather of the source objects does. The table comes from the
//! producer (NeMo-RL's segment provenance, a decoded value's ids); frames without it read and
//! gather as before (segments shared by address within one source only).

use std::collections::HashMap;

use crate::error::Result;
use crate::frame_err;
use crate::schema::spec::names;

/// Bytes of one segment's id.
pub const ID_LEN: usize = 16;

/// One physical segment's identity; [`NO_ID`] when it has none.
pub type SegId = [u8; ID_LEN];

/// The id of a segment without identity.
pub const NO_ID: SegId = [0; ID_LEN];

/// The id as lowercase hex, for messages.
pub fn hex(id: &SegId) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// The ids in `bytes` (field `name`'s id table, its length already checked to be one id per
/// segment), checked: no id (other than [`NO_ID`]) on two segments (a frame that names two
/// segments one would merge different media on a gather).
pub(crate) fn parse_ids(bytes: &[u8], name: &str) -> Result<Vec<SegId>> {
    let mut ids = Vec::with_capacity(bytes.len() / ID_LEN);
    let mut first: HashMap<SegId, usize> = HashMap::new();
    for (s, chunk) in bytes.chunks_exact(ID_LEN).enumerate() {
        let mut id = NO_ID;
        id.copy_from_slice(chunk);
        if id != NO_ID {
            if let Some(&earlier) = first.get(&id) {
                return Err(frame_err!(
                    "field {name:?}: {}[{s}] is {}, the id of segment {earlier} too (one id \
                     names one segment)",
                    names::seg_ids(name),
                    hex(&id)
                )
                .field(name)
                .segment(s as u64));
            }
            first.insert(id, s);
        }
        ids.push(id);
    }
    Ok(ids)
}

/// The ids of a field's physical segments as a frame stores them: `None` when no segment has
/// one (the frame then has no table, as before identity existed).
pub(crate) fn table_bytes(ids: &[SegId]) -> Option<Vec<u8>> {
    ids.iter()
        .any(|id| *id != NO_ID)
        .then(|| ids.iter().flatten().copied().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_table_without_an_id() {
        assert_eq!(table_bytes(&[NO_ID, NO_ID]), None);
        let mut a = NO_ID;
        a[3] = 7;
        let bytes = table_bytes(&[NO_ID, a]).unwrap_or_default();
        assert_eq!(bytes.len(), 32);
        assert_eq!(bytes[19], 7);
        assert_eq!(hex(&a), "00000007000000000000000000000000");
    }
}
