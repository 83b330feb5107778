//! Streaming redaction: output that arrives in chunks (exec stdout/stderr)
//! is scanned with a window carried across chunk boundaries, so a secret
//! split between two chunks is still seen whole.
//!
//! The redactor holds back between one and two windows of what it was
//! given (default window 4096 bytes), cut at a line boundary where one is near, and never
//! cuts through a finding or between a secret's name and its value. What
//! it holds is bounded: at most 16 windows (64 KiB by default) even while a
//! private-key block is still arriving; past that it emits the block's
//! marker and swallows the rest of the block as it comes. Callers that
//! want idle output out promptly call [`StreamRedactor::flush`] when the
//! producer has been quiet for a while: it emits what is held except a
//! trailing run that could still grow into a secret (the last
//! non-whitespace run, at most one window; or the whole last line when it
//! announces a value, `password: `). That tail goes out when more data
//! completes it or at [`StreamRedactor::finish`], so a token written in
//! two halves with a pause between them is still seen whole.

use super::{engine::Hit, pem, Redactor, WITHHELD_RULE};

/// Default bytes held back.
pub(crate) const DEFAULT_WINDOW: usize = 4096;
/// Held bytes never exceed this many windows.
const MAX_HOLD_WINDOWS: usize = 16;

/// Redacts a stream of chunks.
#[derive(Debug)]
pub struct StreamRedactor {
    redactor: Redactor,
    buf: Vec<u8>,
    window: usize,
    redactions: u32,
    /// The last emitted marker covered a private-key block whose END line
    /// has not arrived: its remaining lines are swallowed.
    in_block: bool,
    /// The scanner failed: everything from then on is withheld.
    failed: bool,
}

impl StreamRedactor {
    /// A stream redactor with `redactor`'s rules, marker key and marker
    /// memory, holding back `settings.stream_window_bytes`.
    pub fn new(redactor: Redactor) -> Self {
        let window = redactor.settings().stream_window_bytes.clamp(256, 65536);
        StreamRedactor {
            redactor,
            buf: Vec::new(),
            window,
            redactions: 0,
            in_block: false,
            failed: false,
        }
    }

