//! Table-driven tests of intent parsing, typosquat warnings, workspace file
//! reading and hardening.

use super::*;

/// Splits a command line on whitespace with single and double quotes (enough
/// for the table; the classifier uses a real bash grammar).
fn words(cmd: &str) -> Vec<String> {
    let mut out = vec![];
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in cmd.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, c) if c.is_whitespace() => {
                if !cur.is_empty() || any {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            (None, c) => cur.push(c),
        }
    }
    if !cur.is_empty() || any {
        out.push(cur);
    }
    out
}

fn parse(cmd: &str) -> Option<InstallIntent> {
    parse_intent(&words(cmd))
}

/// Scripts on.
const S: u8 = 1;
/// Fetch-and-run.
const F: u8 = 2;

struct Case {
    cmd: &'static str,
    manager: &'static str,
    op: &'static str,
    /// (name, version) with "" for no version.
    pkgs: &'static [(&'static str, &'static str)],
    source: &'static str,
    scope: &'static str,
    bits: u8,
}

const fn c(
    cmd: &'static str,
    manager: &'static str,
    op: &'static str,
    pkgs: &'static [(&'static str, &'static str)],
    source: &'static str,
    scope: &'static str,
    bits: u8,
) -> Case {
    Case {
        cmd,
        manager,
        op,
        pkgs,
        source,
        scope,
        bits,
    }
}

const REG: &str = "registry";
const LOCK: &str = "lockfile";
const REQ: &str = "requirements";
const GIT: &str = "git";
const PATH: &str = "path";
const URL: &str = "url";
const PROJ: &str = "project";
const GLOB: &str = "global";
const SYS: &str = "system";

