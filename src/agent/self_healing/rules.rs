//! When an unhealthy component is restarted, and what is said about it (pure; GNA's
//! thresholds and wording).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::agent::pipeline::osc::NodeOsc;

/// How often kubelet and containerd are probed.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(30);
/// How long a component may stay unhealthy before it is restarted.
pub const MAX_FAILURE: Duration = Duration::from_secs(60);

/// A component the agent keeps alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    /// `kubelet.service`, probed on `http://127.0.0.1:10248/healthz`.
    Kubelet,
    /// `containerd.service`, probed through its version API.
    Containerd,
}

impl Component {
    /// Its unit.
    pub fn unit(self) -> &'static str {
        match self {
            Component::Kubelet => crate::agent::ports::host::KUBELET_UNIT,
            Component::Containerd => crate::agent::ports::host::CONTAINERD_UNIT,
        }
    }

    /// The event reason (GNA's: the component's name).
    pub fn reason(self) -> &'static str {
        match self {
            Component::Kubelet => "kubelet",
            Component::Containerd => "containerd",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Component::Kubelet => "Kubelet",
            Component::Containerd => "Containerd",
        }
    }
}

/// The components the last applied OSC runs: kubelet when it has a `kubelet.service` unit,
/// containerd when it configures containerd as the CRI or has a `containerd.service` unit.
/// Others are not this agent's to heal (a node without kubelet, or with a containerd the OSC
/// does not manage). Units of the OS extension (`status`) count too.
pub fn watched(osc: &NodeOsc) -> Vec<Component> {
    let has_unit = |name: &str| {
        osc.spec
            .units
            .iter()
            .chain(&osc.status.extension_units)
            .any(|unit| unit.name == name)
    };
    let mut components = Vec::new();
    if has_unit(Component::Kubelet.unit()) {
        components.push(Component::Kubelet);
    }
    if osc.spec.cri_config.is_some() || has_unit(Component::Containerd.unit()) {
        components.push(Component::Containerd);
    }
    components
}

/// Whether the Node's `Ready` condition is `True`.
pub fn node_ready(node: &k8s_openapi::api::core::v1::Node) -> bool {
    node.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

/// How long readiness toggles are remembered.
pub const TOGGLE_WINDOW: Duration = Duration::from_secs(600);
/// How many NotReady → Ready toggles within [`TOGGLE_WINDOW`] make the warning.
pub const MAX_TOGGLES: usize = 5;

/// GNA's readiness-toggle rule: the Node's `Ready` condition as the health checks see it; a
/// node whose kubelet keeps falling out of Ready gets a Warning (it is not restarted for it).
#[derive(Debug, Clone, Default)]
pub struct ReadinessToggles {
    last_ready: Option<bool>,
    toggles: VecDeque<Instant>,
}

impl ReadinessToggles {
    /// Takes the `Ready` condition seen at `now`: a change to Ready counts as a toggle (the
    /// first Ready after the agent started too, as in GNA), toggles older than
    /// [`TOGGLE_WINDOW`] are forgotten, and with [`MAX_TOGGLES`] or more left the warning's
    /// note is returned — at every check while that lasts, as GNA repeats it.
    pub fn observe(&mut self, ready: bool, now: Instant) -> Option<String> {
        if ready && self.last_ready != Some(true) {
            self.toggles.push_back(now);
        }
        self.last_ready = Some(ready);
        while self
            .toggles
            .front()
            .is_some_and(|at| now.saturating_duration_since(*at) > TOGGLE_WINDOW)
        {
            self.toggles.pop_front();
        }
        (self.toggles.len() >= MAX_TOGGLES).then(|| {
            format!(
                "Kubelet toggled between NotReady and Ready at least {MAX_TOGGLES} times in a 10m0s time window. Rebooting the node might help"
            )
        })
    }
}

/// What one probe leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Healthy, and was: nothing to say.
    Healthy,
    /// Healthy again after failures: a Normal event.
    Recovered(String),
    /// The first failure: a Warning event; wait.
    Failing(String),
    /// Failing, but not for long enough yet: nothing to say.
    Waiting,
    /// Failing for longer than [`MAX_FAILURE`]: a Warning event and a restart.
    Restart(String),
}

/// The failure history of one component.
#[derive(Debug, Clone, Default)]
pub struct Tracker {
    first_failure: Option<Instant>,
}

