//! When an unhealthy component is restarted, and what is said about it (pure; GNA's
//! thresholds and wording).

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
            Component::Kubelet => "kubelet.service",
            Component::Containerd => "containerd.service",
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
