//! Interop with a stock gRPC stack: runs tests/python/interop.py, a Python
//! grpcio client generated from proto/warden.proto at test time, against the
//! real wardend. The Python packages (grpcio, grpcio-tools, grpcio-health-checking,
//! grpcio-reflection) are installed into a virtualenv under the target dir on
//! first use, so `cargo test` needs nothing installed by hand.

use std::path::PathBuf;
use std::process::Command;

const PACKAGES: &[&str] = &[
    "grpcio",
    "grpcio-tools",
    "grpcio-health-checking",
    "grpcio-reflection",
];

fn venv() -> PathBuf {
    let target = warden_tests::wardend_bin()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let venv = target.join("py-interop-venv");
    let py = venv.join("bin/python3");
    let ready = venv.join(".ready");
    if !ready.exists() {
        let st = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .expect("python3 is required for the interop test");
        assert!(st.success(), "python3 -m venv failed");
        let st = Command::new(&py)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(PACKAGES)
            .status()
            .unwrap();
        assert!(st.success(), "pip install {PACKAGES:?} failed");
        std::fs::write(&ready, "").unwrap();
    }
    py
}

#[test]
fn a_python_grpcio_client_creates_a_session_and_execs() {
    let py = venv();
    let root = warden_tests::repo_root();
    let out = Command::new(py)
        .arg(root.join("tests/python/interop.py"))
        .arg(warden_tests::wardend_bin())
        .arg(root.join("proto"))
        .env_remove("WARDEN_SOCKET")
        .output()
        .unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "python interop failed:\n{report}");
    assert!(report.contains("OK"), "{report}");
}
