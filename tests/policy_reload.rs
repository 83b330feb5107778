//! Policy reload end to end: a real `wardend --policy FILE` reloads on
//! SIGHUP and on a ReloadPolicy call; a bad file or TOML is refused and the
//! old policy stays in force.

use std::time::{Duration, Instant};

use warden_tests::{pb, Daemon};

const GOOD_A: &str = "description = \"a\"\n[tiers]\nsafe-read = \"allow\"\nwrite = \"ask\"\nnetwork = \"ask\"\ninstall = \"ask\"\ndestructive = \"deny\"\n";
const GOOD_B: &str = "description = \"b\"\n[tiers]\nsafe-read = \"allow\"\nwrite = \"deny\"\nnetwork = \"deny\"\ninstall = \"deny\"\ndestructive = \"deny\"\n";
const BAD_EXAMPLE: &str = "[tiers]\nsafe-read = \"allow\"\nwrite = \"ask\"\nnetwork = \"ask\"\ninstall = \"ask\"\ndestructive = \"deny\"\n[[rule]]\nid = \"r\"\nargv = [\"git\", \"push\"]\ndecision = \"ask\"\nexamples = { match = [\"git pull\"] }\n";

async fn current(d: &Daemon) -> (String, String) {
    let info = d
        .client()
        .await
        .policy()
        .get_policy(pb::GetPolicyRequest::default())
        .await
        .expect("GetPolicy")
        .into_inner();
    (info.hash, info.toml)
}

async fn decision(d: &Daemon, cmd: &str) -> i32 {
    d.client()
        .await
        .policy()
        .classify(pb::ClassifyRequest {
            command: cmd.into(),
            ..Default::default()
        })
        .await
        .expect("Classify")
        .into_inner()
        .decision
}

fn hup(d: &Daemon) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(d.pid() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
}

/// Waits until the daemon log contains `needle` (the reload is asynchronous).
fn wait_log(d: &Daemon, needle: &str, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while d.log().matches(needle).count() < count {
        assert!(
            Instant::now() < deadline,
            "no {needle:?} in the daemon log:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_and_reload_policy_are_atomic() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.toml");
    std::fs::write(&file, GOOD_A).unwrap();
    let d = Daemon::start_with(&["--policy", file.to_str().unwrap()]);
    let (hash_a, toml) = current(&d).await;
    assert_eq!(toml, GOOD_A);
    assert_eq!(decision(&d, "touch x").await, pb::Decision::Ask as i32);

    // A file whose rule examples fail is refused on SIGHUP; A stays.
    std::fs::write(&file, BAD_EXAMPLE).unwrap();
    hup(&d);
    wait_log(&d, "SIGHUP: policy refused", 1);
    assert_eq!(current(&d).await.0, hash_a);
    assert!(d.log().contains("should match but does not"), "{}", d.log());

    // A good file replaces it.
    std::fs::write(&file, GOOD_B).unwrap();
    hup(&d);
    wait_log(&d, "SIGHUP: policy reloaded", 1);
    let (hash_b, toml) = current(&d).await;
    assert_ne!(hash_b, hash_a);
    assert_eq!(toml, GOOD_B);
    assert_eq!(decision(&d, "touch x").await, pb::Decision::Deny as i32);

    // ReloadPolicy with bad TOML: InvalidArgument, B stays.
    let err = d
        .client()
        .await
        .policy()
        .reload_policy(pb::ReloadPolicyRequest {
            policy_toml: "[tiers]\nsafe-read = \"sometimes\"\n".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
    assert!(err.message().contains("old one stays"), "{err}");
    assert_eq!(current(&d).await.0, hash_b);

    // ReloadPolicy without TOML re-reads the file, as SIGHUP does.
    std::fs::write(&file, GOOD_A).unwrap();
    d.client()
        .await
        .policy()
        .reload_policy(pb::ReloadPolicyRequest::default())
        .await
        .expect("ReloadPolicy");
    assert_eq!(current(&d).await.0, hash_a);
}
