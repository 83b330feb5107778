//! Sessions, runs, steps, run state, resume planning, and the tool-call pipeline.
