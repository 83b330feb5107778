#!/usr/bin/env bash
# Seeds the fuzz corpus from Warden's classification tables (and the shared
# corpus when present), then runs the classify target for SECONDS (default 60).
# Needs a nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`).
set -euo pipefail
cd "$(dirname "$0")"
seconds="${1:-60}"
mkdir -p corpus/classify
i=0
for f in ../daemon/src/policy/corpus.tsv ../../shared/corpus/commands.tsv; do
  [ -f "$f" ] || continue
  grep -v '^#' "$f" | cut -f2 | while IFS= read -r line; do
    printf '%s' "$line" > "corpus/classify/seed-$(printf '%s' "$line" | sha1sum | cut -c1-16)"
  done
done
cargo +nightly fuzz run classify corpus/classify -- -max_total_time="$seconds" -max_len=4096 -timeout=5
