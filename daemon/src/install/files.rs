//! Reading the requirements, manifest and lock files an install refers to,
//! confined to the workspace: regular files inside the root after resolving
//! symlinks, size-capped, opened with `O_NOFOLLOW | O_NONBLOCK` (a FIFO
//! cannot block the classifier).

use super::{spec, InstallError, InstallIntent, PackageRef};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// At most this many requirement entries are listed per intent.
const MAX_REQUIREMENTS: usize = 10_000;
/// Nested `-r` files followed at most this deep, and this many files in all.
const MAX_DEPTH: usize = 5;
const MAX_FILES: usize = 32;

/// Manifests a command implies (`package.json` for `npm install`): a missing
/// one is not worth a warning (the manager will say so).
const IMPLIED: &[&str] = &[
    "package.json",
    "pyproject.toml",
    "Cargo.toml",
    "go.mod",
    "Gemfile",
    "poetry.lock",
];

/// Reads `rel` (relative to `root/cwd`, or absolute) if it is a regular file
/// inside `root`, at most `cap` bytes.
///
/// Errors: [`InstallError::OutsideWorkspace`], [`InstallError::NotRegular`],
/// [`InstallError::TooLarge`], [`InstallError::Io`] (including not found).
pub(crate) fn read_confined(
    root: &Path,
    cwd: &Path,
    rel: &str,
    cap: u64,
) -> Result<String, InstallError> {
    let buf = read_bytes_confined(root, cwd, rel, cap)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// [`read_confined`] without the UTF-8 conversion.
fn read_bytes_confined(
    root: &Path,
    cwd: &Path,
    rel: &str,
    cap: u64,
) -> Result<Vec<u8>, InstallError> {
    let io = |e| InstallError::Io {
        path: rel.to_string(),
        source: e,
    };
    let root = root.canonicalize().map_err(io)?;
    let p: PathBuf = if Path::new(rel).is_absolute() {
        PathBuf::from(rel)
    } else {
        root.join(cwd).join(rel)
    };
    let real = p.canonicalize().map_err(io)?;
    if !real.starts_with(&root) {
        return Err(InstallError::OutsideWorkspace {
            path: rel.to_string(),
        });
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&real)
        .map_err(io)?;
    let md = f.metadata().map_err(io)?;
    if !md.is_file() {
        return Err(InstallError::NotRegular {
            path: rel.to_string(),
        });
    }
    if md.len() > cap {
        return Err(InstallError::TooLarge {
            path: rel.to_string(),
            size: md.len(),
            cap,
        });
    }
    let mut buf = Vec::with_capacity(md.len() as usize);
    f.take(cap + 1).read_to_end(&mut buf).map_err(io)?;
    if buf.len() as u64 > cap {
        return Err(InstallError::TooLarge {
            path: rel.to_string(),
            size: buf.len() as u64,
            cap,
        });
    }
    Ok(buf)
}

struct Reader<'a> {
    root: &'a Path,
    cwd: &'a Path,
    cap: u64,
    files_read: usize,
    out: Vec<PackageRef>,
    warnings: Vec<String>,
}