impl Tracker {
    /// Takes one probe's result (`Err`: why it failed) at `now`.
    pub fn observe(
        &mut self,
        component: Component,
        probe: Result<(), String>,
        now: Instant,
    ) -> Verdict {
        let title = component.title();
        let error = match probe {
            Ok(()) => {
                return match self.first_failure.take() {
                    Some(_) => Verdict::Recovered(format!("{title} is healthy")),
                    None => Verdict::Healthy,
                };
            }
            Err(error) => error,
        };
        let Some(first) = self.first_failure else {
            self.first_failure = Some(now);
            return Verdict::Failing(match component {
                Component::Kubelet => {
                    format!("{title} is unhealthy, health check error: {error}")
                }
                Component::Containerd => format!("{title} is unhealthy: {error}"),
            });
        };
        if now.saturating_duration_since(first) < MAX_FAILURE {
            return Verdict::Waiting;
        }
        // A restart starts the count again: the restarted component gets a minute too.
        self.first_failure = None;
        Verdict::Restart(match component {
            Component::Kubelet => format!(
                "{title} is unhealthy for more than 1m0s, restarting it. Health check error: {error}"
            ),
            Component::Containerd => {
                format!("{title} is unhealthy for more than 1m0s, restarting it: {error}")
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_component_failing_for_a_minute_is_restarted_once_then_given_a_minute_again() {
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let kubelet = Component::Kubelet;
        let mut tracker = Tracker::default();
        assert_eq!(tracker.observe(kubelet, Ok(()), at(0)), Verdict::Healthy);
        let failing = tracker.observe(kubelet, Err("connection refused".into()), at(30));
        assert_eq!(
            failing,
            Verdict::Failing("Kubelet is unhealthy, health check error: connection refused".into())
        );
        assert_eq!(
            tracker.observe(kubelet, Err("x".into()), at(60)),
            Verdict::Waiting
        );
        assert!(matches!(
            tracker.observe(kubelet, Err("x".into()), at(90)),
            Verdict::Restart(note) if note.starts_with("Kubelet is unhealthy for more than 1m0s, restarting it.")
        ));
        // After the restart: a first failure again, then healthy.
        assert!(matches!(
            tracker.observe(kubelet, Err("x".into()), at(120)),
            Verdict::Failing(_)
        ));
        assert_eq!(
            tracker.observe(kubelet, Ok(()), at(150)),
            Verdict::Recovered("Kubelet is healthy".into())
        );
    }

    #[test]
    fn only_what_the_osc_runs_is_watched() {
        let osc = |yaml: &str| crate::agent::pipeline::osc::decode(yaml.as_bytes()).unwrap();
        assert!(watched(&osc("spec: {units: [{name: app.service}]}\n")).is_empty());
        assert_eq!(
            watched(&osc(
                "spec: {units: [{name: kubelet.service}], criConfig: {name: containerd}}\n"
            )),
            [Component::Kubelet, Component::Containerd]
        );
        assert_eq!(
            watched(&osc(
                "spec: {}\nstatus: {extensionUnits: [{name: containerd.service}]}\n"
            )),
            [Component::Containerd]
        );
    }

    #[test]
    fn five_returns_to_ready_within_ten_minutes_warn_and_old_ones_are_forgotten() {
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let mut toggles = ReadinessToggles::default();
        // The first Ready counts; staying Ready does not.
        assert_eq!(toggles.observe(true, at(0)), None);
        assert_eq!(toggles.observe(true, at(30)), None);
        for round in 1..=3 {
            assert_eq!(toggles.observe(false, at(60 * round)), None);
            assert_eq!(toggles.observe(true, at(60 * round + 30)), None);
        }
        assert_eq!(toggles.observe(false, at(240)), None);
        let note = toggles.observe(true, at(270)).unwrap();
        assert_eq!(
            note,
            "Kubelet toggled between NotReady and Ready at least 5 times in a 10m0s time window. Rebooting the node might help"
        );
        // Repeated while it lasts, gone once the first toggles are older than the window.
        assert!(toggles.observe(true, at(300)).is_some());
        assert_eq!(toggles.observe(true, at(700)), None);
    }

    #[test]
    fn containerd_speaks_its_own_words() {
        let mut tracker = Tracker::default();
        let now = Instant::now();
        assert_eq!(
            tracker.observe(Component::Containerd, Err("dial".into()), now),
            Verdict::Failing("Containerd is unhealthy: dial".into())
        );
        assert_eq!(
            tracker.observe(Component::Containerd, Err("dial".into()), now + MAX_FAILURE),
            Verdict::Restart(
                "Containerd is unhealthy for more than 1m0s, restarting it: dial".into()
            )
        );
    }
}