    /// Feeds a chunk; returns the bytes that are safe to emit now (already
    /// redacted). At most `16 * window` bytes stay held.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        if self.failed {
            return Vec::new();
        }
        self.buf.extend_from_slice(chunk);
        self.swallow_block();
        // scan once per window of new bytes, not once per chunk
        if self.buf.len() < 2 * self.window {
            return Vec::new();
        }
        self.emit(Mode::Push)
    }

    /// For idle producers: emits what is held, redacted, except a trailing
    /// run that a later chunk could still turn into (part of) a secret: the
    /// last run of non-whitespace bytes (at most one window), or the last
    /// line when it ends by announcing a value (`password:`, `KEY=`). A key
    /// block without its END line is redacted as cut off.
    pub fn flush(&mut self) -> Vec<u8> {
        self.flush_mode(false)
    }

    /// Ends the stream; returns the remaining bytes, redacted.
    pub fn finish(&mut self) -> Vec<u8> {
        let out = self.flush_mode(true);
        self.in_block = false;
        out
    }

    fn flush_mode(&mut self, end: bool) -> Vec<u8> {
        if self.failed {
            return Vec::new();
        }
        self.swallow_block();
        if self.buf.is_empty() {
            return Vec::new();
        }
        self.emit(if end { Mode::End } else { Mode::Idle })
    }

    /// Secrets replaced so far (a withheld stream counts one).
    pub fn redactions(&self) -> u32 {
        self.redactions
    }

    /// Bytes currently held back.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    fn swallow_block(&mut self) {
        if !self.in_block || self.buf.is_empty() {
            return;
        }
        let (len, complete) = pem::continuation(&self.buf);
        let rest_blank = self.buf[len..]
            .iter()
            .all(|b| b.is_ascii_whitespace() || *b == b'\\');
        if !complete && rest_blank {
            self.buf.clear(); // still inside the block
            return;
        }
        self.buf.drain(..len);
        self.in_block = false;
    }

    fn emit(&mut self, mode: Mode) -> Vec<u8> {
        let hits = match self.redactor.scan(&self.buf) {
            Ok(h) => h,
            Err(_) => {
                // fail closed: withhold what is held and everything after
                self.failed = true;
                self.redactions += 1;
                let m = self.redactor.marker(WITHHELD_RULE, &self.buf);
                self.buf.clear();
                return m.into_bytes();
            }
        };
        let len = self.buf.len();
        // an idle flush inside a key block still redacts it as cut off
        let open_at_end = hits
            .last()
            .is_some_and(|h| h.open_block && h.end >= len.saturating_sub(2));
        let all = mode == Mode::End || (mode == Mode::Idle && open_at_end);
        let mut cut = match mode {
            _ if all => len,
            Mode::Idle => self.idle_cut(&hits),
            _ => self.cut_point(&hits),
        };
        let mut open_tail = false;
        if mode == Mode::Push && cut == 0 && len > self.window * MAX_HOLD_WINDOWS {
            // held too long: emit up to the window, through any finding
            // crossing that point; a key block still open is swallowed on
            cut = len - self.window;
            for h in &hits {
                if h.start < cut && h.end > cut {
                    cut = h.end;
                    open_tail = h.open_block;
                }
            }
        }
        if all {
            open_tail = open_at_end;
        }
        let emit_hits: Vec<Hit> = hits.into_iter().filter(|h| h.end <= cut).collect();
        let (out, findings) = self.redactor.apply(&self.buf[..cut], &emit_hits);
        self.redactions = self.redactions.saturating_add(findings.len() as u32);
        self.buf.drain(..cut);
        if open_tail {
            self.in_block = true;
            self.swallow_block();
        }
        out
    }

    /// Where an idle flush cuts: before the trailing non-whitespace run (at
    /// most one window of it is held), before the last line when it
    /// announces a value, and never inside a finding or its context.
    fn idle_cut(&self, hits: &[Hit]) -> usize {
        let len = self.buf.len();
        let mut cut = self
            .buf
            .iter()
            .rposition(|b| b.is_ascii_whitespace())
            .map_or(0, |i| i + 1)
            .max(len.saturating_sub(self.window));
        // `password: ` / `TOKEN=\n`: the value may come next
        let mut e = cut;
        while e > 0 && self.buf[e - 1].is_ascii_whitespace() {
            e -= 1;
        }
        if e > 0 && matches!(self.buf[e - 1], b'>' | b':' | b'|' | b'=' | b',' | b'\\') {
            let ls = self.buf[..e]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1);
            cut = cut.min(ls.max(len.saturating_sub(self.window)));
        }
        Self::outside_hits(cut, hits)
    }

    /// Moves `cut` back until it is inside no finding (nor between a
    /// finding's name and its value).
    fn outside_hits(mut cut: usize, hits: &[Hit]) -> usize {
        loop {
            let mut moved = false;
            for h in hits {
                if h.ctx_start < cut && cut < h.end.max(h.ctx_start + 1)
                    || (h.start < cut && cut < h.end)
                {
                    cut = h.ctx_start.min(h.start);
                    moved = true;
                }
            }
            if !moved {
                return cut;
            }
        }
    }

    /// Where to cut the held bytes: at most `len - window`, at a line start
    /// where one is near, never inside a finding or between a name and its
    /// value, and not right after a line that opens a value on the next
    /// line (`<nameToken>`, `password:`).
    fn cut_point(&self, hits: &[Hit]) -> usize {
        let len = self.buf.len();
        let mut cut = len - self.window;
        let lo = cut.saturating_sub(self.window);
        if let Some(i) = self.buf[lo..cut].iter().rposition(|&b| b == b'\n') {
            cut = lo + i + 1;
            // keep a line that announces a value on the next one
            let prev_line_end = cut - 1;
            let mut e = prev_line_end;
            while e > 0 && matches!(self.buf[e - 1], b' ' | b'\t' | b'\r') {
                e -= 1;
            }
            if e > 0 && matches!(self.buf[e - 1], b'>' | b':' | b'|' | b'=' | b',' | b'\\') {
                let ls = self.buf[..prev_line_end]
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |i| i + 1);
                cut = ls;
            }
        }
        Self::outside_hits(cut, hits)
    }
}

/// Why held bytes are being emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// New bytes arrived: keep a window back.
    Push,
    /// The producer went quiet: keep back only what may still grow into a secret.
    Idle,
    /// The stream ended: emit everything.
    End,
}
