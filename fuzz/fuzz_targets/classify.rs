//! Fuzz the shell parser and classifier: any input must classify without a
//! panic or hang, and the fail-closed invariants must hold.
#![no_main]

use libfuzzer_sys::fuzz_target;
use warden_daemon::policy::{ClassifyContext, Decision, Policy, Tier};

thread_local! {
    static POLICIES: (Policy, Policy) = (
        Policy::builtin("default").expect("default"),
        Policy::builtin("ci").expect("ci"),
    );
}

fuzz_target!(|data: &[u8]| {
    let Ok(cmd) = std::str::from_utf8(data) else { return };
    POLICIES.with(|(default, ci)| {
        let ctx = ClassifyContext::default();
        let c = default.classify(cmd, &ctx);
        // The whole is at least as privileged as every part.
        assert!(c.parts.iter().all(|p| p.tier <= c.tier));
        // Anything above safe-read is never allowed by default.toml.
        if c.tier > Tier::SafeRead {
            assert!(c.decision > Decision::Allow, "{cmd:?}: {c:?}");
        }
        // A syntax error is never allowed, even where writes are allowed.
        let mut p = tree_sitter::Parser::new();
        p.set_language(&tree_sitter_bash::LANGUAGE.into()).unwrap();
        if p.parse(cmd, None).is_none_or(|t| t.root_node().has_error()) {
            assert!(c.tier >= Tier::Write && c.decision >= Decision::Ask, "{cmd:?}: {c:?}");
            assert!(ci.classify(cmd, &ctx).decision >= Decision::Ask, "{cmd:?}");
        }
        let _ = serde_json::to_string(&c);
    });
});