#[rustfmt::skip]
const TABLE: &[Case] = &[
    // npm
    c("npm i lodash@4", "npm", "install", &[("lodash", "4")], REG, PROJ, S),
    c("npm install", "npm", "install", &[], REG, PROJ, S),
    c("npm ci", "npm", "ci", &[], LOCK, PROJ, S),
    c("npm clean-install --omit=dev", "npm", "ci", &[], LOCK, PROJ, S),
    c("npm install-ci-test", "npm", "install-ci-test", &[], LOCK, PROJ, S),
    c("npm install -g typescript", "npm", "install", &[("typescript", "")], REG, GLOB, S),
    c("npm install --location=global pnpm@9", "npm", "install", &[("pnpm", "9")], REG, GLOB, S),
    c("npm install --save-dev @types/node@^20 jest", "npm", "install", &[("@types/node", "^20"), ("jest", "")], REG, PROJ, S),
    c("npm i expressjs/express", "npm", "install", &[("expressjs/express", "")], GIT, PROJ, S),
    c("npm install git+https://github.com/u/r.git", "npm", "install", &[("git+https://github.com/u/r.git", "")], GIT, PROJ, S),
    c("npm install ./local-pkg", "npm", "install", &[("./local-pkg", "")], PATH, PROJ, S),
    c("npm install https://example.test/pkg.tgz", "npm", "install", &[("https://example.test/pkg.tgz", "")], URL, PROJ, S),
    c("npm install --ignore-scripts left-pad", "npm", "install", &[("left-pad", "")], REG, PROJ, 0),
    c("npm add react@18.2.0 react-dom@18.2.0", "npm", "install", &[("react", "18.2.0"), ("react-dom", "18.2.0")], REG, PROJ, S),
    c("npm uninstall lodash", "npm", "remove", &[("lodash", "")], REG, PROJ, S),
    c("npm update", "npm", "update", &[], REG, PROJ, S),
    c("npm audit fix", "npm", "audit fix", &[], REG, PROJ, S),
    c("npm rebuild", "npm", "rebuild", &[], REG, PROJ, S),
    c("npm exec -- cowsay hi", "npm", "exec", &[("cowsay", "")], REG, PROJ, S | F),
    c("npm init vite@latest my-app", "npm", "init", &[("create-vite", "latest")], REG, PROJ, S | F),
    c("npm --registry=https://evil.test install foo", "npm", "install", &[("foo", "")], REG, PROJ, S),
    c("npm i lodash@npm:lodahs@1", "npm", "install", &[("lodahs", "1")], REG, PROJ, S),
    // npx
    c("npx create-react-app demo", "npx", "exec", &[("create-react-app", "")], REG, PROJ, S | F),
    c("npx -p typescript@5 tsc --init", "npx", "exec", &[("typescript", "5")], REG, PROJ, S | F),
    c("npx --yes cowsay@1.6.0 moo", "npx", "exec", &[("cowsay", "1.6.0")], REG, PROJ, S | F),
    c("npx github:user/tool", "npx", "exec", &[("github:user/tool", "")], GIT, PROJ, S | F),
    // pnpm
    c("pnpm add zod", "pnpm", "add", &[("zod", "")], REG, PROJ, S),
    c("pnpm install --frozen-lockfile", "pnpm", "install", &[], LOCK, PROJ, S),
    c("pnpm i", "pnpm", "install", &[], REG, PROJ, S),
    c("pnpm add -g pnpm", "pnpm", "add", &[("pnpm", "")], REG, GLOB, S),
    c("pnpm dlx create-vite my-app", "pnpm", "dlx", &[("create-vite", "")], REG, PROJ, S | F),
    c("pnpm create vite", "pnpm", "create", &[("create-vite", "")], REG, PROJ, S | F),
    c("pnpm fetch", "pnpm", "fetch", &[], LOCK, PROJ, 0),
    c("pnpm remove react", "pnpm", "remove", &[("react", "")], REG, PROJ, S),
    c("pnpm -C packages/app add -D vitest", "pnpm", "add", &[("vitest", "")], REG, PROJ, S),
    c("pnpx cowsay", "pnpm", "dlx", &[("cowsay", "")], REG, PROJ, S | F),
    // yarn
    c("yarn", "yarn", "install", &[], REG, PROJ, S),
    c("yarn install --frozen-lockfile", "yarn", "install", &[], LOCK, PROJ, S),
    c("yarn install --immutable", "yarn", "install", &[], LOCK, PROJ, S),
    c("yarn --frozen-lockfile", "yarn", "install", &[], LOCK, PROJ, S),
    c("yarn add left-pad", "yarn", "add", &[("left-pad", "")], REG, PROJ, S),
    c("yarn add react@18 react-dom@18", "yarn", "add", &[("react", "18"), ("react-dom", "18")], REG, PROJ, S),
    c("yarn global add serve", "yarn", "add", &[("serve", "")], REG, GLOB, S),
    c("yarn dlx create-next-app", "yarn", "dlx", &[("create-next-app", "")], REG, PROJ, S | F),
    c("yarn workspace web add axios", "yarn", "add", &[("axios", "")], REG, PROJ, S),
    c("yarn remove lodash", "yarn", "remove", &[("lodash", "")], REG, PROJ, S),
    c("yarn upgrade", "yarn", "upgrade", &[], REG, PROJ, S),
    // bun
    c("bun add elysia", "bun", "add", &[("elysia", "")], REG, PROJ, S),
    c("bun install --frozen-lockfile", "bun", "install", &[], LOCK, PROJ, S),
    c("bun i", "bun", "install", &[], REG, PROJ, S),
    c("bun ci", "bun", "ci", &[], LOCK, PROJ, S),
    c("bunx cowsay hello", "bun", "x", &[("cowsay", "")], REG, PROJ, S | F),
    c("bun x prettier --write .", "bun", "x", &[("prettier", "")], REG, PROJ, S | F),
    c("bun add -g typescript", "bun", "add", &[("typescript", "")], REG, GLOB, S),
    c("bun create vite app", "bun", "create", &[("create-vite", "")], REG, PROJ, S | F),
    // pip
    c("pip install requests==2.32.3", "pip", "install", &[("requests", "==2.32.3")], REG, PROJ, S),
    c("pip install -r requirements.txt", "pip", "install", &[], REQ, PROJ, S),
    c("pip install --require-hashes -r requirements.txt", "pip", "install", &[], LOCK, PROJ, S),
    c("pip install --require-hashes requests==2.32.3", "pip", "install", &[("requests", "==2.32.3")], REG, PROJ, S),
    c("pip3 install --user black", "pip", "install", &[("black", "")], REG, GLOB, S),
    c("python3 -m pip install --user black", "pip", "install", &[("black", "")], REG, GLOB, S),
    c("python -m pip install -U pip setuptools wheel", "pip", "install", &[("pip", ""), ("setuptools", ""), ("wheel", "")], REG, PROJ, S),
    c("python3.12 -I -m pip install httpx", "pip", "install", &[("httpx", "")], REG, PROJ, S),
    c("pip install -e .", "pip", "install", &[(".", "")], PATH, PROJ, S),
    c("uv pip install -e '.[dev]'", "uv", "pip install", &[(".[dev]", "")], PATH, PROJ, S),
    c("pip install -e git+https://x.test/r.git#egg=r", "pip", "install", &[("git+https://x.test/r.git#egg=r", "")], GIT, PROJ, S),
    c("pip install git+https://github.com/psf/requests.git", "pip", "install", &[("git+https://github.com/psf/requests.git", "")], GIT, PROJ, S),
    c("pip install 'requests[socks]>=2,<3'", "pip", "install", &[("requests", ">=2,<3")], REG, PROJ, S),
    c("pip install --index-url https://pypi.internal.test/simple foo", "pip", "install", &[("foo", "")], REG, PROJ, S),
    c("pip install --only-binary :all: numpy", "pip", "install", &[("numpy", "")], REG, PROJ, 0),
    c("pip install --break-system-packages httpx", "pip", "install", &[("httpx", "")], REG, SYS, S),
    c("pip download flask -d wheels", "pip", "download", &[("flask", "")], REG, PROJ, S),
    c("pip uninstall -y requests", "pip", "remove", &[("requests", "")], REG, PROJ, 0),
    c("pip install https://x.test/pkg-1.0-py3-none-any.whl", "pip", "install", &[("https://x.test/pkg-1.0-py3-none-any.whl", "")], URL, PROJ, S),
    c("pip install ./dist/pkg-1.0.tar.gz", "pip", "install", &[("./dist/pkg-1.0.tar.gz", "")], PATH, PROJ, S),
    c("pip install -r https://x.test/req.txt", "pip", "install", &[], URL, PROJ, S),
    c("sudo pip install ansible", "pip", "install", &[("ansible", "")], REG, SYS, S),
    c("pip-sync requirements.txt dev-requirements.txt", "pip-sync", "sync", &[], REQ, PROJ, S),
    // uv
    c("uv add httpx", "uv", "add", &[("httpx", "")], REG, PROJ, S),
    c("uv add --editable ./libs/core", "uv", "add", &[("./libs/core", "")], PATH, PROJ, S),
    c("uv add 'fastapi>=0.110' --dev", "uv", "add", &[("fastapi", ">=0.110")], REG, PROJ, S),
    c("uv pip install -r requirements.txt", "uv", "pip install", &[], REQ, PROJ, S),
    c("uv pip install --require-hashes -r req.lock.txt", "uv", "pip install", &[], LOCK, PROJ, S),
    c("uv pip install --system ruff", "uv", "pip install", &[("ruff", "")], REG, SYS, S),
    c("uv pip sync requirements.txt", "uv", "pip sync", &[], REQ, PROJ, S),
    c("uv sync --locked", "uv", "sync", &[], LOCK, PROJ, S),
    c("uv sync --frozen", "uv", "sync", &[], LOCK, PROJ, S),
    c("uv sync", "uv", "sync", &[], REG, PROJ, S),
    c("uv lock", "uv", "lock", &[], REG, PROJ, S),
    c("uv tool install ruff", "uv", "tool install", &[("ruff", "")], REG, GLOB, S),
    c("uvx ruff check .", "uv", "tool run", &[("ruff", "")], REG, GLOB, S | F),
    c("uv tool run --from 'httpie==3.2' http", "uv", "tool run", &[("httpie", "==3.2")], REG, GLOB, S | F),
    c("uv run --with rich python x.py", "uv", "run", &[("rich", "")], REG, PROJ, S | F),
    c("uv run pytest", "uv", "run", &[], REG, PROJ, S),
    c("uv run --locked pytest -x", "uv", "run", &[], LOCK, PROJ, S),
    c("uv python install 3.12", "uv", "python install", &[("3.12", "")], REG, GLOB, 0),
    // pipx
    c("pipx install poetry", "pipx", "install", &[("poetry", "")], REG, GLOB, S),
    c("pipx run cowsay hi", "pipx", "run", &[("cowsay", "")], REG, GLOB, S | F),
    c("pipx inject poetry poetry-plugin-export", "pipx", "inject", &[("poetry-plugin-export", "")], REG, GLOB, S),
    c("python3 -m pipx install black", "pipx", "install", &[("black", "")], REG, GLOB, S),
    // poetry
    c("poetry add requests@^2.31", "poetry", "add", &[("requests", "^2.31")], REG, PROJ, S),
    c("poetry add pytest --group dev", "poetry", "add", &[("pytest", "")], REG, PROJ, S),
    c("poetry add django@4.2", "poetry", "add", &[("django", "==4.2")], REG, PROJ, S),
    c("poetry install", "poetry", "install", &[], REG, PROJ, S),
    c("poetry lock", "poetry", "lock", &[], REG, PROJ, S),
    c("poetry remove requests", "poetry", "remove", &[("requests", "")], REG, PROJ, 0),
    c("poetry self add poetry-plugin-up", "poetry", "self add", &[("poetry-plugin-up", "")], REG, GLOB, S),
    // cargo
    c("cargo add serde --features derive", "cargo", "add", &[("serde", "")], REG, PROJ, 0),
    c("cargo add tokio@1 -F full", "cargo", "add", &[("tokio", "1")], REG, PROJ, 0),
    c("cargo +nightly add rand", "cargo", "add", &[("rand", "")], REG, PROJ, 0),
    c("cargo install ripgrep", "cargo", "install", &[("ripgrep", "")], REG, GLOB, S),
    c("cargo install ripgrep --version 14.1.0", "cargo", "install", &[("ripgrep", "14.1.0")], REG, GLOB, S),
    c("cargo install --locked bat@0.24", "cargo", "install", &[("bat", "0.24")], REG, GLOB, S),
    c("cargo install --git https://github.com/u/tool", "cargo", "install", &[("https://github.com/u/tool", "")], GIT, GLOB, S),
    c("cargo install --path .", "cargo", "install", &[(".", "")], PATH, GLOB, S),
    c("cargo build --locked", "cargo", "build", &[], LOCK, PROJ, S),
    c("cargo test --frozen", "cargo", "test", &[], LOCK, PROJ, S),
    c("cargo fetch --locked", "cargo", "fetch", &[], LOCK, PROJ, 0),
    c("cargo fetch", "cargo", "fetch", &[], REG, PROJ, 0),
    c("cargo remove anyhow", "cargo", "remove", &[("anyhow", "")], REG, PROJ, 0),
    c("cargo update", "cargo", "update", &[], REG, PROJ, 0),
    c("cargo binstall ripgrep", "cargo", "binstall", &[("ripgrep", "")], URL, GLOB, S),
    // go
    c("go get github.com/pkg/errors@v0.9.1", "go", "get", &[("github.com/pkg/errors", "v0.9.1")], REG, PROJ, 0),
    c("go get -u ./...", "go", "get", &[("./...", "")], PATH, PROJ, 0),
    c("go install golang.org/x/tools/gopls@latest", "go", "install", &[("golang.org/x/tools/gopls", "latest")], REG, GLOB, 0),
    c("go install ./cmd/tool", "go", "install", &[("./cmd/tool", "")], PATH, GLOB, 0),
    c("go run golang.org/x/tools/cmd/stringer@v0.20.0 -type=Pill", "go", "run", &[("golang.org/x/tools/cmd/stringer", "v0.20.0")], REG, PROJ, F),
    c("go mod download", "go", "mod download", &[], LOCK, PROJ, 0),
    c("go mod download golang.org/x/text@v0.14.0", "go", "mod download", &[("golang.org/x/text", "v0.14.0")], REG, PROJ, 0),
    c("go mod tidy", "go", "mod tidy", &[], REG, PROJ, 0),
    // gem / bundle
    c("gem install rails", "gem", "install", &[("rails", "")], REG, GLOB, S),
    c("gem install rails -v 7.1.3", "gem", "install", &[("rails", "7.1.3")], REG, GLOB, S),
    c("gem install --user-install rubocop", "gem", "install", &[("rubocop", "")], REG, GLOB, S),
    c("gem install -i vendor/gems nokogiri", "gem", "install", &[("nokogiri", "")], REG, PROJ, S),
    c("bundle install", "bundle", "install", &[], REG, PROJ, S),
    c("bundle", "bundle", "install", &[], REG, PROJ, S),
    c("bundle install --frozen", "bundle", "install", &[], LOCK, PROJ, S),
    c("bundle add sidekiq --version '~> 7.0'", "bundle", "add", &[("sidekiq", "~> 7.0")], REG, PROJ, S),
    c("bundle update rails", "bundle", "update", &[("rails", "")], REG, PROJ, S),
    // apt
    c("apt-get install -y jq", "apt-get", "install", &[("jq", "")], REG, SYS, S),
    c("sudo apt-get install -y --no-install-recommends curl=7.88.1-10", "apt-get", "install", &[("curl", "7.88.1-10")], REG, SYS, S),
    c("apt install ./pkg.deb", "apt", "install", &[("./pkg.deb", "")], PATH, SYS, S),
    c("apt-get update", "apt-get", "update", &[], REG, SYS, 0),
    c("apt-get remove --purge nginx", "apt-get", "remove", &[("nginx", "")], REG, SYS, S),
    c("apt-get -y upgrade", "apt-get", "upgrade", &[], REG, SYS, S),
    c("DEBIAN_FRONTEND=noninteractive apt-get install -y tzdata", "apt-get", "install", &[("tzdata", "")], REG, SYS, S),
    // dnf / yum
    c("dnf install -y gcc make", "dnf", "install", &[("gcc", ""), ("make", "")], REG, SYS, S),
    c("yum install -y epel-release", "yum", "install", &[("epel-release", "")], REG, SYS, S),
    c("dnf groupinstall 'Development Tools'", "dnf", "group install", &[("Development Tools", "")], REG, SYS, S),
    c("dnf group install -y 'Development Tools'", "dnf", "group install", &[("Development Tools", "")], REG, SYS, S),
    c("dnf install https://x.test/pkg.rpm", "dnf", "install", &[("https://x.test/pkg.rpm", "")], URL, SYS, S),
    c("dnf remove httpd", "dnf", "remove", &[("httpd", "")], REG, SYS, S),
    // apk
    c("apk add --no-cache curl", "apk", "add", &[("curl", "")], REG, SYS, S),
    c("apk add --virtual .build-deps gcc musl-dev", "apk", "add", &[("gcc", ""), ("musl-dev", "")], REG, SYS, S),
    c("apk add curl=8.5.0-r0", "apk", "add", &[("curl", "8.5.0-r0")], REG, SYS, S),
    c("apk del curl", "apk", "remove", &[("curl", "")], REG, SYS, 0),
    // brew
    c("brew install jq", "brew", "install", &[("jq", "")], REG, GLOB, S),
    c("brew install --cask firefox", "brew", "install", &[("firefox", "")], REG, GLOB, S),
    c("brew install user/tap/thing", "brew", "install", &[("user/tap/thing", "")], GIT, GLOB, S),
    c("brew tap user/repo", "brew", "tap", &[("user/repo", "")], GIT, GLOB, 0),
    c("brew upgrade", "brew", "upgrade", &[], REG, GLOB, S),
    // conda
    c("conda install numpy=1.26", "conda", "install", &[("numpy", "1.26")], REG, GLOB, S),
    c("conda install -c conda-forge scipy", "conda", "install", &[("scipy", "")], REG, GLOB, S),
    c("conda create -n env python=3.12 pandas", "conda", "create", &[("python", "3.12"), ("pandas", "")], REG, GLOB, S),
    c("mamba install -y pytorch -c pytorch", "mamba", "install", &[("pytorch", "")], REG, GLOB, S),
    c("conda env create -f environment.yml", "conda", "env create", &[], REQ, GLOB, S),
    c("conda install --file requirements.txt", "conda", "install", &[], REQ, GLOB, S),
    c("conda install -p ./env numpy", "conda", "install", &[("numpy", "")], REG, PROJ, S),
];

