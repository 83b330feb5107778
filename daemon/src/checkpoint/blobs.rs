//! The content-addressed blob store: `<state>/blobs/ab/cdef…` where
//! `abcdef…` is the hex BLAKE3 of the content. Writes go to
//! `<state>/blobs/tmp/` and are renamed into place (rename(2) is atomic);
//! durability comes once per checkpoint, before its record is written: one
//! `syncfs(2)` ([`BlobStore::sync`]) when it wrote many blobs, an fsync of
//! each new blob and its directory when only a few
//! ([`BlobStore::sync_blobs`]). Reads verify the hash, so a blob torn by a crash
//! is detected, never returned.

use std::collections::HashSet;
use std::fs;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::{store_err, CheckpointError, Result};

/// Most blobs made durable one by one by [`BlobStore::sync_blobs`].
pub(crate) const FSYNC_MAX_BLOBS: usize = 64;

pub(crate) struct BlobStore {
    root: PathBuf,
    tmp: PathBuf,
}

impl BlobStore {
    /// Opens (creating) `<state_dir>/blobs` and its `tmp/`.
    pub(crate) fn open(state_dir: &Path) -> Result<BlobStore> {
        let root = state_dir.join("blobs");
        let tmp = root.join("tmp");
        fs::create_dir_all(&tmp).map_err(store_err(&tmp))?;
        Ok(BlobStore { root, tmp })
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, hash: &blake3::Hash) -> PathBuf {
        let hex = hash.to_hex();
        self.root.join(&hex[..2]).join(&hex[2..])
    }

    /// True when a blob of that hash exists with the right content.
    fn verify(&self, hash: &blake3::Hash, len: u64) -> bool {
        let path = self.path(hash);
        match fs::symlink_metadata(&path) {
            Ok(m) if m.is_file() && m.len() == len => {}
            _ => return false,
        }
        fs::read(&path)
            .map(|b| blake3::hash(&b) == *hash)
            .unwrap_or(false)
    }

    /// Stores `bytes` under `hash` (the caller computed it). Returns the
    /// number of bytes written: 0 when an intact blob was already there.
    /// A blob present but torn (left by a crash before a `syncfs`) is
    /// rewritten. Errors: [`CheckpointError::Store`] (e.g. `ENOSPC`).
    pub(crate) fn put(&self, hash: &blake3::Hash, bytes: &[u8]) -> Result<u64> {
        if self.verify(hash, bytes.len() as u64) {
            return Ok(0);
        }
        let tmp = self.tmp.join(crate::new_id());
        let write = || -> std::io::Result<()> {
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(bytes)?;
            Ok(())
        };
        if let Err(e) = write() {
            let _ = fs::remove_file(&tmp);
            return Err(store_err(&tmp)(e));
        }
        let dest = self.path(hash);
        let parent = dest.parent().unwrap_or(&self.root);
        match fs::create_dir(parent) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return Err(store_err(parent)(e));
            }
        }
        if let Err(e) = fs::rename(&tmp, &dest) {
            let _ = fs::remove_file(&tmp);
            return Err(store_err(&dest)(e));
        }
        Ok(bytes.len() as u64)
    }

    /// Reads and verifies a blob. Errors: [`CheckpointError::BlobCorrupt`]
    /// when missing or not matching its hash.
    pub(crate) fn get(&self, hash: &blake3::Hash) -> Result<Vec<u8>> {
        let corrupt = || CheckpointError::BlobCorrupt {
            hash: hash.to_hex().to_string(),
        };
        let bytes = fs::read(self.path(hash)).map_err(|_| corrupt())?;
        if blake3::hash(&bytes) != *hash {
            return Err(corrupt());
        }
        Ok(bytes)
    }

    /// Makes the blobs `hashes` durable, content and directory entries:
    /// up to [`FSYNC_MAX_BLOBS`] of them by `fdatasync(2)` of each blob,
    /// then `fsync(2)` of each shard directory holding one and of the store
    /// root (a shard this checkpoint created); more, by one [`Self::sync`]
    /// (one `syncfs(2)` beats many fsyncs; but on a filesystem shared with
    /// busy writers a `syncfs` also flushes all of their dirty data).
    /// Errors: [`CheckpointError::Store`].
    pub(crate) fn sync_blobs(&self, hashes: &[blake3::Hash]) -> Result<()> {
        if hashes.is_empty() {
            return Ok(());
        }
        if hashes.len() > FSYNC_MAX_BLOBS {
            return self.sync();
        }
        let mut dirs = std::collections::BTreeSet::new();
        for h in hashes {
            let p = self.path(h);
            let f = fs::File::open(&p).map_err(store_err(&p))?;
            f.sync_data().map_err(store_err(&p))?;
            if let Some(d) = p.parent() {
                dirs.insert(d.to_path_buf());
            }
        }
        dirs.insert(self.root.clone());
        for d in dirs {
            let f = fs::File::open(&d).map_err(store_err(&d))?;
            f.sync_all().map_err(store_err(&d))?;
        }
        Ok(())
    }

    /// `syncfs(2)` on the store's filesystem: makes every blob written so
    /// far (data and directory entries) durable.
    pub(crate) fn sync(&self) -> Result<()> {
        let dir = fs::File::open(&self.root).map_err(store_err(&self.root))?;
        nix::unistd::syncfs(&dir)
            .map_err(|e| store_err(&self.root)(std::io::Error::from_raw_os_error(e as i32)))
    }

    /// Removes every temp file (call with the store lock held exclusively).
    pub(crate) fn clean_tmp(&self) -> Result<()> {
        for e in fs::read_dir(&self.tmp).map_err(store_err(&self.tmp))? {
            let e = e.map_err(store_err(&self.tmp))?;
            let _ = fs::remove_file(e.path());
        }
        Ok(())
    }

    /// Deletes every blob not in `keep`. Returns (blobs deleted, bytes
    /// freed, bytes kept).
    pub(crate) fn sweep(&self, keep: &HashSet<blake3::Hash>) -> Result<(u64, u64, u64)> {
        let (mut n, mut freed, mut kept) = (0u64, 0u64, 0u64);
        for shard in fs::read_dir(&self.root).map_err(store_err(&self.root))? {
            let shard = shard.map_err(store_err(&self.root))?;
            let sname = shard.file_name();
            let Some(sname) = sname.to_str().filter(|s| s.len() == 2) else {
                continue;
            };
            let spath = shard.path();
            for blob in fs::read_dir(&spath).map_err(store_err(&spath))? {
                let blob = blob.map_err(store_err(&spath))?;
                let name = blob.file_name();
                let len = blob.metadata().map(|m| m.len()).unwrap_or(0);
                let hash = name
                    .to_str()
                    .and_then(|n| blake3::Hash::from_hex(format!("{sname}{n}")).ok());
                if hash.is_some_and(|h| keep.contains(&h)) {
                    kept += len;
                    continue;
                }
                fs::remove_file(blob.path()).map_err(store_err(&blob.path()))?;
                n += 1;
                freed += len;
            }
            let _ = fs::remove_dir(&spath);
        }
        Ok((n, freed, kept))
    }
}