impl Reader<'_> {
    fn read(&mut self, rel: &str) -> Option<String> {
        if self.files_read >= MAX_FILES {
            self.warnings.push(format!(
                "{rel}: not read: more than {MAX_FILES} files referenced"
            ));
            return None;
        }
        self.files_read += 1;
        match read_confined(self.root, self.cwd, rel, self.cap) {
            Ok(t) => Some(t),
            Err(InstallError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound && IMPLIED.contains(&rel) =>
            {
                None
            }
            Err(e) => {
                self.warnings.push(format!("not read: {e}"));
                None
            }
        }
    }

    fn push(&mut self, p: PackageRef) {
        if self.out.len() < MAX_REQUIREMENTS {
            self.out.push(p);
        } else if self.out.len() == MAX_REQUIREMENTS {
            self.warnings.push(format!(
                "more than {MAX_REQUIREMENTS} requirements: the list is cut"
            ));
            self.out.push(PackageRef::new("…", None));
        }
    }

    /// pip requirements format (pip's "Requirements File Format"): one
    /// specifier a line, `#` comments, `\` continuations, `-r`/`-c` nesting,
    /// `-e` editables, `--hash` and other options ignored.
    fn requirements_txt(&mut self, rel: &str, depth: usize) {
        if rel.contains("://") {
            self.warnings
                .push(format!("{rel}: not read: requirements from a URL"));
            return;
        }
        let Some(text) = self.read(rel) else { return };
        let base = Path::new(rel).parent().unwrap_or(Path::new(""));
        let joined = text.replace("\\\r\n", " ").replace("\\\n", " ");
        for line in joined.lines() {
            let line = strip_comment(line).trim();
            if line.is_empty() {
                continue;
            }
            let mut words = line.split_whitespace();
            let first = words.next().unwrap_or("");
            let nested = |w: &str, rest: &mut std::str::SplitWhitespace| -> Option<String> {
                for flag in ["-r", "--requirement", "-c", "--constraint"] {
                    if w == flag {
                        return rest.next().map(String::from);
                    }
                    if let Some(v) = w.strip_prefix(&format!("{flag}=")) {
                        return Some(v.to_string());
                    }
                }
                None
            };
            if let Some(f) = nested(first, &mut words) {
                if depth >= MAX_DEPTH {
                    self.warnings.push(format!(
                        "{f}: not read: requirements nested deeper than {MAX_DEPTH}"
                    ));
                } else if !(first.starts_with("-c") || first.starts_with("--constraint")) {
                    let path = base.join(&f).to_string_lossy().into_owned();
                    self.requirements_txt(&path, depth + 1);
                }
                continue;
            }
            if first == "-e" || first == "--editable" {
                if let Some(w) = words.next() {
                    self.push(spec::python(w).pkg);
                }
                continue;
            }
            if first.starts_with('-') {
                continue; // --index-url, --hash, --only-binary, ...
            }
            // Drop per-requirement options (--hash=...).
            let req = line.split(" --").next().unwrap_or(line);
            self.push(spec::python(req).pkg);
        }
    }

    fn json(&mut self, rel: &str) -> Option<serde_json::Value> {
        let text = self.read(rel)?;
        match serde_json::from_str(&text) {
            Ok(v) => Some(v),
            Err(e) => {
                self.warnings.push(format!("{rel}: not JSON: {e}"));
                None
            }
        }
    }

    fn package_json(&mut self, rel: &str) {
        let Some(v) = self.json(rel) else { return };
        for key in ["dependencies", "devDependencies", "optionalDependencies"] {
            if let Some(obj) = v.get(key).and_then(|d| d.as_object()) {
                for (name, ver) in obj {
                    self.push(PackageRef::new(name.clone(), ver.as_str()));
                }
            }
        }
    }

    /// package-lock.json v2/v3 `packages` map (npm's package-lock.json(5)),
    /// or v1 `dependencies`.
    fn package_lock(&mut self, rel: &str) {
        let Some(v) = self.json(rel) else { return };
        if let Some(pk) = v.get("packages").and_then(|p| p.as_object()) {
            for (path, meta) in pk {
                let Some(idx) = path.rfind("node_modules/") else {
                    continue; // the root project, workspaces
                };
                if meta.get("link").and_then(|l| l.as_bool()) == Some(true) {
                    continue;
                }
                let name = &path[idx + "node_modules/".len()..];
                let ver = meta.get("version").and_then(|x| x.as_str());
                self.push(PackageRef::new(name, ver));
            }
        } else if let Some(deps) = v.get("dependencies").and_then(|p| p.as_object()) {
            for (name, meta) in deps {
                let ver = meta.get("version").and_then(|x| x.as_str());
                self.push(PackageRef::new(name.clone(), ver));
            }
        }
    }

    fn toml(&mut self, rel: &str) -> Option<toml::Table> {
        let text = self.read(rel)?;
        match text.parse::<toml::Table>() {
            Ok(t) => Some(t),
            Err(e) => {
                self.warnings.push(format!("{rel}: not TOML: {e}"));
                None
            }
        }
    }

    /// `[[package]]` tables with name and version (Cargo.lock, uv.lock,
    /// poetry.lock). With `registry_only`, entries without `source` (the
    /// workspace's own crates) are skipped.
    fn lock_packages(&mut self, rel: &str, registry_only: bool) {
        let Some(t) = self.toml(rel) else { return };
        let Some(pkgs) = t.get("package").and_then(|p| p.as_array()) else {
            return;
        };
        for p in pkgs {
            if registry_only && p.get("source").is_none() {
                continue;
            }
            let src = p.get("source");
            if src
                .and_then(|s| s.get("editable").or(s.get("virtual")))
                .is_some()
            {
                continue; // uv.lock: the project itself
            }
            if let Some(name) = p.get("name").and_then(|n| n.as_str()) {
                let ver = p.get("version").and_then(|v| v.as_str());
                self.push(PackageRef::new(name, ver));
            }
        }
    }

    fn cargo_toml(&mut self, rel: &str) {
        let Some(t) = self.toml(rel) else { return };
        for key in ["dependencies", "dev-dependencies", "build-dependencies"] {
            if let Some(deps) = t.get(key).and_then(|d| d.as_table()) {
                for (name, v) in deps {
                    let ver = v
                        .as_str()
                        .or_else(|| v.get("version").and_then(|x| x.as_str()));
                    let name = v
                        .get("package")
                        .and_then(|p| p.as_str())
                        .unwrap_or(name.as_str());
                    self.push(PackageRef::new(name, ver));
                }
            }
        }
    }

    fn pyproject(&mut self, rel: &str) {
        let Some(t) = self.toml(rel) else { return };
        if let Some(deps) = t
            .get("project")
            .and_then(|p| p.get("dependencies"))
            .and_then(|d| d.as_array())
        {
            for d in deps.iter().filter_map(|d| d.as_str()) {
                self.push(spec::python(d).pkg);
            }
        }
        if let Some(deps) = t
            .get("tool")
            .and_then(|p| p.get("poetry"))
            .and_then(|p| p.get("dependencies"))
            .and_then(|d| d.as_table())
        {
            for (name, v) in deps {
                if name == "python" {
                    continue;
                }
                let ver = v
                    .as_str()
                    .or_else(|| v.get("version").and_then(|x| x.as_str()));
                self.push(PackageRef::new(name.clone(), ver));
            }
        }
    }

    /// Gemfile.lock: the `specs:` entries, `    name (version)`.
    fn gemfile_lock(&mut self, rel: &str) {
        let Some(text) = self.read(rel) else { return };
        for line in text.lines() {
            if line.starts_with("    ") && !line.starts_with("     ") {
                let l = line.trim();
                let (name, ver) = match l.split_once(" (") {
                    Some((n, v)) => (n, Some(v.trim_end_matches(')'))),
                    None => (l, None),
                };
                self.push(PackageRef::new(name, ver));
            }
        }
    }

    /// Gemfile: `gem "name", "version"` lines.
    fn gemfile(&mut self, rel: &str) {
        let Some(text) = self.read(rel) else { return };
        for line in text.lines() {
            let l = strip_comment(line).trim();
            let Some(rest) = l.strip_prefix("gem ") else {
                continue;
            };
            let parts: Vec<&str> = rest
                .split(',')
                .map(|p| p.trim().trim_matches(['"', '\'']))
                .collect();
            let ver = parts.get(1).filter(|v| !v.contains(':'));
            self.push(PackageRef::new(parts[0], ver.copied()));
        }
    }

    /// go.mod `require` directives (single and block form).
    fn go_mod(&mut self, rel: &str) {
        let Some(text) = self.read(rel) else { return };
        let mut block = false;
        for line in text.lines() {
            let l = line.split("//").next().unwrap_or("").trim();
            let entry = if block {
                if l == ")" {
                    block = false;
                    continue;
                }
                l
            } else if l == "require (" {
                block = true;
                continue;
            } else if let Some(r) = l.strip_prefix("require ") {
                r.trim()
            } else {
                continue;
            };
            let mut w = entry.split_whitespace();
            if let Some(m) = w.next() {
                self.push(PackageRef::new(m, w.next()));
            }
        }
    }

    /// conda environment.yml `dependencies:` items (`- numpy=1.26`); the
    /// nested `- pip:` list is read as pip requirements.
    fn environment_yml(&mut self, rel: &str) {
        let Some(text) = self.read(rel) else { return };
        let mut in_deps = false;
        let mut pip_indent: Option<usize> = None;
        for line in text.lines() {
            let l = strip_comment(line);
            if l.trim().is_empty() {
                continue;
            }
            let indent = l.len() - l.trim_start().len();
            if indent == 0 {
                in_deps = l.trim() == "dependencies:";
                pip_indent = None;
                continue;
            }
            if !in_deps {
                continue;
            }
            let Some(item) = l.trim().strip_prefix("- ") else {
                continue;
            };
            if item.trim() == "pip:" {
                pip_indent = Some(indent);
                continue;
            }
            match pip_indent {
                Some(pi) if indent > pi => self.push(spec::python(item.trim()).pkg),
                _ => {
                    pip_indent = None;
                    self.push(spec::conda(item.trim().trim_matches(['"', '\''])).pkg)
                }
            }
        }
    }

    /// Brewfile: `brew "name"` and `cask "name"` lines.
    fn brewfile(&mut self, rel: &str) {
        let Some(text) = self.read(rel) else { return };
        for line in text.lines() {
            let l = strip_comment(line).trim();
            for kw in ["brew ", "cask "] {
                if let Some(rest) = l.strip_prefix(kw) {
                    let name = rest.split(',').next().unwrap_or("").trim();
                    self.push(PackageRef::new(name.trim_matches(['"', '\'']), None));
                }
            }
        }
    }
}

