//! The stat cache: for each regular file of a workspace, the `stat` fields
//! (size, mtime, ctime, inode, mode) it had when it was hashed, and the hash.
//! An unchanged re-snapshot then hashes nothing, like git's index (see git's
//! `Documentation/technical/racy-git.txt`). An entry whose ctime is within
//! [`RACY_MARGIN_NS`] of the walk start is not cached ("racily clean"): a
//! write in the same timestamp tick would otherwise go unseen.
//!
//! Stored as `<state>/statcache/<hex16 of BLAKE3(workspace path)>.bin`,
//! written to a temp file and renamed, with a trailing BLAKE3 checksum; a
//! torn or foreign file is ignored (everything gets rehashed), never trusted.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

/// ctime this close (ns) to the walk start makes an entry racy. Larger than
/// the kernel's coarse clock tick (at most 10 ms at HZ=100).
pub(crate) const RACY_MARGIN_NS: i64 = 50_000_000;

const MAGIC: &[u8; 8] = b"wstat01\n";

/// The fields compared to decide that a file is unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StatKey {
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub ino: u64,
    pub mode: u32,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct CacheEntry {
    pub key: StatKey,
    pub hash: blake3::Hash,
}

/// Entries grouped by directory (relative path, `""` for the root) and then
/// by name: a walk looks a directory up once and its entries in a small
/// map of their own, not 50,000 scattered lookups in one large one.
#[derive(Debug, Default)]
pub(crate) struct StatCache {
    pub dirs: HashMap<String, HashMap<String, CacheEntry>>,
    /// Entries over all directories.
    pub len: usize,
}

fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

impl StatCache {
    /// Adds the entry of the file at `path` (relative, `/`-separated).
    pub(crate) fn insert(&mut self, path: &str, e: CacheEntry) {
        let (dir, name) = split(path);
        let d = self.dirs.entry(dir.to_string()).or_default();
        if d.insert(name.to_string(), e).is_none() {
            self.len += 1;
        }
    }

    pub(crate) fn file_for(state_dir: &Path, workspace: &Path) -> PathBuf {
        let h = blake3::hash(workspace.as_os_str().as_encoded_bytes());
        state_dir
            .join("statcache")
            .join(format!("{}.bin", &h.to_hex()[..16]))
    }

    /// Loads a cache file; any problem yields an empty cache.
    pub(crate) fn load(path: &Path) -> StatCache {
        fs::read(path)
            .ok()
            .and_then(|b| Self::decode(&b))
            .unwrap_or_default()
    }

    fn decode(b: &[u8]) -> Option<StatCache> {
        if b.len() < MAGIC.len() + 8 + 32 || &b[..8] != MAGIC {
            return None;
        }
        let (body, sum) = b.split_at(b.len() - 32);
        if blake3::hash(body).as_bytes() != sum {
            return None;
        }
        let mut r = &body[8..];
        let n = take_u64(&mut r)? as usize;
        let mut cache = StatCache::default();
        for _ in 0..n {
            let plen = take_u64(&mut r)? as usize;
            if r.len() < plen {
                return None;
            }
            let path = std::str::from_utf8(&r[..plen]).ok()?.to_string();
            r = &r[plen..];
            let size = take_u64(&mut r)?;
            let mtime_ns = take_u64(&mut r)? as i64;
            let ctime_ns = take_u64(&mut r)? as i64;
            let ino = take_u64(&mut r)?;
            let mode = take_u64(&mut r)? as u32;
            if r.len() < 32 {
                return None;
            }
            let mut h = [0u8; 32];
            h.copy_from_slice(&r[..32]);
            r = &r[32..];
            cache.insert(
                &path,
                CacheEntry {
                    key: StatKey {
                        size,
                        mtime_ns,
                        ctime_ns,
                        ino,
                        mode,
                    },
                    hash: blake3::Hash::from_bytes(h),
                },
            );
        }
        r.is_empty().then_some(cache)
    }

    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(16 + self.len * 112);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&(self.len as u64).to_le_bytes());
        let all = self
            .dirs
            .iter()
            .flat_map(|(d, m)| m.iter().map(move |(n, e)| (d, n, e)));
        for (d, n, e) in all {
            let plen = if d.is_empty() {
                n.len()
            } else {
                d.len() + 1 + n.len()
            };
            b.extend_from_slice(&(plen as u64).to_le_bytes());
            if !d.is_empty() {
                b.extend_from_slice(d.as_bytes());
                b.push(b'/');
            }
            b.extend_from_slice(n.as_bytes());
            for v in [
                e.key.size,
                e.key.mtime_ns as u64,
                e.key.ctime_ns as u64,
                e.key.ino,
                e.key.mode as u64,
            ] {
                b.extend_from_slice(&v.to_le_bytes());
            }
            b.extend_from_slice(e.hash.as_bytes());
        }
        let sum = blake3::hash(&b);
        b.extend_from_slice(sum.as_bytes());
        b
    }

    /// Writes the cache atomically (temp + rename, no fsync: the file is a
    /// checksummed hint, a lost update only costs rehashing).
    pub(crate) fn save(&self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        fs::write(&tmp, self.encode())?;
        fs::rename(&tmp, path).inspect_err(|_| {
            let _ = fs::remove_file(&tmp);
        })
    }
}

fn take_u64(r: &mut &[u8]) -> Option<u64> {
    if r.len() < 8 {
        return None;
    }
    let (a, rest) = r.split_at(8);
    *r = rest;
    Some(u64::from_le_bytes(a.try_into().ok()?))
}
