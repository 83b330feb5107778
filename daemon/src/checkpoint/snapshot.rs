//! Workspace snapshots: a parallel walk through a `cap_std` directory
//! handle producing a Merkle tree of BLAKE3 hashes.
//!
//! Safety rules (the tree is agent-controlled and the daemon may be root):
//! directories are opened with `O_NOFOLLOW` relative to their parent's fd
//! (`cap_fs_ext::DirExt::open_dir_nofollow`), so a symlink is never walked
//! into; symlinks are read with `readlinkat(2)`, never followed; regular
//! files are opened with `O_NOFOLLOW|O_NONBLOCK|O_NOCTTY` and `fstat`ed, and
//! anything that is not a regular file by then (a FIFO or device swapped in)
//! is recorded as kind `other` and never read.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use cap_fs_ext::{DirExt, FollowSymlinks, OpenOptionsFollowExt, OpenOptionsSyncExt};
use cap_std::fs::{Dir, Metadata, MetadataExt, OpenOptions, OpenOptionsExt};
use serde::{Deserialize, Serialize};

use super::blobs::BlobStore;
use super::statcache::{CacheEntry, StatCache, StatKey, RACY_MARGIN_NS};
use super::{CheckpointError, CheckpointSettings, Result};

/// Stale stat-cache entries tolerated before the cache is rewritten (or a
/// sixteenth of the entries, when more).
const STALE_MAX: usize = 256;

/// What a snapshot entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    /// A regular file; hash of its bytes.
    #[default]
    File,
    /// A symbolic link; hash of its target bytes (never followed).
    Symlink,
    /// A directory; hash of its serialized listing.
    Dir,
    /// A FIFO, socket or device: recorded (type and mode), never opened,
    /// never restored.
    Other,
}

impl EntryKind {
    /// `file`, `symlink`, `dir`, `other`.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::File => "file",
            EntryKind::Symlink => "symlink",
            EntryKind::Dir => "dir",
            EntryKind::Other => "other",
        }
    }
    fn code(self) -> u8 {
        match self {
            EntryKind::File => b'f',
            EntryKind::Symlink => b'l',
            EntryKind::Dir => b'd',
            EntryKind::Other => b'o',
        }
    }
    fn from_code(c: u8) -> Option<EntryKind> {
        Some(match c {
            b'f' => EntryKind::File,
            b'l' => EntryKind::Symlink,
            b'd' => EntryKind::Dir,
            b'o' => EntryKind::Other,
            _ => return None,
        })
    }
}

/// One entry of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub kind: EntryKind,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Bytes (file content or symlink target); 0 for directories.
    pub size: u64,
    /// BLAKE3 of the content / target / listing.
    pub hash: blake3::Hash,
    /// True when the content is kept in the blob store (false for files over
    /// the size cap and for `other`).
    pub stored: bool,
}

impl Entry {
    /// Same kind, mode and content.
    pub fn same(&self, o: &Entry) -> bool {
        self.kind == o.kind && self.mode == o.mode && self.hash == o.hash
    }
}

/// A snapshot of a workspace: every recorded entry by path relative to the
/// root (`/`-separated, no leading `/`), and the root hash.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// BLAKE3 of the root directory's listing: equal roots mean equal trees.
    pub root: blake3::Hash,
    pub entries: BTreeMap<String, Entry>,
    /// Entries left out, each `path: reason` (non-UTF-8 names, unreadable
    /// files).
    pub skipped: Vec<String>,
    /// Listings of this snapshot's directories (hash, bytes), to store.
    pub(crate) trees: Vec<(blake3::Hash, Vec<u8>)>,
    /// Bytes of new blobs the walk wrote to the store.
    pub(crate) new_blob_bytes: u64,
    /// Files this walk opened and hashed (the rest came from the stat cache).
    pub hashed_files: u64,
}

impl Snapshot {
    /// Hex root hash.
    pub fn root_hex(&self) -> String {
        self.root.to_hex().to_string()
    }

    /// Sum of file sizes, bytes.
    pub fn total_bytes(&self) -> u64 {
        self.entries
            .values()
            .filter(|e| e.kind == EntryKind::File)
            .map(|e| e.size)
            .sum()
    }