fn strip_comment(line: &str) -> &str {
    // A `#` starts a comment at the line start or after whitespace (pip, YAML, Ruby).
    let b = line.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        if c == b'#' && (i == 0 || b[i - 1].is_ascii_whitespace()) {
            return &line[..i];
        }
    }
    line
}

/// Fills `intent.requirements` from the files it refers to, read from the
/// workspace; unreadable files become warnings.
pub(crate) fn read_requirements(intent: &mut InstallIntent, root: &Path, cwd: &Path, cap: u64) {
    let mut r = Reader {
        root,
        cwd,
        cap,
        files_read: 0,
        out: vec![],
        warnings: vec![],
    };
    let files = intent.files.clone();
    for f in &files {
        let base = Path::new(f)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match (intent.manager.as_str(), base.as_str()) {
            (_, "package.json") => r.package_json(f),
            (_, "package-lock.json" | "npm-shrinkwrap.json") => r.package_lock(f),
            // pnpm-lock.yaml, yarn.lock, bun.lock: list the direct dependencies.
            (_, "pnpm-lock.yaml" | "yarn.lock" | "bun.lock") => {
                let dir = Path::new(f).parent().unwrap_or(Path::new(""));
                r.package_json(&dir.join("package.json").to_string_lossy())
            }
            (_, "Cargo.lock") => r.lock_packages(f, true),
            (_, "uv.lock" | "poetry.lock") => r.lock_packages(f, false),
            (_, "Cargo.toml") => r.cargo_toml(f),
            (_, "pyproject.toml") => r.pyproject(f),
            (_, "Gemfile.lock") => r.gemfile_lock(f),
            (_, "Gemfile") => r.gemfile(f),
            (_, "go.mod") => r.go_mod(f),
            (_, "Brewfile") => r.brewfile(f),
            ("conda" | "mamba" | "micromamba", b)
                if b.ends_with(".yml") || b.ends_with(".yaml") =>
            {
                r.environment_yml(f)
            }
            ("pip" | "uv" | "pipx" | "conda" | "mamba" | "micromamba", _) => {
                r.requirements_txt(f, 0)
            }
            _ => {}
        }
        // poetry install reads both files: the lock is enough when present.
        if base == "poetry.lock" && !r.out.is_empty() {
            break;
        }
    }
    intent.requirements = r.out;
    for w in r.warnings {
        if !intent.warnings.contains(&w) {
            intent.warnings.push(w);
        }
    }
}