#[test]
fn table_of_install_commands_parses_into_expected_intents() {
    assert!(TABLE.len() >= 80, "only {} cases", TABLE.len());
    let managers: std::collections::BTreeSet<_> = TABLE.iter().map(|c| c.manager).collect();
    for m in [
        "npm", "npx", "pnpm", "yarn", "bun", "pip", "uv", "pipx", "poetry", "cargo", "go", "gem",
        "bundle", "apt-get", "apt", "dnf", "yum", "apk", "brew", "conda",
    ] {
        assert!(managers.contains(m), "no case for {m}");
    }
    let mut failures = vec![];
    for case in TABLE {
        let Some(i) = parse(case.cmd) else {
            failures.push(format!("{}: parsed to None", case.cmd));
            continue;
        };
        let pkgs: Vec<PackageRef> = case
            .pkgs
            .iter()
            .map(|(n, v)| PackageRef::new(*n, Some(v)))
            .collect();
        let got = (
            i.manager.as_str(),
            i.operation.as_str(),
            &i.packages,
            i.source.as_str(),
            i.scope.as_str(),
            i.scripts_enabled,
            i.fetch_and_run,
        );
        let want = (
            case.manager,
            case.op,
            &pkgs,
            case.source,
            case.scope,
            case.bits & S != 0,
            case.bits & F != 0,
        );
        if got != want {
            failures.push(format!("{}:\n   got {got:?}\n  want {want:?}", case.cmd));
        }
        assert_eq!(i.argv, words(case.cmd), "{}: raw argv kept", case.cmd);
        assert_eq!(
            i.is_lockfile_install(),
            case.source == LOCK,
            "{}: lockfile",
            case.cmd
        );
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        TABLE.len(),
        failures.join("\n")
    );
}