    /// Paths of files whose content is not stored (over the size cap).
    pub fn not_stored(&self) -> Vec<String> {
        self.entries
            .iter()
            .filter(|(_, e)| e.kind == EntryKind::File && !e.stored)
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// Hashes of every blob this snapshot references in the store: stored
    /// file contents, symlink targets, directory listings and the root.
    pub(crate) fn blob_hashes(&self) -> HashSet<blake3::Hash> {
        let mut s: HashSet<blake3::Hash> = self
            .entries
            .values()
            .filter(|e| e.stored && e.kind != EntryKind::Other)
            .map(|e| e.hash)
            .collect();
        s.insert(self.root);
        s
    }
}

/// Where the walk puts blobs while hashing (recording a checkpoint).
pub(crate) struct Sink<'a> {
    pub blobs: &'a BlobStore,
    /// Hashes known durable in the store (the latest complete checkpoint's).
    pub known: &'a HashSet<blake3::Hash>,
    pub written: AtomicU64,
}

impl Sink<'_> {
    fn offer(&self, hash: &blake3::Hash, bytes: &[u8]) -> Result<()> {
        if !self.known.contains(hash) {
            let n = self.blobs.put(hash, bytes)?;
            self.written.fetch_add(n, Ordering::Relaxed);
        }
        Ok(())
    }
}

pub(crate) struct WalkInput<'a> {
    pub settings: &'a CheckpointSettings,
    pub cache: &'a StatCache,
    pub sink: Option<&'a Sink<'a>>,
}

pub(crate) struct WalkOutput {
    pub snapshot: Snapshot,
    /// The new stat cache, `None` when unchanged.
    pub cache: Option<StatCache>,
}

pub(crate) fn build_excludes(
    settings: &CheckpointSettings,
) -> Result<ignore::gitignore::Gitignore> {
    let mut b = ignore::gitignore::GitignoreBuilder::new("");
    for p in &settings.exclude {
        b.add_line(None, p).map_err(|e| CheckpointError::Exclude {
            pattern: p.clone(),
            message: e.to_string(),
        })?;
    }
    b.build().map_err(|e| CheckpointError::Exclude {
        pattern: settings.exclude.join(" "),
        message: e.to_string(),
    })
}

#[derive(Default)]
struct Local {
    items: Vec<(String, Entry, Option<StatKey>)>,
    skipped: Vec<String>,
    /// Files hashed whose stat key is cacheable (not racily clean).
    new_keys: usize,
    hashed: u64,
}

/// A directory still to read: its parent's handle and its name (opened
/// lazily so a wide tree does not hold thousands of fds), or the root.
struct Job {
    parent: Option<Arc<Dir>>,
    name: String,
    rel: String,
}

struct Queue {
    jobs: Vec<Job>,
    active: usize,
    stop: bool,
}

struct Walker<'a> {
    input: &'a WalkInput<'a>,
    excludes: ignore::gitignore::Gitignore,
    /// Every exclude pattern is directory-only (`target/`): no file can
    /// match, so files skip the matcher.
    dirs_only: bool,
    start_ns: i64,
    count: AtomicU64,
    queue: Mutex<Queue>,
    cv: Condvar,
}

fn entry_err(path: &str) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Entry {
        path: if path.is_empty() {
            ".".into()
        } else {
            path.to_string()
        },
        source,
    }
}

fn stat_key(md: &Metadata) -> StatKey {
    StatKey {
        size: md.size(),
        mtime_ns: md.mtime() * 1_000_000_000 + md.mtime_nsec(),
        ctime_ns: md.ctime() * 1_000_000_000 + md.ctime_nsec(),
        ino: md.ino(),
        mode: md.mode(),
    }
}

fn is_gone(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::NotFound
}

fn other_entry(md: &Metadata) -> Entry {
    let tag = format!("other:{:o}:{}", md.mode() & libc::S_IFMT, md.rdev());
    Entry {
        kind: EntryKind::Other,
        mode: md.mode() & 0o7777,
        size: 0,
        hash: blake3::hash(tag.as_bytes()),
        stored: false,
    }
}

