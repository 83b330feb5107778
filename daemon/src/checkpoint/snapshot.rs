//! Workspace snapshots: a parallel walk through a `cap_std` directory
//! handle producing a Merkle tree of BLAKE3 hashes.
//!
//! Safety rules (the tree is agent-controlled and the daemon may be root):
//! every name comes from `getdents64(2)` of a directory fd the walk holds
//! (one component: never `/`, `.` or `..`) and is used only relative to
//! that fd, so nothing resolves outside the tree; entries are
//! `fstatat(AT_SYMLINK_NOFOLLOW)`ed; directories are opened with
//! `openat(O_DIRECTORY|O_NOFOLLOW)`, so a symlink is never walked into;
//! symlinks are read with `readlinkat(2)`, never followed; regular files
//! are opened with `O_NOFOLLOW|O_NONBLOCK|O_NOCTTY` and `fstat`ed, and
//! anything that is not a regular file by then (a FIFO or device swapped in)
//! is recorded as kind `other` and never read. The same pass can collect
//! the control paths of nested git repositories ([`NestedGitScan`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{CStr, CString, OsStr, OsString};
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use cap_std::fs::Dir;
use serde::{Deserialize, Serialize};

use super::blobs::BlobStore;
use super::statcache::{CacheEntry, Listing, StatCache, StatKey, RACY_MARGIN_NS};
use super::{CheckpointError, CheckpointSettings, Result};

/// Stale stat-cache entries tolerated before the cache is rewritten (or a
/// sixteenth of the entries, when more).
const STALE_MAX: usize = 256;

/// New cacheable keys (files and directory listings) left out of the cache
/// while they are this few and their files this small (bytes): rehashing
/// them on the next walk is cheaper than rebuilding and rewriting the
/// whole cache, which a step that edits one file would otherwise do.
const FEW_NEW: usize = 16;
const FEW_NEW_BYTES: u64 = 1 << 20;

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
    /// Also collect the nested git control paths ([`NestedGitScan`]).
    pub nested_git: bool,
}

pub(crate) struct WalkOutput {
    pub snapshot: Snapshot,
    /// With [`WalkInput::nested_git`].
    pub nested_git: Option<NestedGitScan>,
    /// How the stat cache changes, `None` when it does not.
    pub cache: Option<CacheUpdate>,
    /// Write the new cache to its file too (else it is kept in memory).
    pub persist_cache: bool,
}

/// A change of the stat cache after a walk.
pub(crate) enum CacheUpdate {
    /// A new cache (write it to its file too).
    Replace(StatCache),
    /// A few new entries and listings to add to the cache in memory.
    Add(Vec<(String, CacheEntry)>, Vec<(String, Listing)>),
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

/// (device, inode, size, mtime ns, ctime ns) of a nested git control path:
/// a command cannot write a file and restore its ctime.
pub type GitFingerprint = (u64, u64, u64, i128, i128);

/// Most directory entries a walk looks at for nested git control paths;
/// past it the collection stops and says so ([`NestedGitScan::incomplete`]).
pub const NESTED_GIT_MAX_ENTRIES: u64 = 1_000_000;

/// Git control paths of nested repositories (the rules are in
/// [`crate::session::nested_git`]), relative to the workspace root, with
/// their fingerprints; collected by the snapshot walk in the same pass, or
/// by [`scan_nested_git`]. Excluded directories (`node_modules/`) are
/// searched too: they are not recorded, but a repository planted there
/// runs its hooks all the same.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct NestedGitScan {
    pub paths: BTreeMap<PathBuf, GitFingerprint>,
    /// The walk did not see everything: it stopped at
    /// [`NESTED_GIT_MAX_ENTRIES`] entries, or failed.
    pub incomplete: bool,
}

/// Where a directory sits for the nested-git collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GitCtx {
    /// Nothing below is a control path (the workspace's own `.git`, the
    /// inside of a nested git dir other than `hooks`; or no collection).
    Ignore,
    /// An ordinary directory: a `.git` entry below the root is a nested
    /// repository.
    Normal,
    /// A nested `.git` directory.
    GitDir,
    /// The workspace's own `.git` (its hooks and config are the sandbox's
    /// protected paths): only its `modules/` and `worktrees/` are searched.
    RootGit,
    /// The `hooks` directory of a nested git dir: every entry counts.
    Hooks,
}