#[test]
fn non_install_forms_are_none() {
    for cmd in [
        "ls -la",
        "git status",
        "npm",
        "npm test",
        "npm run build",
        "npm --version",
        "npm ls",
        "npm publish",
        "npx --no tsc",
        "cargo build",
        "cargo test",
        "cargo fmt",
        "cargo nextest run",
        "go build ./...",
        "go test ./...",
        "go run .",
        "go run main.go",
        "pip list",
        "pip freeze",
        "pip show requests",
        "yarn build",
        "yarn run test",
        "pnpm test",
        "pnpm run lint",
        "bun run dev",
        "bun test",
        "bun index.ts",
        "python script.py",
        "python -c 'import os'",
        "python -m venv .venv",
        "python3 -m pytest",
        "uv venv",
        "uv run --no-sync pytest",
        "poetry run pytest",
        "poetry show",
        "bundle exec rake",
        "gem list",
        "apt-cache search jq",
        "apt search jq",
        "apt-get -s clean",
        "dnf search vim",
        "apk info",
        "brew list",
        "brew info jq",
        "conda list",
        "conda run -n env python x.py",
        "pipx list",
    ] {
        assert_eq!(parse(cmd), None, "{cmd}");
    }
}

#[test]
fn unknown_forms_of_known_managers_are_unknown() {
    for cmd in [
        "npm frobnicate",
        "pip frob x",
        "cargo frob",
        "go frob",
        "apt-get frob x",
        "yarn set version stable",
        "uv frob",
        "gem frob",
        "bundle frob",
        "dnf copr enable user/repo",
        "apk frob",
        "brew frob",
        "conda frob",
        "pipx frob",
        "poetry frob",
    ] {
        let i = parse(cmd).unwrap_or_else(|| panic!("{cmd}: None"));
        assert!(i.is_unknown(), "{cmd}: {}", i.operation);
        assert!(!i.is_lockfile_install(), "{cmd}");
        assert!(!i.warnings.is_empty(), "{cmd}: no warning");
    }
}

#[test]
fn npm_i_lodash_4_names_lodash_and_4() {
    let i = parse("npm i lodash@4").unwrap();
    assert_eq!(i.packages, vec![PackageRef::new("lodash", Some("4"))]);
    assert_eq!(
        i.summary(),
        "npm install lodash@4 (registry, project, scripts on)"
    );
    assert!(i.warnings.is_empty(), "lodash is popular: {:?}", i.warnings);
    let json = serde_json::to_value(&i).unwrap();
    assert_eq!(json["packages"][0]["name"], "lodash");
    assert_eq!(json["packages"][0]["version"], "4");
}

#[test]
fn lookalike_names_carry_the_typosquat_warning() {
    for (cmd, popular) in [
        ("pip install reqeusts", "requests"),
        ("npm i lodahs", "lodash"),
        ("yarn add recat", "react"),
        ("cargo add sedre", "serde"),
        ("gem install rials", "rails"),
        ("pip install python_dateutill", "python-dateutil"),
        (
            "go get github.com/pkg/errros@v0.9.1",
            "github.com/pkg/errors",
        ),
        ("apt-get install -y crul", "curl"),
        ("npm i lodash@npm:lodahs@1", "lodash"),
    ] {
        let i = parse(cmd).unwrap();
        let w = i
            .warnings
            .iter()
            .find(|w| w.starts_with("lookalike:"))
            .unwrap_or_else(|| panic!("{cmd}: no lookalike warning in {:?}", i.warnings));
        assert!(w.contains(popular), "{cmd}: {w}");
    }
    for cmd in [
        "pip install requests",
        "npm i lodash",
        "cargo add serde_json",
        "go install golang.org/x/tools/gopls@latest",
    ] {
        assert!(parse(cmd).unwrap().warnings.is_empty(), "{cmd}");
    }
}

