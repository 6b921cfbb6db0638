//! The actuators of the three extension kinds, each in its own module, plugged into the
//! generic reconciler of [`crate::extension`].

pub mod containerruntime;
pub mod operatingsystemconfig;
pub mod worker;