/// Cap on a lock file hashed for the record, bytes.
const MAX_HASHED_BYTES: u64 = 64 << 20;

/// The lock and manifest files `intent`'s manager reads or rewrites, by
/// manager (npm-family locks and `package.json`, `Cargo.lock`, `uv.lock`,
/// `poetry.lock`, `go.sum`, `Gemfile.lock`, ...) plus the files it names.
pub(crate) fn lock_paths(intent: &InstallIntent) -> Vec<String> {
    let fixed: &[&str] = match intent.manager.as_str() {
        "npm" | "npx" => &["package-lock.json", "npm-shrinkwrap.json", "package.json"],
        "pnpm" => &["pnpm-lock.yaml", "package.json"],
        "yarn" => &["yarn.lock", "package.json"],
        "bun" => &["bun.lock", "bun.lockb", "package.json"],
        "uv" => &["uv.lock", "pyproject.toml"],
        "poetry" => &["poetry.lock", "pyproject.toml"],
        "cargo" => &["Cargo.lock", "Cargo.toml"],
        "go" => &["go.sum", "go.mod"],
        "bundle" => &["Gemfile.lock", "Gemfile"],
        "brew" => &["Brewfile.lock.json"],
        _ => &[],
    };
    let mut out: Vec<String> = fixed.iter().map(|s| s.to_string()).collect();
    for f in &intent.files {
        if !f.contains("://") && !out.contains(f) {
            out.push(f.clone());
        }
    }
    out
}

/// BLAKE3 of each of [`lock_paths`] in the workspace (`root`/`cwd`): `None`
/// for a file that is absent or cannot be read confined (outside the root,
/// not regular, over 64 MiB). Taken before and after an install, the pair
/// shows whether the install changed the lock.
pub(crate) fn lockfile_hashes(
    intent: &InstallIntent,
    root: &Path,
    cwd: &Path,
) -> Vec<super::LockfileHash> {
    lock_paths(intent)
        .into_iter()
        .map(|path| {
            let blake3 = read_bytes_confined(root, cwd, &path, MAX_HASHED_BYTES)
                .ok()
                .map(|b| blake3::hash(&b).to_hex().to_string());
            super::LockfileHash { path, blake3 }
        })
        .collect()
}