#[test]
fn unknown_names_carry_a_warning_unless_settings_say_not() {
    let i = parse("pip install zzqx-internal-thing").unwrap();
    assert!(
        i.warnings.iter().any(|w| w.starts_with("unknown:")),
        "{:?}",
        i.warnings
    );
    let dir = tempfile::tempdir().unwrap();
    let quiet = InstallSettings {
        warn_unknown_names: false,
        ..Default::default()
    };
    let i = parse_intent_with(
        &words("pip install zzqx-internal-thing"),
        dir.path(),
        Path::new(""),
        &quiet,
    )
    .unwrap();
    assert!(i.warnings.is_empty(), "{:?}", i.warnings);
}

#[test]
fn risky_options_carry_warnings() {
    for (cmd, needle) in [
        (
            "pip install --extra-index-url https://x.test/simple foo",
            "dependency confusion",
        ),
        ("pip install --trusted-host x.test foo", "TLS"),
        (
            "npm --registry=https://evil.test install foo",
            "non-default index",
        ),
        ("apt-get install --allow-unauthenticated jq", "signature"),
        ("apk add --allow-untrusted ./x.apk", "signature"),
        ("dnf install --nogpgcheck vim", "signature"),
        (
            "env npm_config_registry=https://evil.test npm install foo",
            "NPM_CONFIG".to_lowercase().as_str(),
        ),
        ("brew install user/tap/thing", "third-party"),
        ("conda install -c someone numpy", "channel someone"),
        ("bun add --trust esbuild", "install scripts"),
        ("npm i lodash@npm:lodahs@1", "alias"),
    ] {
        let i = parse(cmd).unwrap();
        assert!(
            i.warnings.iter().any(|w| w.contains(needle)),
            "{cmd}: {needle:?} not in {:?}",
            i.warnings
        );
    }
}

#[test]
fn lockfile_and_non_lockfile_forms_differ() {
    for (lock, plain) in [
        ("npm ci", "npm install"),
        ("pnpm install --frozen-lockfile", "pnpm install"),
        ("yarn install --immutable", "yarn install"),
        ("bun install --frozen-lockfile", "bun install"),
        ("cargo build --locked", "cargo fetch"),
        (
            "pip install --require-hashes -r requirements.txt",
            "pip install -r requirements.txt",
        ),
        ("uv sync --locked", "uv sync"),
        ("bundle install --deployment", "bundle install"),
        ("go mod download", "go mod tidy"),
    ] {
        let l = parse(lock).unwrap();
        let p = parse(plain).unwrap();
        assert!(l.is_lockfile_install(), "{lock}");
        assert!(l.lockfile.is_some(), "{lock}");
        assert!(!p.is_lockfile_install(), "{plain}");
    }
    // A package named next to a lockfile flag is a new package.
    assert!(!parse("pnpm install --frozen-lockfile left-pad")
        .unwrap()
        .is_lockfile_install());
}

// ------------------------------------------------------------ workspace files

fn ws(files: &[(&str, &str)]) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for (p, text) in files {
        let path = d.path().join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    d
}

fn names(i: &InstallIntent) -> Vec<String> {
    i.requirements
        .iter()
        .map(|p| match &p.version {
            Some(v) => format!("{}:{v}", p.name),
            None => p.name.clone(),
        })
        .collect()
}

#[test]
fn npm_install_with_a_lock_present_is_still_not_a_lockfile_install() {
    let d = ws(&[
        (
            "package.json",
            r#"{"dependencies":{"lodash":"^4.17.21"},"devDependencies":{"jest":"^29"}}"#,
        ),
        (
            "package-lock.json",
            r#"{"lockfileVersion":3,"packages":{"":{"name":"x"},
               "node_modules/lodash":{"version":"4.17.21"},
               "node_modules/jest":{"version":"29.7.0"},
               "node_modules/jest/node_modules/ms":{"version":"2.1.3"},
               "packages/a":{"version":"1.0.0"},
               "node_modules/a":{"link":true,"resolved":"packages/a"}}}"#,
        ),
    ]);
    let install = parse_intent_in(&words("npm install"), d.path()).unwrap();
    assert!(!install.is_lockfile_install());
    assert_eq!(names(&install), ["lodash:^4.17.21", "jest:^29"]);
    let ci = parse_intent_in(&words("npm ci"), d.path()).unwrap();
    assert!(ci.is_lockfile_install());
    assert_eq!(ci.lockfile.as_deref(), Some("package-lock.json"));
    let mut got = names(&ci);
    got.sort();
    assert_eq!(got, ["jest:29.7.0", "lodash:4.17.21", "ms:2.1.3"]);
}

#[test]
fn requirements_files_are_read_with_nesting_comments_and_hashes() {
    let d = ws(&[
        (
            "requirements.txt",
            "# top\n-r base.txt\nrequests==2.32.3 \\\n    --hash=sha256:abc\nreqeusts  # typo\n-e ./libs/x\n--index-url https://pypi.org/simple\n",
        ),
        ("base.txt", "numpy>=1.26; python_version > '3.9'\n-c constraints.txt\n"),
        ("constraints.txt", "urllib3<2\n"),
    ]);
    let i = parse_intent_in(&words("pip install -r requirements.txt"), d.path()).unwrap();
    assert_eq!(
        names(&i),
        ["numpy:>=1.26", "requests:==2.32.3", "reqeusts", "./libs/x"]
    );
    assert!(
        i.warnings
            .iter()
            .any(|w| w.starts_with("lookalike: reqeusts (from a requirements file)")),
        "{:?}",
        i.warnings
    );
}