impl Walker<'_> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, job: Job) {
        self.lock().jobs.push(job);
        self.cv.notify_one();
    }

    fn worker(&self, root: &Arc<Dir>) -> Result<Local> {
        let mut local = Local::default();
        loop {
            let job = {
                let mut q = self.lock();
                loop {
                    if q.stop {
                        return Ok(local);
                    }
                    if let Some(j) = q.jobs.pop() {
                        q.active += 1;
                        break j;
                    }
                    if q.active == 0 {
                        q.stop = true;
                        self.cv.notify_all();
                        return Ok(local);
                    }
                    q = self.cv.wait(q).unwrap_or_else(|p| p.into_inner());
                }
            };
            let res = self.process(root, job, &mut local);
            let mut q = self.lock();
            q.active -= 1;
            if res.is_err() || (q.active == 0 && q.jobs.is_empty()) {
                q.stop = true;
                self.cv.notify_all();
            }
            res?;
        }
    }

    fn process(&self, root: &Arc<Dir>, job: Job, local: &mut Local) -> Result<()> {
        let dir = match &job.parent {
            None => root.clone(),
            Some(p) => match p.open_dir_nofollow(&job.name) {
                Ok(d) => Arc::new(d),
                Err(e) if is_gone(&e) => return Ok(()),
                Err(e) => return Err(entry_err(&job.rel)(e)),
            },
        };
        let settings = self.input.settings;
        let cap = settings.max_file_bytes;
        for ent in dir.entries().map_err(entry_err(&job.rel))? {
            let ent = ent.map_err(entry_err(&job.rel))?;
            let name_os = ent.file_name();
            let Some(name) = name_os.to_str() else {
                local.skipped.push(format!(
                    "{}/{}: name is not UTF-8",
                    job.rel,
                    name_os.to_string_lossy()
                ));
                continue;
            };
            let path = if job.rel.is_empty() {
                name.to_string()
            } else {
                format!("{}/{name}", job.rel)
            };
            let md = match ent.metadata() {
                Ok(m) => m,
                Err(e) if is_gone(&e) => continue,
                Err(e) => return Err(entry_err(&path)(e)),
            };
            let ft = md.file_type();
            if (ft.is_dir() || !self.dirs_only)
                && self.excludes.matched(&path, ft.is_dir()).is_ignore()
            {
                continue;
            }
            if self.count.fetch_add(1, Ordering::Relaxed) >= settings.max_entries {
                return Err(CheckpointError::TooManyEntries {
                    limit: settings.max_entries,
                });
            }
            let mode = md.mode() & 0o7777;
            if ft.is_dir() {
                local.items.push((
                    path.clone(),
                    Entry {
                        kind: EntryKind::Dir,
                        mode,
                        size: 0,
                        hash: blake3::Hash::from_bytes([0; 32]),
                        stored: true,
                    },
                    None,
                ));
                self.push(Job {
                    parent: Some(dir.clone()),
                    name: name.to_string(),
                    rel: path,
                });
            } else if ft.is_symlink() {
                let target = match dir.read_link_contents(name) {
                    Ok(t) => t,
                    Err(e) if is_gone(&e) => continue,
                    Err(e) => return Err(entry_err(&path)(e)),
                };
                let bytes = target.as_os_str().as_encoded_bytes();
                let hash = blake3::hash(bytes);
                if let Some(s) = self.input.sink {
                    s.offer(&hash, bytes)?;
                }
                let entry = Entry {
                    kind: EntryKind::Symlink,
                    mode,
                    size: bytes.len() as u64,
                    hash,
                    stored: true,
                };
                local.items.push((path, entry, None));
            } else if ft.is_file() {
                let key = stat_key(&md);
                let hit = self.input.cache.map.get(&path).filter(|c| c.key == key);
                match hit {
                    Some(c)
                        if key.size > cap
                            || self.input.sink.is_none_or(|s| s.known.contains(&c.hash)) =>
                    {
                        let entry = Entry {
                            kind: EntryKind::File,
                            mode,
                            size: key.size,
                            hash: c.hash,
                            stored: key.size <= cap,
                        };
                        local.items.push((path, entry, Some(key)));
                    }
                    _ => self.hash_file(&dir, name, path, cap, local)?,
                }
            } else {
                local.items.push((path, other_entry(&md), None));
            }
        }
        Ok(())
    }

    fn hash_file(
        &self,
        dir: &Dir,
        name: &str,
        path: String,
        cap: u64,
        local: &mut Local,
    ) -> Result<()> {
        let mut opts = OpenOptions::new();
        opts.read(true)
            .follow(FollowSymlinks::No)
            .nonblock(true)
            .custom_flags(libc::O_NOCTTY);
        let f = match dir.open_with(name, &opts) {
            Ok(f) => f,
            Err(e) if is_gone(&e) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                local.skipped.push(format!("{path}: permission denied"));
                return Ok(());
            }
            Err(e) => return Err(entry_err(&path)(e)),
        };
        let md = f.metadata().map_err(entry_err(&path))?;
        if !md.is_file() {
            local.items.push((path, other_entry(&md), None));
            return Ok(());
        }
        let key = stat_key(&md);
        local.hashed += 1;
        let mut buf = Vec::with_capacity((key.size.min(cap) as usize).saturating_add(1));
        (&f).take(cap.saturating_add(1))
            .read_to_end(&mut buf)
            .map_err(entry_err(&path))?;
        let (hash, size, stored) = if buf.len() as u64 <= cap {
            let hash = blake3::hash(&buf);
            if let Some(s) = self.input.sink {
                s.offer(&hash, &buf)?;
            }
            (hash, buf.len() as u64, true)
        } else {
            let mut h = blake3::Hasher::new();
            h.update(&buf);
            drop(buf);
            std::io::copy(&mut &f, &mut h).map_err(entry_err(&path))?;
            (h.finalize(), h.count(), false)
        };
        let racy = key.ctime_ns + RACY_MARGIN_NS >= self.start_ns
            || key.mtime_ns + RACY_MARGIN_NS >= self.start_ns;
        let entry = Entry {
            kind: EntryKind::File,
            mode: key.mode & 0o7777,
            size,
            hash,
            stored,
        };
        local.new_keys += usize::from(!racy);
        local.items.push((path, entry, (!racy).then_some(key)));
        Ok(())
    }
}

