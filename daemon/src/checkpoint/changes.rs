//! Change sets: the difference between two snapshots, with renames paired
//! up (a deleted and an added path of identical content) and unified diffs
//! for text files.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

use super::snapshot::{Entry, EntryKind};

/// What happened to one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
    /// Moved from `from_path` (same content; the mode may differ).
    Renamed,
    /// Only the permission bits changed.
    Mode,
}

impl ChangeKind {
    /// `added`, `modified`, `deleted`, `renamed`, `mode` (the proto's words).
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Added => "added",
            ChangeKind::Modified => "modified",
            ChangeKind::Deleted => "deleted",
            ChangeKind::Renamed => "renamed",
            ChangeKind::Mode => "mode",
        }
    }
}

/// One entry of a change set. Hashes are hex BLAKE3; modes are permission
/// bits; sizes are bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    pub path: String,
    pub kind: ChangeKind,
    /// Kind of the entry after the change (before it, for deletions).
    pub entry_kind: EntryKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_mode: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_mode: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_size: Option<u64>,
    /// Unified diff for text files (absent for binary, over-cap or
    /// unchanged-content entries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
}

impl FileChange {
    fn new(path: &str, kind: ChangeKind, old: Option<&Entry>, new: Option<&Entry>) -> Self {
        let hex = |e: &Entry| (e.kind != EntryKind::Dir).then(|| e.hash.to_hex().to_string());
        FileChange {
            path: path.to_string(),
            kind,
            entry_kind: new.or(old).map(|e| e.kind).unwrap_or_default(),
            from_path: None,
            old_hash: old.and_then(hex),
            new_hash: new.and_then(hex),
            old_mode: old.map(|e| e.mode),
            new_mode: new.map(|e| e.mode),
            old_size: old.map(|e| e.size),
            new_size: new.map(|e| e.size),
            patch: None,
        }
    }
}

/// The changes that turn `old` into `new`, sorted by path. Directories
/// appear only when added, deleted or re-moded (their content changes show
/// as their files' changes).
pub fn diff(old: &BTreeMap<String, Entry>, new: &BTreeMap<String, Entry>) -> Vec<FileChange> {
    let mut out = Vec::new();
    let mut a = old.iter().peekable();
    let mut b = new.iter().peekable();
    loop {
        let ord = match (a.peek(), b.peek()) {
            (None, None) => break,
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some((pa, _)), Some((pb, _))) => pa.cmp(pb),
        };
        match ord {
            std::cmp::Ordering::Less => {
                let (p, e) = a.next().expect("peeked");
                out.push(FileChange::new(p, ChangeKind::Deleted, Some(e), None));
            }
            std::cmp::Ordering::Greater => {
                let (p, e) = b.next().expect("peeked");
                out.push(FileChange::new(p, ChangeKind::Added, None, Some(e)));
            }
            std::cmp::Ordering::Equal => {
                let (p, ea) = a.next().expect("peeked");
                let (_, eb) = b.next().expect("peeked");
                let same_content =
                    ea.kind == eb.kind && (ea.kind == EntryKind::Dir || ea.hash == eb.hash);
                if same_content && ea.mode == eb.mode {
                    continue;
                }
                let kind = if same_content {
                    ChangeKind::Mode
                } else {
                    ChangeKind::Modified
                };
                out.push(FileChange::new(p, kind, Some(ea), Some(eb)));
            }
        }
    }
    pair_renames(out)
}

/// Pairs each deleted non-directory with an added one of the same kind and
/// content (first come, first paired) into one `renamed` change.
fn pair_renames(changes: Vec<FileChange>) -> Vec<FileChange> {
    let mut added: HashMap<(EntryKind, String), Vec<usize>> = HashMap::new();
    for (i, c) in changes.iter().enumerate() {
        if c.kind == ChangeKind::Added && c.entry_kind != EntryKind::Dir {
            if let Some(h) = &c.new_hash {
                added.entry((c.entry_kind, h.clone())).or_default().push(i);
            }
        }
    }
    let mut drop = vec![false; changes.len()];
    let mut renamed: HashMap<usize, (String, Option<u32>, Option<u64>)> = HashMap::new();
    for (i, c) in changes.iter().enumerate() {
        if c.kind != ChangeKind::Deleted || c.entry_kind == EntryKind::Dir {
            continue;
        }
        let Some(h) = &c.old_hash else { continue };
        if let Some(list) = added.get_mut(&(c.entry_kind, h.clone())) {
            if !list.is_empty() {
                let j = list.remove(0);
                drop[i] = true;
                renamed.insert(j, (c.path.clone(), c.old_mode, c.old_size));
            }
        }
    }
    changes
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !drop[*i])
        .map(|(i, mut c)| {
            if let Some((from, mode, size)) = renamed.remove(&i) {
                c.kind = ChangeKind::Renamed;
                c.from_path = Some(from);
                c.old_hash = c.new_hash.clone();
                c.old_mode = mode;
                c.old_size = size;
            }
            c
        })
        .collect()
}

/// Largest file (bytes) a patch is computed for.
pub(crate) const PATCH_MAX_FILE: usize = 1 << 20;
/// Largest patch kept for one file (bytes); longer ones are cut with a note.
pub(crate) const PATCH_MAX: usize = 64 << 10;

/// A unified diff of two texts (`None` when either side is not UTF-8 text
/// or too large). Paths follow git's `a/`, `b/` convention; `/dev/null`
/// stands for a missing side.
pub(crate) fn text_patch(
    old_path: Option<&str>,
    old: &[u8],
    new_path: Option<&str>,
    new: &[u8],
) -> Option<String> {
    if old.len() > PATCH_MAX_FILE
        || new.len() > PATCH_MAX_FILE
        || old.contains(&0)
        || new.contains(&0)
    {
        return None;
    }
    let (o, n) = (
        std::str::from_utf8(old).ok()?,
        std::str::from_utf8(new).ok()?,
    );
    let a = old_path
        .map(|p| format!("a/{p}"))
        .unwrap_or_else(|| "/dev/null".into());
    let b = new_path
        .map(|p| format!("b/{p}"))
        .unwrap_or_else(|| "/dev/null".into());
    let d = similar::TextDiff::from_lines(o, n);
    let mut s = d
        .unified_diff()
        .context_radius(3)
        .header(&a, &b)
        .to_string();
    if s.len() > PATCH_MAX {
        let mut cut = PATCH_MAX;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("\n[patch truncated]\n");
    }
    Some(s)
}