#[test]
fn lock_and_manifest_formats_are_read() {
    let d = ws(&[
        (
            "Cargo.lock",
            "version = 4\n[[package]]\nname = \"me\"\nversion = \"0.1.0\"\n\n[[package]]\nname = \"serde\"\nversion = \"1.0.200\"\nsource = \"registry+https://github.com/rust-lang/crates.io-index\"\n",
        ),
        (
            "Cargo.toml",
            "[package]\nname=\"me\"\n[dependencies]\nserde = \"1\"\ntokio = { version = \"1\", features = [\"full\"] }\n",
        ),
        (
            "uv.lock",
            "version = 1\n[[package]]\nname = \"me\"\nversion = \"0.1.0\"\nsource = { editable = \".\" }\n[[package]]\nname = \"httpx\"\nversion = \"0.27.0\"\nsource = { registry = \"https://pypi.org/simple\" }\n",
        ),
        (
            "pyproject.toml",
            "[project]\nname=\"me\"\ndependencies = [\"httpx>=0.27\", \"rich\"]\n",
        ),
        (
            "Gemfile.lock",
            "GEM\n  remote: https://rubygems.org/\n  specs:\n    rack (3.0.8)\n    rails (7.1.3)\n      rack (>= 2)\n\nPLATFORMS\n  ruby\n",
        ),
        ("go.mod", "module x\n\ngo 1.22\n\nrequire (\n\tgithub.com/pkg/errors v0.9.1\n\tgolang.org/x/sync v0.7.0 // indirect\n)\nrequire github.com/google/uuid v1.6.0\n"),
        ("environment.yml", "name: e\nchannels:\n  - conda-forge\ndependencies:\n  - python=3.12\n  - numpy\n  - pip:\n    - requests==2.32.3\n"),
    ]);
    let get = |cmd: &str| names(&parse_intent_in(&words(cmd), d.path()).unwrap());
    assert_eq!(get("cargo build --locked"), ["serde:1.0.200"]);
    assert_eq!(get("cargo fetch"), ["serde:1", "tokio:1"]);
    assert_eq!(get("uv sync --locked"), ["httpx:0.27.0"]);
    assert_eq!(get("uv sync"), ["httpx:>=0.27", "rich"]);
    assert_eq!(
        get("bundle install --frozen"),
        ["rack:3.0.8", "rails:7.1.3"]
    );
    assert_eq!(
        get("go mod download"),
        [
            "github.com/pkg/errors:v0.9.1",
            "golang.org/x/sync:v0.7.0",
            "github.com/google/uuid:v1.6.0"
        ]
    );
    assert_eq!(
        get("conda env create -f environment.yml"),
        ["python:3.12", "numpy", "requests:==2.32.3"]
    );
}

#[test]
fn files_outside_the_workspace_or_irregular_or_too_large_are_not_read() {
    let outside = ws(&[("secret.txt", "leaked-package\n")]);
    let d = ws(&[("big.txt", &"a\n".repeat(4096))]);
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), d.path().join("link.txt"))
        .unwrap();
    std::os::unix::fs::symlink(d.path().join("big.txt"), d.path().join("inside-link.txt")).unwrap();
    nix::unistd::mkfifo(
        &d.path().join("fifo.txt"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    std::fs::create_dir(d.path().join("dir.txt")).unwrap();
    let small = InstallSettings {
        max_file_bytes: 1024,
        ..Default::default()
    };
    let run = |cmd: &str| parse_intent_with(&words(cmd), d.path(), Path::new(""), &small).unwrap();
    let secret = outside.path().join("secret.txt");
    for (cmd, why) in [
        (
            "pip install -r link.txt".to_string(),
            "outside the workspace",
        ),
        ("pip install -r ../x/../../etc/passwd".to_string(), ""),
        (
            format!("pip install -r {}", secret.display()),
            "outside the workspace",
        ),
        (
            "pip install -r big.txt".to_string(),
            "over the 1024-byte limit",
        ),
        (
            "pip install -r inside-link.txt".to_string(),
            "over the 1024-byte limit",
        ),
        ("pip install -r fifo.txt".to_string(), "not a regular file"),
        ("pip install -r dir.txt".to_string(), "not a regular file"),
        ("pip install -r missing.txt".to_string(), "missing.txt"),
    ] {
        let i = run(&cmd);
        assert!(i.requirements.is_empty(), "{cmd}: {:?}", i.requirements);
        assert!(
            i.warnings
                .iter()
                .any(|w| w.starts_with("not read:") && w.contains(why)),
            "{cmd}: {why:?} not in {:?}",
            i.warnings
        );
    }
    // Within the cap, the in-workspace symlink is followed.
    let ok = parse_intent_with(
        &words("pip install -r inside-link.txt"),
        d.path(),
        Path::new(""),
        &InstallSettings::default(),
    )
    .unwrap();
    assert_eq!(ok.requirements.len(), 4096);
}

#[test]
fn cwd_is_relative_to_the_root() {
    let d = ws(&[("sub/req.txt", "flask\n"), ("shared.txt", "django\n")]);
    let s = InstallSettings::default();
    let i = parse_intent_with(
        &words("pip install -r req.txt -r ../shared.txt"),
        d.path(),
        Path::new("sub"),
        &s,
    )
    .unwrap();
    assert_eq!(names(&i), ["flask", "django"]);
}

// ----------------------------------------------------------------- hardening

#[test]
fn hardening_disables_scripts_where_supported() {
    let s = InstallSettings::default();
    for (cmd, want) in [
        ("npm i lodash@4", "npm i lodash@4 --ignore-scripts"),
        ("npm ci", "npm ci --ignore-scripts"),
        ("pnpm add zod", "pnpm add zod --ignore-scripts"),
        ("yarn add left-pad", "yarn add left-pad --ignore-scripts"),
        ("yarn", "yarn --ignore-scripts"),
        ("bun add elysia", "bun add elysia --ignore-scripts"),
        ("apk add curl", "apk add curl --no-scripts"),
        ("npm install -- foo", "npm install --ignore-scripts -- foo"),
    ] {
        let i = parse(cmd).unwrap();
        let h = harden(&i, &s, false);
        assert_eq!(h.argv.join(" "), want);
        assert!(!h.scripts_enabled, "{cmd}");
        assert!(h.changes[0].starts_with("added "), "{cmd}: {:?}", h.changes);
    }
    // Approved with scripts, already off, or unsupported: argv unchanged.
    let i = parse("npm i lodash@4").unwrap();
    let h = harden(&i, &s, true);
    assert_eq!(h.argv, i.argv);
    assert!(h.scripts_enabled);
    for cmd in [
        "npm i --ignore-scripts x",
        "cargo install ripgrep",
        "gem install rails",
        "apt-get install -y jq",
        "npx cowsay",
    ] {
        let i = parse(cmd).unwrap();
        let h = harden(&i, &s, false);
        assert_eq!(h.argv, i.argv, "{cmd}");
    }
    let h = harden(&parse("cargo install ripgrep").unwrap(), &s, false);
    assert!(h.changes[0].contains("no switch"), "{:?}", h.changes);
    assert!(h.scripts_enabled);
    let off = InstallSettings {
        disable_scripts: false,
        ..Default::default()
    };
    let i = parse("npm i lodash@4").unwrap();
    assert_eq!(harden(&i, &off, false).argv, i.argv);
}

#[test]
fn hardening_makes_pip_binary_only_when_the_policy_says_so() {
    let s = InstallSettings {
        pip_binary_only: true,
        ..Default::default()
    };
    for (cmd, want) in [
        (
            "pip install requests",
            "pip install requests --only-binary :all:",
        ),
        (
            "python3 -m pip install -r requirements.txt",
            "python3 -m pip install -r requirements.txt --only-binary :all:",
        ),
        (
            "uv pip install httpx",
            "uv pip install httpx --only-binary :all:",
        ),
        ("uv add httpx", "uv add httpx --no-build"),
        ("uv run pytest -x", "uv run --no-build pytest -x"),
        ("uvx ruff check", "uvx --no-build ruff check"),
        (
            "pip install --only-binary :all: numpy",
            "pip install --only-binary :all: numpy",
        ),
    ] {
        let h = harden(&parse(cmd).unwrap(), &s, false);
        assert_eq!(h.argv.join(" "), want);
    }
    let h = harden(&parse("pip install requests").unwrap(), &s, false);
    assert!(!h.scripts_enabled);
    let h = harden(&parse("pip install -e .").unwrap(), &s, false);
    assert!(
        h.changes.iter().any(|c| c.contains("path source")),
        "{:?}",
        h.changes
    );
    assert!(h.scripts_enabled);
    let h = harden(
        &parse("pip install requests").unwrap(),
        &InstallSettings::default(),
        false,
    );
    assert_eq!(h.argv.join(" "), "pip install requests");
}

// ------------------------------------------------------------------ settings

#[test]
fn install_settings_defaults_and_policy_section() {
    let s: InstallSettings = toml::from_str("").unwrap();
    assert_eq!(s, InstallSettings::default());
    assert!(!s.allow_lockfile_installs && s.disable_scripts && !s.pip_binary_only);
    assert_eq!(s.max_file_bytes, 4 << 20);
    let p: crate::policy::PolicyFile =
        toml::from_str("[install]\nallow_lockfile_installs = true\npip_binary_only = true\n")
            .unwrap();
    assert!(p.install.allow_lockfile_installs && p.install.pip_binary_only);
    assert!(toml::from_str::<InstallSettings>("allow_lockfile_install = true").is_err());
}

#[test]
fn lockfile_hashes_show_what_an_install_changed() {
    let d = ws(&[("package-lock.json", "{\"v\":1}"), ("package.json", "{}")]);
    let i = parse("npm i lodash@4").unwrap();
    let before = lockfile_hashes(&i, d.path(), Path::new(""));
    let paths: Vec<&str> = before.iter().map(|h| h.path.as_str()).collect();
    assert_eq!(
        paths,
        ["package-lock.json", "npm-shrinkwrap.json", "package.json"]
    );
    assert_eq!(
        before[0].blake3.as_deref(),
        Some(blake3::hash(b"{\"v\":1}").to_hex().as_str())
    );
    assert_eq!(before[1].blake3, None, "absent");
    std::fs::write(d.path().join("package-lock.json"), "{\"v\":2}").unwrap();
    let after = lockfile_hashes(&i, d.path(), Path::new(""));
    assert_ne!(before[0], after[0]);
    assert_eq!(before[2], after[2]);
    // Requirement files named by the command are included; URLs are not.
    let d = ws(&[("req.txt", "flask\n")]);
    let i = parse("pip install -r req.txt -r https://x.test/r.txt").unwrap();
    let h = lockfile_hashes(&i, d.path(), Path::new(""));
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].path, "req.txt");
    assert!(h[0].blake3.is_some());
}