impl GitCtx {
    /// The context of subdirectory `name` of a directory in this context.
    fn child(self, name: &[u8], at_root: bool) -> GitCtx {
        match self {
            GitCtx::Normal if name == b".git" && at_root => GitCtx::RootGit,
            GitCtx::Normal if name == b".git" => GitCtx::GitDir,
            GitCtx::Normal => GitCtx::Normal,
            GitCtx::GitDir if name == b"hooks" => GitCtx::Hooks,
            // Submodules' and linked worktrees' git dirs live there (git
            // finds them through gitfiles): searched as ordinary
            // directories, where each is recognised as a git dir.
            GitCtx::GitDir | GitCtx::RootGit if matches!(name, b"modules" | b"worktrees") => {
                GitCtx::Normal
            }
            _ => GitCtx::Ignore,
        }
    }

    /// Whether entry `name` of a directory in this context is a control
    /// path: a nested `.git` that is not a directory (gitfile, symlink);
    /// `config`, `config.worktree`, `commondir`, and `hooks` when not a
    /// directory, of a nested git dir; every entry of its `hooks`.
    fn control(self, name: &[u8], is_dir: bool, at_root: bool) -> bool {
        match self {
            GitCtx::Normal => name == b".git" && !at_root && !is_dir,
            GitCtx::GitDir => {
                matches!(name, b"config" | b"config.worktree" | b"commondir")
                    || (name == b"hooks" && !is_dir)
            }
            GitCtx::Hooks => true,
            GitCtx::Ignore | GitCtx::RootGit => false,
        }
    }
}

/// Which of the entries that make a directory a git dir to git a listing
/// had: `HEAD`, and `objects` and `refs` or a `commondir` file naming the
/// directory that has them (git's `is_git_directory`, setup.c; by name
/// only, whatever their type: git checks them with access(2)).
#[derive(Default)]
struct BareMarks(u8);

impl BareMarks {
    fn see(&mut self, name: &[u8]) {
        self.0 |= match name {
            b"HEAD" => 1,
            b"objects" => 2,
            b"refs" => 4,
            b"commondir" => 8,
            _ => 0,
        };
    }

    fn all(&self) -> bool {
        self.0 & 1 != 0 && (self.0 & 6 == 6 || self.0 & 8 != 0)
    }
}

#[derive(Default)]
struct Local {
    items: Vec<(String, Entry, Option<StatKey>)>,
    skipped: Vec<String>,
    /// Files hashed whose stat key is cacheable (not racily clean).
    new_keys: usize,
    /// Bytes of those files.
    new_key_bytes: u64,
    /// Those files' cache entries.
    new_entries: Vec<(String, CacheEntry)>,
    hashed: u64,
    git: Vec<(PathBuf, GitFingerprint)>,
    /// Directories read whose listing is cacheable (not racily clean).
    listings: Vec<(String, Listing)>,
    /// Directories whose cached listing was used.
    listing_hits: Vec<String>,
    /// `getdents64(2)` buffer.
    buf: Vec<u8>,
}

impl Local {
    fn new() -> Local {
        Local {
            buf: vec![0; 32 << 10],
            ..Default::default()
        }
    }
}

/// A directory still to read: its parent's fd and its name (opened lazily
/// so a wide tree does not hold thousands of fds), or the root.
struct Job {
    parent: Option<Arc<OwnedFd>>,
    name: CString,
    /// Path relative to the root; UTF-8 whenever `record` is set.
    rel: OsString,
    /// Record its entries (false: an excluded directory searched only for
    /// nested git control paths).
    record: bool,
    git: GitCtx,
}

struct Queue {
    jobs: Vec<Job>,
    active: usize,
    stop: bool,
}

struct Walker<'a> {
    settings: &'a CheckpointSettings,
    cache: &'a StatCache,
    sink: Option<&'a Sink<'a>>,
    excludes: ignore::gitignore::Gitignore,
    /// Every exclude pattern is directory-only (`target/`): no file can
    /// match, so files skip the matcher.
    dirs_only: bool,
    start_ns: i64,
    count: AtomicU64,
    /// Entries looked at for nested git control paths.
    git_seen: AtomicU64,
    git_incomplete: AtomicBool,
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

