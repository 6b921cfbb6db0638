//! The node Lease ([`lease`]), renewed from a thread of its own ([`heartbeat`]) so that no
//! input to the main loop can stop it.

pub mod heartbeat;
pub mod lease;
