//! Confined file tools (read, write, apply_patch, list, grep) through a
//! cap-std capability on the workspace root, and the path rules.