fn ns(s: i64, nsec: i64) -> i64 {
    s.saturating_mul(1_000_000_000).saturating_add(nsec)
}

fn stat_key(st: &libc::stat) -> StatKey {
    StatKey {
        size: st.st_size as u64,
        mtime_ns: ns(st.st_mtime, st.st_mtime_nsec),
        ctime_ns: ns(st.st_ctime, st.st_ctime_nsec),
        ino: st.st_ino,
        mode: st.st_mode,
    }
}

fn git_fingerprint(st: &libc::stat) -> GitFingerprint {
    (
        st.st_dev,
        st.st_ino,
        st.st_size as u64,
        st.st_mtime as i128 * 1_000_000_000 + st.st_mtime_nsec as i128,
        st.st_ctime as i128 * 1_000_000_000 + st.st_ctime_nsec as i128,
    )
}

fn is_gone(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::NotFound
}

fn other_entry(st_mode: u32, rdev: u64) -> Entry {
    let tag = format!("other:{:o}:{}", st_mode & libc::S_IFMT, rdev);
    Entry {
        kind: EntryKind::Other,
        mode: st_mode & 0o7777,
        size: 0,
        hash: blake3::hash(tag.as_bytes()),
        stored: false,
    }
}

/// `openat(dir, name, O_RDONLY|O_DIRECTORY|O_NOFOLLOW|O_CLOEXEC)`: `name`
/// is one component (from `getdents64`, never `/`, `.` or `..`), so the
/// result is a real directory inside `dir` — a symlink fails with `ELOOP`,
/// anything else with `ENOTDIR` (openat(2)).
fn open_dir_at(dir: BorrowedFd, name: &CStr) -> std::io::Result<OwnedFd> {
    // SAFETY: a valid fd and a NUL-terminated name.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fstat(2)`.
fn fstat(fd: BorrowedFd) -> std::io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a valid fd and a buffer of the right size.
    if unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fstat succeeded, so it filled `st`.
    Ok(unsafe { st.assume_init() })
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)` of one component.
fn lstat_at(dir: BorrowedFd, name: &CStr) -> std::io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a valid fd, a NUL-terminated name, a buffer of the right size.
    let r = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fstatat succeeded, so it filled `st`.
    Ok(unsafe { st.assume_init() })
}

/// `readlinkat(2)` of one component: the target's bytes (at most
/// `PATH_MAX - 1`, so a `PATH_MAX + 1` buffer is never filled).
fn read_link_at(dir: BorrowedFd, name: &CStr) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: a valid fd, a NUL-terminated name, `buf.len()` writable bytes.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

/// One `getdents64(2)` call into `buf`: bytes filled, 0 at the end.
fn getdents(dir: BorrowedFd, buf: &mut [u8]) -> std::io::Result<usize> {
    // SAFETY: a valid fd and `buf.len()` writable bytes.
    let n = unsafe {
        libc::syscall(
            libc::SYS_getdents64,
            dir.as_raw_fd(),
            buf.as_mut_ptr(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// The records of one `getdents64` buffer: (d_type, NUL-terminated name)
/// of each `struct linux_dirent64` (d_ino u64, d_off i64, d_reclen u16,
/// d_type u8, d_name; getdents64(2)).
fn dirents(buf: &[u8]) -> impl Iterator<Item = std::io::Result<(u8, &CStr)>> + '_ {
    let mut off = 0usize;
    std::iter::from_fn(move || {
        if off >= buf.len() {
            return None;
        }
        let bad = || {
            Some(Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "malformed getdents64 record",
            )))
        };
        let Some(rec) = buf.get(off..off + 19) else {
            off = buf.len();
            return bad();
        };
        let reclen = u16::from_ne_bytes([rec[16], rec[17]]) as usize;
        let d_type = rec[18];
        let name = buf
            .get(off + 19..off + reclen)
            .and_then(|n| CStr::from_bytes_until_nul(n).ok());
        off = if reclen < 20 { buf.len() } else { off + reclen };
        match name {
            Some(n) => Some(Ok((d_type, n))),
            None => bad(),
        }
    })
}

fn join_os(rel: &OsStr, name: &[u8]) -> OsString {
    let mut p = rel.as_bytes().to_vec();
    if !p.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    OsString::from_vec(p)
}

impl Walker<'_> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, job: Job) {
        self.lock().jobs.push(job);
        self.cv.notify_one();
    }

    fn worker(&self, root: &Arc<OwnedFd>) -> Result<Local> {
        self.work(root, Local::new())
    }

    /// Takes jobs until the walk is done, adding to `local`.
    fn work(&self, root: &Arc<OwnedFd>, mut local: Local) -> Result<Local> {
        loop {
            let job = {
                let mut q = self.lock();
                loop {
                    if q.stop {
                        break None;
                    }
                    if let Some(j) = q.jobs.pop() {
                        q.active += 1;
                        break Some(j);
                    }
                    if q.active == 0 {
                        q.stop = true;
                        self.cv.notify_all();
                        break None;
                    }
                    q = self.cv.wait(q).unwrap_or_else(|p| p.into_inner());
                }
            };
            let Some(job) = job else {
                // Sorted here, in parallel; `take` merges the runs.
                local.items.sort_unstable_by(|a, b| a.0.cmp(&b.0));
                return Ok(local);
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

    fn process(&self, root: &Arc<OwnedFd>, job: Job, local: &mut Local) -> Result<()> {
        let rel_str = job.rel.to_str().unwrap_or("");
        let dir = match &job.parent {
            None => root.clone(),
            Some(p) => match open_dir_at(p.as_fd(), &job.name) {
                Ok(d) => Arc::new(d),
                Err(e) if is_gone(&e) => return Ok(()),
                // Searched for nested git only: a directory that cannot be
                // read makes the search incomplete (git needs only search
                // permission to use what is inside: fail closed).
                Err(_) if !job.record => {
                    self.git_incomplete.store(true, Ordering::Relaxed);
                    return Ok(());
                }
                Err(e) => return Err(entry_err(rel_str)(e)),
            },
        };
        let dcache = self.cache.dirs.get(rel_str).filter(|_| job.record);
        // A recorded directory whose stat key matches its cached listing is
        // not read again; its key is taken before reading, so an entry
        // added meanwhile changes the key the next walk compares.
        let mut fresh: Option<Listing> = None;
        // Which of a bare repository's HEAD, objects, refs this ordinary
        // directory has (see `bare_repo`).
        let mut bare = BareMarks::default();
        if job.record {
            let key = stat_key(&fstat(dir.as_fd()).map_err(entry_err(rel_str))?);
            if let Some(l) = self.cache.listings.get(rel_str).filter(|l| l.key == key) {
                for (name, d_type) in &l.names {
                    let name = CStr::from_bytes_with_nul(name)
                        .map_err(|_| entry_err(rel_str)(std::io::ErrorKind::InvalidData.into()))?;
                    bare.see(name.to_bytes());
                    self.entry(&dir, &job, dcache, *d_type, name, local)?;
                }
                local.listing_hits.push(rel_str.to_string());
                if job.git == GitCtx::Normal && bare.all() {
                    self.bare_repo(&dir, &job, local);
                }
                return Ok(());
            }
            if !self.racy(&key) {
                fresh = Some(Listing {
                    key,
                    names: Vec::new(),
                });
            }
        }
        let mut buf = std::mem::take(&mut local.buf);
        let res = (|| loop {
            let n = match getdents(dir.as_fd(), &mut buf) {
                Ok(n) => n,
                Err(_) if !job.record => {
                    self.git_incomplete.store(true, Ordering::Relaxed);
                    return Ok(());
                }
                Err(e) => return Err(entry_err(rel_str)(e)),
            };
            if n == 0 {
                return Ok(());
            }
            for d in dirents(&buf[..n]) {
                let (d_type, name) = d.map_err(entry_err(rel_str))?;
                if let Some(l) = &mut fresh {
                    if !matches!(name.to_bytes(), b"." | b"..") {
                        l.names.push((name.to_bytes_with_nul().to_vec(), d_type));
                    }
                }
                bare.see(name.to_bytes());
                self.entry(&dir, &job, dcache, d_type, name, local)?;
            }
        })();
        local.buf = buf;
        if let (Ok(()), Some(l)) = (&res, fresh) {
            local.listings.push((rel_str.to_string(), l));
        }
        if res.is_ok() && job.git == GitCtx::Normal && bare.all() {
            self.bare_repo(&dir, &job, local);
        }
        res
    }

    /// A directory that git would take for a bare repository (it has
    /// `HEAD`, and `objects` and `refs` or a `commondir`; [`BareMarks`]) is a nested
    /// git dir of its own, `.git` or not: git discovers it when run inside
    /// (unless `safe.bareRepository=explicit`), and reads its `config` and
    /// `hooks`. Its control paths are collected as a `.git` dir's are; its
    /// other subdirectories stay ordinary ones.
    fn bare_repo(&self, dir: &Arc<OwnedFd>, job: &Job, local: &mut Local) {
        for name in [c"config", c"config.worktree", c"commondir", c"hooks"] {
            let Ok(st) = lstat_at(dir.as_fd(), name) else {
                continue;
            };
            let bytes = name.to_bytes();
            let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
            if GitCtx::GitDir.control(bytes, is_dir, false) {
                local.git.push((
                    PathBuf::from(join_os(&job.rel, bytes)),
                    git_fingerprint(&st),
                ));
            } else if is_dir {
                // `hooks`: every entry counts (searched on its own; a
                // recorded walk reads it as an ordinary directory too).
                self.push(Job {
                    parent: Some(dir.clone()),
                    name: name.to_owned(),
                    rel: join_os(&job.rel, bytes),
                    record: false,
                    git: GitCtx::Hooks,
                });
            }
        }
    }

    /// Changed within [`RACY_MARGIN_NS`] of the walk start: not cacheable.
    fn racy(&self, key: &StatKey) -> bool {
        key.ctime_ns + RACY_MARGIN_NS >= self.start_ns
            || key.mtime_ns + RACY_MARGIN_NS >= self.start_ns
    }

    fn entry(
        &self,
        dir: &Arc<OwnedFd>,
        job: &Job,
        dcache: Option<&HashMap<String, CacheEntry>>,
        d_type: u8,
        cname: &CStr,
        local: &mut Local,
    ) -> Result<()> {
        let bytes = cname.to_bytes();
        if bytes == b"." || bytes == b".." {
            return Ok(());
        }
        let at_root = job.rel.is_empty();
        let mut ctx = job.git;
        if ctx != GitCtx::Ignore
            && self.git_seen.fetch_add(1, Ordering::Relaxed) >= NESTED_GIT_MAX_ENTRIES
        {
            self.git_incomplete.store(true, Ordering::Relaxed);
            ctx = GitCtx::Ignore;
        }
        let rel_str = job.rel.to_str();
        let name = std::str::from_utf8(bytes).ok();
        // The path (UTF-8) when this entry may be recorded.
        let path = match (job.record, rel_str, name) {
            (true, Some(""), Some(n)) => Some(n.to_string()),
            (true, Some(r), Some(n)) => Some(format!("{r}/{n}")),
            (true, _, None) => {
                local.skipped.push(format!(
                    "{}/{}: name is not UTF-8",
                    job.rel.to_string_lossy(),
                    String::from_utf8_lossy(bytes)
                ));
                None
            }
            _ => None,
        };
        if path.is_none() && ctx == GitCtx::Ignore {
            return Ok(());
        }
        let st = if path.is_some() || d_type == libc::DT_UNKNOWN {
            match lstat_at(dir.as_fd(), cname) {
                Ok(s) => Some(s),
                Err(e) if is_gone(&e) => return Ok(()),
                Err(e) => match &path {
                    Some(p) => return Err(entry_err(p)(e)),
                    None => return Ok(()),
                },
            }
        } else {
            None
        };
        let is_dir = match &st {
            Some(s) => s.st_mode & libc::S_IFMT == libc::S_IFDIR,
            None => d_type == libc::DT_DIR,
        };
        let path = path.filter(|p| {
            !((is_dir || !self.dirs_only) && self.excludes.matched(p, is_dir).is_ignore())
        });
        if ctx.control(bytes, is_dir, at_root) {
            let st = match st {
                Some(s) => Some(s),
                None => lstat_at(dir.as_fd(), cname).ok(),
            };
            if let Some(s) = st {
                local
                    .git
                    .push((PathBuf::from(join_os(&job.rel, bytes)), git_fingerprint(&s)));
            }
        }
        let child_ctx = ctx.child(bytes, at_root);
        let (Some(path), Some(st)) = (path, st) else {
            // Not recorded: only a directory that may hold nested git
            // control paths is entered.
            if is_dir && child_ctx != GitCtx::Ignore {
                self.push(Job {
                    parent: Some(dir.clone()),
                    name: cname.to_owned(),
                    rel: join_os(&job.rel, bytes),
                    record: false,
                    git: child_ctx,
                });
            }
            return Ok(());
        };
        if self.count.fetch_add(1, Ordering::Relaxed) >= self.settings.max_entries {
            return Err(CheckpointError::TooManyEntries {
                limit: self.settings.max_entries,
            });
        }
        let cap = self.settings.max_file_bytes;
        let mode = st.st_mode & 0o7777;
        match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => {
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
                    name: cname.to_owned(),
                    rel: OsString::from(path),
                    record: true,
                    git: child_ctx,
                });
            }
            libc::S_IFLNK => {
                let target = match read_link_at(dir.as_fd(), cname) {
                    Ok(t) => t,
                    Err(e) if is_gone(&e) => return Ok(()),
                    Err(e) => return Err(entry_err(&path)(e)),
                };
                let hash = blake3::hash(&target);
                if let Some(s) = self.sink {
                    s.offer(&hash, &target)?;
                }
                let entry = Entry {
                    kind: EntryKind::Symlink,
                    mode,
                    size: target.len() as u64,
                    hash,
                    stored: true,
                };
                local.items.push((path, entry, None));
            }
            libc::S_IFREG => {
                let key = stat_key(&st);
                let hit = dcache
                    .and_then(|d| d.get(name.unwrap_or_default()))
                    .filter(|c| c.key == key);
                match hit {
                    Some(c)
                        if key.size > cap
                            || self.sink.is_none_or(|s| s.known.contains(&c.hash)) =>
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
                    _ => self.hash_file(dir.as_fd(), cname, path, cap, local)?,
                }
            }
            _ => local
                .items
                .push((path, other_entry(st.st_mode, st.st_rdev), None)),
        }
        Ok(())
    }

    fn hash_file(
        &self,
        dir: BorrowedFd,
        name: &CStr,
        path: String,
        cap: u64,
        local: &mut Local,
    ) -> Result<()> {
        // O_NOFOLLOW: a symlink swapped in fails (ELOOP); O_NONBLOCK: a FIFO
        // swapped in does not block the open (fstat then says what it is).
        // SAFETY: a valid fd and a NUL-terminated one-component name.
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                name.as_ptr(),
                libc::O_RDONLY
                    | libc::O_NOFOLLOW
                    | libc::O_NONBLOCK
                    | libc::O_NOCTTY
                    | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            if is_gone(&e) {
                return Ok(());
            }
            if e.kind() == std::io::ErrorKind::PermissionDenied {
                local.skipped.push(format!("{path}: permission denied"));
                return Ok(());
            }
            return Err(entry_err(&path)(e));
        }
        // SAFETY: `fd` was just opened and is owned by nobody else.
        let f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        let md = f.metadata().map_err(entry_err(&path))?;
        if !md.is_file() {
            local
                .items
                .push((path, other_entry(md.mode(), md.rdev()), None));
            return Ok(());
        }
        let key = StatKey {
            size: md.size(),
            mtime_ns: ns(md.mtime(), md.mtime_nsec()),
            ctime_ns: ns(md.ctime(), md.ctime_nsec()),
            ino: md.ino(),
            mode: md.mode(),
        };
        local.hashed += 1;
        let mut buf = Vec::with_capacity((key.size.min(cap) as usize).saturating_add(1));
        (&f).take(cap.saturating_add(1))
            .read_to_end(&mut buf)
            .map_err(entry_err(&path))?;
        let (hash, size, stored) = if buf.len() as u64 <= cap {
            let hash = blake3::hash(&buf);
            if let Some(s) = self.sink {
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
        let racy = self.racy(&key);
        let entry = Entry {
            kind: EntryKind::File,
            mode: key.mode & 0o7777,
            size,
            hash,
            stored,
        };
        local.new_keys += usize::from(!racy);
        if !racy {
            local.new_key_bytes += size;
            local
                .new_entries
                .push((path.clone(), CacheEntry { key, hash }));
        }
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

/// Runs the parallel walk from `root` (a fresh open file description of
/// it, so the caller's handle keeps its offset) and returns each worker's
/// results.
fn run_walk(root: &Dir, walker: &Walker, record: bool, git: GitCtx) -> Result<Vec<Local>> {
    let dot = c".";
    let root_fd = open_dir_at(root.as_fd(), dot).map_err(entry_err(""))?;
    let root_fd = Arc::new(root_fd);
    walker.lock().jobs.push(Job {
        parent: None,
        name: CString::default(),
        rel: OsString::new(),
        record,
        git,
    });
    // available_parallelism reads the cgroup's CPU quota files on every
    // call: once per daemon is enough.
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let threads = *THREADS.get_or_init(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .clamp(1, 8)
    });
    // The root on this thread: a workspace without subdirectories (or an
    // unchanged one whose listings are cached) needs no other thread.
    let mut first = Local::new();
    let root_job = walker.lock().jobs.pop();
    if let Some(job) = root_job {
        walker.process(&root_fd, job, &mut first)?;
    }
    if walker.lock().jobs.is_empty() {
        first.items.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        return Ok(vec![first]);
    }
    let results: Vec<Result<Local>> = std::thread::scope(|s| {
        let hs: Vec<_> = (1..threads)
            .map(|_| s.spawn(|| walker.worker(&root_fd)))
            .collect();
        let mine = walker.work(&root_fd, first);
        std::iter::once(mine)
            .chain(hs.into_iter().map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(CheckpointError::Invalid("snapshot worker panicked".into()))
                })
            }))
            .collect()
    });
    results.into_iter().collect()
}

fn new_walker<'a>(input: &WalkInput<'a>) -> Result<Walker<'a>> {
    Ok(Walker {
        settings: input.settings,
        cache: input.cache,
        sink: input.sink,
        excludes: build_excludes(input.settings)?,
        dirs_only: dir_only_patterns(&input.settings.exclude),
        start_ns: crate::now_ms() * 1_000_000,
        count: AtomicU64::new(0),
        git_seen: AtomicU64::new(0),
        git_incomplete: AtomicBool::new(false),
        queue: Mutex::new(Queue {
            jobs: Vec::new(),
            active: 0,
            stop: false,
        }),
        cv: Condvar::new(),
    })
}

fn nested_git_of(walker: &Walker, locals: &mut [Local]) -> NestedGitScan {
    NestedGitScan {
        paths: locals
            .iter_mut()
            .flat_map(|l| std::mem::take(&mut l.git))
            .collect(),
        incomplete: walker.git_incomplete.load(Ordering::Relaxed),
    }
}

/// Walks `root` recording nothing, for nested git control paths only
/// (every directory but the root's own `.git` is searched, symlinks are
/// never followed). An unreadable root gives an empty scan.
pub fn scan_nested_git(root: &Dir) -> NestedGitScan {
    let settings = CheckpointSettings::default();
    let cache = StatCache::default();
    let input = WalkInput {
        settings: &settings,
        cache: &cache,
        sink: None,
        nested_git: true,
    };
    // A walk that fails found nothing it can vouch for: incomplete, never
    // an empty, complete scan (which would read as "nothing planted").
    let failed = NestedGitScan {
        incomplete: true,
        ..Default::default()
    };
    let Ok(walker) = new_walker(&input) else {
        return failed;
    };
    match run_walk(root, &walker, false, GitCtx::Normal) {
        Ok(mut locals) => nested_git_of(&walker, &mut locals),
        Err(_) => failed,
    }
}

/// Walks `root` and builds the snapshot (and, with a sink, stores every
/// blob the latest checkpoint does not already hold; with
/// `input.nested_git`, collects the nested git control paths in the same
/// pass).
pub(crate) fn take(root: &Dir, input: &WalkInput) -> Result<WalkOutput> {
    let walker = new_walker(input)?;
    let git = if input.nested_git {
        GitCtx::Normal
    } else {
        GitCtx::Ignore
    };
    let mut locals = run_walk(root, &walker, true, git)?;
    let nested_git = input
        .nested_git
        .then(|| nested_git_of(&walker, &mut locals));
    let mut items = Vec::new();
    let mut skipped = Vec::new();
    let mut new_keys = 0;
    let mut new_key_bytes = 0;
    let mut new_entries = Vec::new();
    let mut hashed_files = 0;
    let mut listings = Vec::new();
    let mut listing_hits = Vec::new();
    for mut l in locals {
        hashed_files += l.hashed;
        items.append(&mut l.items);
        skipped.append(&mut l.skipped);
        new_keys += l.new_keys;
        new_key_bytes += l.new_key_bytes;
        new_entries.append(&mut l.new_entries);
        listings.append(&mut l.listings);
        listing_hits.append(&mut l.listing_hits);
    }
    // One sorted run per worker: the stable sort merges them.
    items.sort_by(|a, b| a.0.cmp(&b.0));
    skipped.sort();

    // The cache changes only when a file or a directory listing got a new
    // cacheable key. Entries of files gone or now racily clean are stale,
    // never wrong (a hit needs the exact stat key, and a later file cannot
    // get that ctime back): the cache is rewritten for them only once they
    // are many, so a step that touches one file does not rewrite the whole
    // cache file; nor do a few new keys of small files ([`FEW_NEW`]).
    let cached_hits = items.iter().filter(|i| i.2.is_some()).count() - new_keys;
    let stale = input.cache.len.saturating_sub(cached_hits)
        + input
            .cache
            .listings
            .len()
            .saturating_sub(listing_hits.len());
    let few_new = new_keys + listings.len() <= FEW_NEW && new_key_bytes <= FEW_NEW_BYTES;
    let many_stale = stale > STALE_MAX.max(input.cache.len / 16);
    let persist_cache = !few_new || many_stale;
    let cache = if new_keys == 0 && listings.is_empty() && !many_stale {
        None
    } else if !persist_cache {
        // A few new keys: added to the cache in place, not a rebuild of it.
        Some(CacheUpdate::Add(new_entries, listings))
    } else {
        let mut c = StatCache::default();
        for (p, e, k) in &items {
            if let Some(key) = k {
                c.insert(
                    p,
                    CacheEntry {
                        key: *key,
                        hash: e.hash,
                    },
                );
            }
        }
        c.listings = listings.into_iter().collect();
        for h in listing_hits {
            if let Some(l) = input.cache.listings.get(&h) {
                c.listings.insert(h, l.clone());
            }
        }
        Some(CacheUpdate::Replace(c))
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
        persist_cache,
        nested_git,
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
    // Directory ordinals: 0 is the root, then each directory item.
    let mut dir_of: HashMap<&str, usize> = HashMap::new();
    let mut dir_item: Vec<usize> = vec![usize::MAX];
    dir_of.insert("", 0);
    for (i, it) in items.iter().enumerate() {
        if it.1.kind == EntryKind::Dir {
            dir_of.insert(it.0.as_str(), dir_item.len());
            dir_item.push(i);
        }
    }
    // Children in path order, which is name order within one directory.
    // Sorted siblings are mostly adjacent: reuse the last parent's lookup.
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); dir_item.len()];
    let mut last: Option<(&str, Option<usize>)> = None;
    for (i, it) in items.iter().enumerate() {
        let parent = parent_of(&it.0);
        let d = match last {
            Some((p, d)) if p == parent => d,
            _ => {
                let d = dir_of.get(parent).copied();
                last = Some((parent, d));
                d
            }
        };
        if let Some(d) = d {
            children[d].push(i);
        }
    }
    drop(dir_of);
    let mut order: Vec<(usize, usize)> = (1..dir_item.len())
        .map(|d| (items[dir_item[d]].0.matches('/').count(), d))
        .collect();
    order.sort_unstable_by(|a, b| b.cmp(a));
    order.push((0, 0));
    let mut trees = Vec::with_capacity(order.len());
    let mut root = blake3::Hash::from_bytes([0; 32]);
    for (_, d) in order {
        let bytes = encode_tree(
            children[d]
                .iter()
                .map(|&k| (name_of(&items[k].0), &items[k].1)),
        );
        let h = blake3::hash(&bytes);
        if d == 0 {
            root = h;
        } else {
            items[dir_item[d]].1.hash = h;
        }
        trees.push((h, bytes));
    }
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