/// True when every gitignore line is blank, a comment, or a pattern
/// ending in an unescaped `/` (which matches directories only, gitignore(5)).
fn dir_only_patterns(lines: &[String]) -> bool {
    lines.iter().all(|l| {
        let t = l.trim_end_matches(' ');
        t.is_empty() || t.starts_with('#') || (t.ends_with('/') && !t.ends_with("\\/"))
    })
}

/// Walks `root` and builds the snapshot (and, with a sink, stores every
/// blob the latest checkpoint does not already hold).
pub(crate) fn take(root: &Dir, input: &WalkInput) -> Result<WalkOutput> {
    let root = Arc::new(root.try_clone().map_err(entry_err(""))?);
    let walker = Walker {
        input,
        excludes: build_excludes(input.settings)?,
        dirs_only: dir_only_patterns(&input.settings.exclude),
        start_ns: crate::now_ms() * 1_000_000,
        count: AtomicU64::new(0),
        queue: Mutex::new(Queue {
            jobs: vec![Job {
                parent: None,
                name: String::new(),
                rel: String::new(),
            }],
            active: 0,
            stop: false,
        }),
        cv: Condvar::new(),
    };
    // available_parallelism reads the cgroup's CPU quota files on every
    // call: once per daemon is enough.
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let threads = *THREADS.get_or_init(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .clamp(1, 8)
    });
    let results: Vec<Result<Local>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|_| s.spawn(|| walker.worker(&root)))
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(CheckpointError::Invalid("snapshot worker panicked".into()))
                })
            })
            .collect()
    });
    let mut items = Vec::new();
    let mut skipped = Vec::new();
    let mut new_keys = 0;
    let mut hashed_files = 0;
    for r in results {
        let mut l = r?;
        hashed_files += l.hashed;
        items.append(&mut l.items);
        skipped.append(&mut l.skipped);
        new_keys += l.new_keys;
    }
    items.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    skipped.sort();

    // The cache changes only when a file got a new cacheable key. Entries
    // of files gone or now racily clean are stale, never wrong (a hit needs
    // the exact stat key, and a later file cannot get that ctime back): the
    // cache is rewritten for them only once they are many, so a step that
    // touches one file does not rewrite the whole cache file.
    let cached_hits = items.iter().filter(|i| i.2.is_some()).count() - new_keys;
    let stale = input.cache.map.len().saturating_sub(cached_hits);
    let cache = if new_keys == 0 && stale <= STALE_MAX.max(input.cache.map.len() / 16) {
        None
    } else {
        let map: HashMap<String, CacheEntry> = items
            .iter()
            .filter_map(|(p, e, k)| k.map(|key| (p.clone(), CacheEntry { key, hash: e.hash })))
            .collect();
        Some(StatCache { map })
    };

    let (root_hash, trees) = build_trees(&mut items);
    let new_blob_bytes = input
        .sink
        .map(|s| s.written.load(Ordering::Relaxed))
        .unwrap_or(0);
    Ok(WalkOutput {
        snapshot: Snapshot {
            root: root_hash,
            entries: items.into_iter().map(|(p, e, _)| (p, e)).collect(),
            skipped,
            trees,
            new_blob_bytes,
            hashed_files,
        },
        cache,
    })
}

fn parent_of(p: &str) -> &str {
    p.rsplit_once('/').map(|x| x.0).unwrap_or("")
}

fn name_of(p: &str) -> &str {
    p.rsplit_once('/').map(|x| x.1).unwrap_or(p)
}

