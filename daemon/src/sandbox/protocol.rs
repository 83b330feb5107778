//! The daemon <-> spawn helper wire protocol: frames of `u32` little-endian
//! length + JSON over a `SOCK_STREAM` Unix socketpair; file descriptors ride
//! as `SCM_RIGHTS` on the length prefix of the frame they belong to
//! (unix(7)).

use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::io::{IoSlice, IoSliceMut, Read};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use super::{Enforcement, SpawnRequest};

/// Largest frame either side accepts, bytes.
pub(crate) const MAX_FRAME: usize = 16 << 20;

/// One command, as the helper receives it: the caller's request plus the
/// host paths that must never be visible (state dir, runtime dir).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct WireRequest {
    pub spawn: SpawnRequest,
    pub hidden: Vec<PathBuf>,
    /// The last fd is the read end of the command's gate
    /// ([`super::child::ChildIo::gate`]).
    #[serde(default)]
    pub gate: bool,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum ToHelper {
    /// Followed by the fds stdout, stderr, optionally stdin (`/dev/null`
    /// when absent), then the gate when `req.gate` is set.
    Spawn {
        id: u64,
        req: Box<WireRequest>,
    },
    Kill {
        id: u64,
    },
    /// Followed by one fd: an open file description that holds the state
    /// dir's sandboxes lock ([`super::Spawner::hold`]). The helper keeps it,
    /// and so does every sandbox's init it clones from then on.
    Hold,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum WireError {
    Setup { stage: String, message: String },
    Refused(String),
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum FromHelper {
    Started {
        id: u64,
        pid: u32,
        landlock: Enforcement,
    },
    Failed {
        id: u64,
        error: WireError,
    },
    Exited {
        id: u64,
        code: Option<i32>,
        signal: Option<i32>,
        /// `memory.events` `oom_kill` of the command's cgroup (0 without).
        #[serde(default)]
        cgroup_oom_kills: u64,
        /// `pids.events` `max` of the command's cgroup (0 without).
        #[serde(default)]
        cgroup_pids_max: u64,
    },
}

/// Writes one frame with `fds` attached. Callers serialize writers.
pub(crate) fn send<T: Serialize>(
    sock: &UnixStream,
    msg: &T,
    fds: &[BorrowedFd<'_>],
) -> std::io::Result<()> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let body = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
    if body.len() > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "request of {} bytes exceeds {} bytes",
                body.len(),
                MAX_FRAME
            ),
        ));
    }
    let len = (body.len() as u32).to_le_bytes();
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let cmsg = [ControlMessage::ScmRights(&raw)];
    let cmsgs: &[ControlMessage] = if raw.is_empty() { &[] } else { &cmsg };
    // The length prefix goes first and alone carries the fds.
    let mut sent = 0;
    while sent < 4 {
        let iov = [IoSlice::new(&len[sent..])];
        let n = sendmsg::<()>(
            sock.as_raw_fd(),
            &iov,
            if sent == 0 { cmsgs } else { &[] },
            MsgFlags::MSG_NOSIGNAL,
            None,
        )
        .map_err(std::io::Error::from)?;
        sent += n;
    }
    use std::io::Write;
    (&*sock).write_all(&body)
}

/// Reads one frame and the fds that came with it. `Ok(None)` on EOF at a
/// frame boundary.
pub(crate) fn recv<T: DeserializeOwned>(
    sock: &UnixStream,
) -> std::io::Result<Option<(T, Vec<OwnedFd>)>> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut len = [0u8; 4];
    let mut got = 0;
    let mut fds = Vec::new();
    while got < 4 {
        let mut cbuf = nix::cmsg_space!([RawFd; 4]);
        let mut iov = [IoSliceMut::new(&mut len[got..])];
        let msg = recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut cbuf),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )
        .map_err(std::io::Error::from)?;
        for c in msg.cmsgs().map_err(std::io::Error::from)? {
            if let ControlMessageOwned::ScmRights(rs) = c {
                // SAFETY: the kernel just installed these fds for us.
                fds.extend(rs.into_iter().map(|r| unsafe { OwnedFd::from_raw_fd(r) }));
            }
        }
        let n = msg.bytes;
        if n == 0 {
            if got == 0 {
                return Ok(None);
            }
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        got += n;
    }
    let n = u32::from_le_bytes(len) as usize;
    if n > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("frame of {n} bytes exceeds {MAX_FRAME}"),
        ));
    }
    let mut body = vec![0u8; n];
    (&*sock).read_exact(&mut body)?;
    let msg = serde_json::from_slice(&body).map_err(std::io::Error::other)?;
    Ok(Some((msg, fds)))
}
