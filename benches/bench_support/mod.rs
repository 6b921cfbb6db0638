//! Support only the benches use, on top of the test support (`test/support`, compiled into the
//! benches as `crate::support`): [`side_by_side`] measures the operator and a Go peer in the same
//! run and writes their tables into `docs/benchmarks.md`; [`peer`] builds and runs the peers.
//! Kept out of `test/support` so the test binaries do not compile it.

pub mod peer;
pub mod side_by_side;
