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

const MAGIC: &[u8; 8] = b"wstat02\n";

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

/// A directory's entry names as `getdents64(2)` gave them (each with its
/// NUL, and its `d_type`), valid while the directory's own stat key is
/// unchanged: creating, removing or renaming an entry sets the directory's
/// mtime and ctime, and nothing but the clock sets a ctime (the idea of git's
/// untracked cache, `Documentation/technical/index-format.txt`). A walk
/// then stats those names without reading the directory.
#[derive(Debug, Clone)]
pub(crate) struct Listing {
    pub key: StatKey,
    pub names: Vec<(Vec<u8>, u8)>,
}

/// Entries grouped by directory (relative path, `""` for the root) and then
/// by name: a walk looks a directory up once and its entries in a small
/// map of their own, not 50,000 scattered lookups in one large one.
#[derive(Debug, Default)]
pub(crate) struct StatCache {
    pub dirs: HashMap<String, HashMap<String, CacheEntry>>,
    /// Entries over all directories.
    pub len: usize,
    /// Listings of directories by relative path (`""` for the root).
    pub listings: HashMap<String, Listing>,
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
            let path = take_str(&mut r)?;
            let key = take_key(&mut r)?;
            if r.len() < 32 {
                return None;
            }
            let mut h = [0u8; 32];
            h.copy_from_slice(&r[..32]);
            r = &r[32..];
            cache.insert(
                path,
                CacheEntry {
                    key,
                    hash: blake3::Hash::from_bytes(h),
                },
            );
        }
        let n = take_u64(&mut r)? as usize;
        for _ in 0..n {
            let path = take_str(&mut r)?.to_string();
            let key = take_key(&mut r)?;
            let count = take_u64(&mut r)? as usize;
            let mut names = Vec::with_capacity(count.min(1 << 16));
            for _ in 0..count {
                let name = take_bytes(&mut r)?;
                let d_type = take_u64(&mut r)? as u8;
                if name.is_empty() || name.contains(&0) || name.contains(&b'/') {
                    return None;
                }
                let mut z = name.to_vec();
                z.push(0);
                names.push((z, d_type));
            }
            cache.listings.insert(path, Listing { key, names });
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
            put_key(&mut b, &e.key);
            b.extend_from_slice(e.hash.as_bytes());
        }
        b.extend_from_slice(&(self.listings.len() as u64).to_le_bytes());
        for (p, l) in &self.listings {
            b.extend_from_slice(&(p.len() as u64).to_le_bytes());
            b.extend_from_slice(p.as_bytes());
            put_key(&mut b, &l.key);
            b.extend_from_slice(&(l.names.len() as u64).to_le_bytes());
            for (z, d_type) in &l.names {
                let name = z.strip_suffix(&[0]).unwrap_or(z);
                b.extend_from_slice(&(name.len() as u64).to_le_bytes());
                b.extend_from_slice(name);
                b.extend_from_slice(&(*d_type as u64).to_le_bytes());
            }
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

fn take_bytes<'a>(r: &mut &'a [u8]) -> Option<&'a [u8]> {
    let n = take_u64(r)? as usize;
    if r.len() < n {
        return None;
    }
    let (a, rest) = r.split_at(n);
    *r = rest;
    Some(a)
}

fn take_str<'a>(r: &mut &'a [u8]) -> Option<&'a str> {
    std::str::from_utf8(take_bytes(r)?).ok()
}

fn take_key(r: &mut &[u8]) -> Option<StatKey> {
    Some(StatKey {
        size: take_u64(r)?,
        mtime_ns: take_u64(r)? as i64,
        ctime_ns: take_u64(r)? as i64,
        ino: take_u64(r)?,
        mode: take_u64(r)? as u32,
    })
}

fn put_key(b: &mut Vec<u8>, k: &StatKey) {
    for v in [
        k.size,
        k.mtime_ns as u64,
        k.ctime_ns as u64,
        k.ino,
        k.mode as u64,
    ] {
        b.extend_from_slice(&v.to_le_bytes());
    }
}