/// Computes every directory's listing and hash bottom-up (items sorted by
/// path); returns the root hash and the listings.
fn build_trees(
    items: &mut [(String, Entry, Option<StatKey>)],
) -> (blake3::Hash, Vec<(blake3::Hash, Vec<u8>)>) {
    let mut dir_index: HashMap<&str, usize> = HashMap::new();
    for (i, it) in items.iter().enumerate() {
        if it.1.kind == EntryKind::Dir {
            dir_index.insert(it.0.as_str(), i);
        }
    }
    let mut children: HashMap<usize, Vec<usize>> = HashMap::new();
    let mut root_children = Vec::new();
    for (i, it) in items.iter().enumerate() {
        let parent = parent_of(&it.0);
        if parent.is_empty() {
            root_children.push(i);
        } else if let Some(&d) = dir_index.get(parent) {
            children.entry(d).or_default().push(i);
        }
    }
    let mut dirs: Vec<usize> = dir_index.values().copied().collect();
    drop(dir_index);
    dirs.sort_unstable_by_key(|&i| std::cmp::Reverse(items[i].0.matches('/').count()));
    let mut trees = Vec::with_capacity(dirs.len() + 1);
    for d in dirs {
        let kids = children.get(&d).map(Vec::as_slice).unwrap_or(&[]);
        let bytes = encode_tree(kids.iter().map(|&k| (name_of(&items[k].0), &items[k].1)));
        let h = blake3::hash(&bytes);
        items[d].1.hash = h;
        trees.push((h, bytes));
    }
    let bytes = encode_tree(
        root_children
            .iter()
            .map(|&k| (name_of(&items[k].0), &items[k].1)),
    );
    let root = blake3::hash(&bytes);
    trees.push((root, bytes));
    (root, trees)
}

const TREE_MAGIC: &[u8; 8] = b"wtree01\n";

/// Serializes one directory listing (children in name order).
fn encode_tree<'a>(kids: impl Iterator<Item = (&'a str, &'a Entry)>) -> Vec<u8> {
    let mut b = TREE_MAGIC.to_vec();
    for (name, e) in kids {
        b.push(e.kind.code());
        b.push(e.stored as u8);
        b.extend_from_slice(&e.mode.to_le_bytes());
        b.extend_from_slice(&e.size.to_le_bytes());
        b.extend_from_slice(e.hash.as_bytes());
        b.extend_from_slice(&(name.len() as u16).to_le_bytes());
        b.extend_from_slice(name.as_bytes());
    }
    b
}

pub(crate) fn decode_tree(b: &[u8]) -> Option<Vec<(String, Entry)>> {
    let mut r = b.strip_prefix(TREE_MAGIC.as_slice())?;
    let mut out = Vec::new();
    while !r.is_empty() {
        if r.len() < 1 + 1 + 4 + 8 + 32 + 2 {
            return None;
        }
        let kind = EntryKind::from_code(r[0])?;
        let stored = r[1] != 0;
        let mode = u32::from_le_bytes(r[2..6].try_into().ok()?);
        let size = u64::from_le_bytes(r[6..14].try_into().ok()?);
        let hash = blake3::Hash::from_bytes(r[14..46].try_into().ok()?);
        let nlen = u16::from_le_bytes(r[46..48].try_into().ok()?) as usize;
        r = &r[48..];
        if r.len() < nlen {
            return None;
        }
        let name = std::str::from_utf8(&r[..nlen]).ok()?.to_string();
        r = &r[nlen..];
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return None;
        }
        out.push((
            name,
            Entry {
                kind,
                mode,
                size,
                hash,
                stored,
            },
        ));
    }
    Some(out)
}

/// Rebuilds a snapshot from the listings in the store.
pub(crate) fn load(blobs: &BlobStore, root: blake3::Hash) -> Result<Snapshot> {
    let mut entries = Vec::new();
    let mut stack = vec![(String::new(), root)];
    while let Some((prefix, h)) = stack.pop() {
        let bytes = blobs.get(&h)?;
        let kids = decode_tree(&bytes).ok_or_else(|| CheckpointError::BlobCorrupt {
            hash: h.to_hex().to_string(),
        })?;
        for (name, e) in kids {
            let path = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            if e.kind == EntryKind::Dir {
                stack.push((path.clone(), e.hash));
            }
            entries.push((path, e));
        }
    }
    entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    Ok(Snapshot {
        root,
        entries: entries.into_iter().collect(),
        skipped: Vec::new(),
        trees: Vec::new(),
        new_blob_bytes: 0,
        hashed_files: 0,
    })
}
