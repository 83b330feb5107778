//! Escape attempts against the sandbox (issue #3, "Attack suite"). Each case
//! asserts the attack failed and a host marker is untouched, and names the
//! real-world escape it stands for.

mod sandbox_common;

use sandbox_common::main_with;

fn main() {
    main_with(&[]);
}