#[test]
fn arbitrary_argv_never_panics_and_known_managers_stay_known() {
    // Deterministic xorshift over a pool of tokens: managers, subcommands,
    // options that take values (also as the last word), odd bytes.
    const POOL: &[&str] = &[
        "npm",
        "npx",
        "pnpm",
        "yarn",
        "bun",
        "bunx",
        "pip",
        "python3",
        "-m",
        "uv",
        "uvx",
        "pipx",
        "poetry",
        "cargo",
        "go",
        "gem",
        "bundle",
        "apt-get",
        "dnf",
        "apk",
        "brew",
        "conda",
        "sudo",
        "env",
        "A=b",
        "install",
        "i",
        "add",
        "ci",
        "exec",
        "dlx",
        "create",
        "init",
        "run",
        "tool",
        "pip",
        "sync",
        "global",
        "workspace",
        "self",
        "env",
        "mod",
        "group",
        "-g",
        "-r",
        "-e",
        "-p",
        "-c",
        "-C",
        "-X",
        "--registry",
        "--with",
        "--from",
        "--spec",
        "--",
        "-",
        "@",
        "@/",
        "@x/",
        "=",
        "a@",
        "x==",
        "pkg @ ",
        "é",
        "-é",
        "-ré",
        "--x=é",
        "",
        " ",
        ".",
        "..",
        "./x",
        "git+",
        "http://",
        "a/b/c",
        "x[",
        "x]",
        ";",
        "::",
        "+nightly",
        "--frozen-lockfile",
        "--locked",
        "--require-hashes",
        "--ignore-scripts",
        "lodash@4",
    ];
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut some = 0;
    for _ in 0..20_000 {
        let len = (next() % 7) as usize;
        let argv: Vec<String> = (0..len)
            .map(|_| POOL[(next() % POOL.len() as u64) as usize].to_string())
            .collect();
        if let Some(i) = parse_intent(&argv) {
            some += 1;
            assert!(!i.manager.is_empty() && !i.operation.is_empty(), "{argv:?}");
            assert_eq!(i.argv, argv);
            let _ = harden(&i, &InstallSettings::default(), false);
            let _ = i.summary();
        }
    }
    assert!(some > 1_000, "only {some} parsed");
}

