//! How many machines a MachineDeployment should have (pure).
//!
//! The rules of Gardener's generic Worker actuator (`deployMachineDeployments` in
//! `extensions/pkg/controller/worker/genericactuator/actuator_reconcile.go`), first match
//! wins:
//!
//! 1. the shoot is hibernated → 0;
//! 2. no pool of the Worker uses the cluster-autoscaler (every pool has min = max) → min;
//! 3. the deployment does not exist yet → the replicas recorded in the restored machine
//!    state, or min;
//! 4. the shoot is waking up (every existing deployment is at 0) → min;
//! 5. the current value is below min → min;
//! 6. the current value is above max → max;
//! 7. otherwise the current value stays: the cluster-autoscaler owns it.
//!
//! Writing min on every reconcile (rule 7 ignored) would fight the autoscaler; forgetting
//! rule 4 would leave a woken-up shoot without nodes.

/// What the decision depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaInputs {
    /// `spec.hibernation.enabled` of the shoot.
    pub hibernation_enabled: bool,
    /// Some pool of the Worker has max > min.
    pub autoscaler_used: bool,
    /// `spec.replicas` of the existing deployment, if it exists.
    pub existing: Option<i32>,
    /// Replicas from the restored machine state, if any.
    pub restored: Option<i32>,
    /// Every existing deployment of the namespace is at 0 replicas.
    pub all_existing_at_zero: bool,
    /// The deployment's share of the pool minimum.
    pub minimum: i32,
    /// The deployment's share of the pool maximum.
    pub maximum: i32,
}

/// Which rule decided (for logs and events).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaRule {
    /// Rule 1.
    Hibernated,
    /// Rule 2.
    NoAutoscaler,
    /// Rule 3, nothing restored.
    New,
    /// Rule 3 with restored state.
    Restored,
    /// Rule 4.
    WakingUp,
    /// Rule 5.
    RaisedToMinimum,
    /// Rule 6.
    LoweredToMaximum,
    /// Rule 7.
    KeptForAutoscaler,
}

impl ReplicaRule {
    /// Short text for events.
    pub fn as_str(self) -> &'static str {
        match self {
            ReplicaRule::Hibernated => "hibernated",
            ReplicaRule::NoAutoscaler => "no autoscaler",
            ReplicaRule::New => "new",
            ReplicaRule::Restored => "restored",
            ReplicaRule::WakingUp => "waking up",
            ReplicaRule::RaisedToMinimum => "raised to minimum",
            ReplicaRule::LoweredToMaximum => "lowered to maximum",
            ReplicaRule::KeptForAutoscaler => "kept for the autoscaler",
        }
    }
}

/// The replicas and the rule that chose them.
pub fn decide(inputs: ReplicaInputs) -> (i32, ReplicaRule) {
    let ReplicaInputs {
        hibernation_enabled,
        autoscaler_used,
        existing,
        restored,
        all_existing_at_zero,
        minimum,
        maximum,
    } = inputs;
    if hibernation_enabled {
        return (0, ReplicaRule::Hibernated);
    }
    if !autoscaler_used {
        return (minimum, ReplicaRule::NoAutoscaler);
    }
    let Some(current) = existing else {
        return match restored {
            Some(replicas) => (replicas, ReplicaRule::Restored),
            None => (minimum, ReplicaRule::New),
        };
    };
    if all_existing_at_zero {
        return (minimum, ReplicaRule::WakingUp);
    }
    if current < minimum {
        return (minimum, ReplicaRule::RaisedToMinimum);
    }
    if current > maximum {
        return (maximum, ReplicaRule::LoweredToMaximum);
    }
    (current, ReplicaRule::KeptForAutoscaler)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: ReplicaInputs = ReplicaInputs {
        hibernation_enabled: false,
        autoscaler_used: true,
        existing: Some(2),
        restored: None,
        all_existing_at_zero: false,
        minimum: 1,
        maximum: 3,
    };

    #[test]
    fn replica_rules_table() {
        let rows: [(&str, ReplicaInputs, (i32, ReplicaRule)); 11] = [
            (
                "hibernated beats everything",
                ReplicaInputs {
                    hibernation_enabled: true,
                    existing: Some(3),
                    restored: Some(2),
                    ..BASE
                },
                (0, ReplicaRule::Hibernated),
            ),
            (
                "without autoscaler min is written even over a current value",
                ReplicaInputs {
                    autoscaler_used: false,
                    existing: Some(5),
                    minimum: 2,
                    maximum: 2,
                    ..BASE
                },
                (2, ReplicaRule::NoAutoscaler),
            ),
            (
                "new deployment starts at min",
                ReplicaInputs {
                    existing: None,
                    ..BASE
                },
                (1, ReplicaRule::New),
            ),
            (
                "new deployment with restored state keeps the recorded count",
                ReplicaInputs {
                    existing: None,
                    restored: Some(3),
                    ..BASE
                },
                (3, ReplicaRule::Restored),
            ),
            (
                "restored state is ignored once the deployment exists",
                ReplicaInputs {
                    existing: Some(2),
                    restored: Some(3),
                    ..BASE
                },
                (2, ReplicaRule::KeptForAutoscaler),
            ),
            (
                "waking up goes to min",
                ReplicaInputs {
                    existing: Some(0),
                    all_existing_at_zero: true,
                    minimum: 2,
                    ..BASE
                },
                (2, ReplicaRule::WakingUp),
            ),
            (
                "below min is raised",
                ReplicaInputs {
                    existing: Some(0),
                    minimum: 2,
                    ..BASE
                },
                (2, ReplicaRule::RaisedToMinimum),
            ),
            (
                "above max is lowered",
                ReplicaInputs {
                    existing: Some(7),
                    ..BASE
                },
                (3, ReplicaRule::LoweredToMaximum),
            ),
            (
                "within limits the autoscaler's value stays",
                BASE,
                (2, ReplicaRule::KeptForAutoscaler),
            ),
            (
                "at max the value stays",
                ReplicaInputs {
                    existing: Some(3),
                    ..BASE
                },
                (3, ReplicaRule::KeptForAutoscaler),
            ),
            (
                "a zone with min 0 may stay at 0 when others run",
                ReplicaInputs {
                    existing: Some(0),
                    minimum: 0,
                    ..BASE
                },
                (0, ReplicaRule::KeptForAutoscaler),
            ),
        ];
        for (name, inputs, expected) in rows {
            assert_eq!(decide(inputs), expected, "{name}");
        }
    }
}
