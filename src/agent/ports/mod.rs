//! What the agent talks to outside the process, behind narrow interfaces so the rest is
//! testable: [`host`] (files, systemd, commands: the [`host::Host`] trait and its real
//! implementation), [`paths`] (the on-node locations GNA uses) and [`cluster`] (the few API
//! calls the agent makes: Node, Secrets, events). File access that follows no link is
//! [`crate::safe_fs`].

pub mod cluster;
pub mod host;
pub mod paths;