#[test]
fn only_plain_lockfile_installs_may_go_without_asking() {
    let allow = InstallSettings {
        allow_lockfile_installs: true,
        ..Default::default()
    };
    for cmd in [
        "npm ci",
        "pnpm install --frozen-lockfile",
        "yarn install --immutable",
        "cargo build --locked",
        "pip install --require-hashes -r requirements.txt",
        "uv sync --locked",
        "bundle install --deployment",
        "go mod download",
    ] {
        let i = parse(cmd).unwrap();
        assert_eq!(i.always_asks(), None, "{cmd}");
        assert!(allow.allows_without_asking(&i), "{cmd}");
        assert!(
            !InstallSettings::default().allows_without_asking(&i),
            "{cmd}: default settings"
        );
    }
    for (cmd, why) in [
        ("npm install", ""),
        ("npm i lodash@4", "new packages"),
        ("npm install -g typescript", "global"),
        ("sudo npm ci", "global or system"),
        ("npx cowsay", "fetch-and-run"),
        ("pip install git+https://x.test/r.git", "git"),
        ("npm frobnicate", "does not know"),
        ("apt-get install -y jq", "system"),
    ] {
        let i = parse(cmd).unwrap();
        assert!(!allow.allows_without_asking(&i), "{cmd}");
        if !why.is_empty() {
            assert!(i.always_asks().unwrap().contains(why), "{cmd}");
        }
    }
}

#[test]
fn npm_install_with_a_lock_present_and_npm_ci_differ_in_decision_under_ci() {
    use crate::policy::{ClassifyContext, Decision, Policy, Tier};
    let d = ws(&[
        ("package.json", r#"{"dependencies":{"lodash":"^4.17.21"}}"#),
        (
            "package-lock.json",
            r#"{"lockfileVersion":3,"packages":{"node_modules/lodash":{"version":"4.17.21"}}}"#,
        ),
    ]);
    let ci = Policy::builtin("ci").unwrap();
    let ctx = ClassifyContext {
        workspace: Some(d.path().to_path_buf()),
        cwd: None,
    };
    let with_lock = ci.classify("npm install", &ctx);
    let clean = ci.classify("npm ci", &ctx);
    assert_eq!(clean.tier, Tier::Install);
    assert_eq!(with_lock.tier, Tier::Install);
    assert_eq!(clean.decision, Decision::Allow, "{:?}", clean.reasons);
    assert_eq!(
        with_lock.decision,
        Decision::Deny,
        "{:?}",
        with_lock.reasons
    );
    // The guard's own reading of the same two commands agrees.
    let i = parse_intent_in(&words("npm install"), d.path()).unwrap();
    let c = parse_intent_in(&words("npm ci"), d.path()).unwrap();
    assert!(!i.is_lockfile_install() && c.is_lockfile_install());
    let allow = InstallSettings {
        allow_lockfile_installs: true,
        ..Default::default()
    };
    assert!(allow.allows_without_asking(&c) && !allow.allows_without_asking(&i));
}

#[test]
fn guard_fills_the_hardening_preview() {
    let s = InstallSettings::default();
    let i = guard(&words("npm i lodash@4"), None, &s).unwrap();
    let h = i.hardening.as_ref().unwrap();
    assert_eq!(h.argv.join(" "), "npm i lodash@4 --ignore-scripts");
    assert!(h.changes[0].contains("--ignore-scripts"));
    assert!(i
        .warnings
        .iter()
        .any(|w| w.starts_with("hardening: added --ignore-scripts")));
    let json = serde_json::to_value(&i).unwrap();
    assert_eq!(json["hardening"]["argv"][3], "--ignore-scripts");
    assert_eq!(json["packages"][0]["version"], "4");
    // Nothing to change: no hardening entry.
    assert!(
        guard(&words("go get github.com/pkg/errors@v0.9.1"), None, &s)
            .unwrap()
            .hardening
            .is_none()
    );
    assert!(guard(&words("ls -la"), None, &s).is_none());
    // With a workspace, requirements are read too.
    let d = ws(&[("requirements.txt", "flask\n")]);
    let i = guard(
        &words("pip install -r requirements.txt"),
        Some((d.path(), Path::new(""))),
        &s,
    )
    .unwrap();
    assert_eq!(names(&i), ["flask"]);
}

#[test]
fn approval_preview_of_npm_i_lodash_4_names_lodash_and_4() {
    use crate::approval::Preview;
    use crate::policy::{ClassifyContext, Decision, Policy, Tier};
    let p = Policy::builtin("default").unwrap();
    let c = p.classify("npm i lodash@4", &ClassifyContext::default());
    assert_eq!((c.tier, c.decision), (Tier::Install, Decision::Ask));
    let preview = Preview::exec(c, "", &p.hash);
    let intent = preview
        .classification
        .install
        .as_ref()
        .expect("install intent");
    assert_eq!(intent.packages, vec![PackageRef::new("lodash", Some("4"))]);
    let json = serde_json::to_string(&preview).unwrap();
    assert!(
        json.contains(r#""packages":[{"name":"lodash","version":"4"}]"#),
        "{json}"
    );
    // A lookalike's warning reaches the preview's own warnings.
    let c = p.classify("pip install reqeusts", &ClassifyContext::default());
    let preview = Preview::exec(c, "", &p.hash);
    assert!(
        preview
            .warnings
            .iter()
            .any(|w| w.starts_with("lookalike: reqeusts")),
        "{:?}",
        preview.warnings
    );
}

#[test]
fn ci_policy_allows_exactly_the_installs_the_guard_lets_through() {
    use crate::policy::{ClassifyContext, Decision, Policy, Tier};
    let ci = Policy::builtin("ci").unwrap();
    let ctx = ClassifyContext::default();
    let mut checked = 0;
    for case in TABLE {
        let c = ci.classify(case.cmd, &ctx);
        let Some(intent) = &c.install else {
            continue; // the classifier put it in another tier (write)
        };
        if case.cmd.starts_with("sudo ")
            || case.cmd.contains('=') && case.cmd.starts_with(char::is_uppercase)
        {
            // The classifier hands over the argv inside wrappers and
            // assignments, so `sudo` scope is not seen (see the report).
            continue;
        }
        checked += 1;
        // The classifier may hand over the unwrapped argv (`pip ...` for
        // `python3 -m pip ...`): everything else is the guard's reading.
        let mut mine = parse(case.cmd).unwrap();
        mine.argv = intent.argv.clone();
        assert_eq!(intent, &mine, "{}", case.cmd);
        let guard_allows = intent.is_lockfile_install() && intent.always_asks().is_none();
        assert_eq!(
            c.decision == Decision::Allow,
            guard_allows,
            "{}: {:?} {:?}",
            case.cmd,
            c.decision,
            c.reasons
        );
        if !guard_allows {
            assert_eq!(c.tier, Tier::Install, "{}", case.cmd);
        }
    }
    assert!(
        checked >= 140,
        "only {checked} table commands got an intent"
    );
}
