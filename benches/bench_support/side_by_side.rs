//! Bench support: benches that measure the operator and a Go peer ([`super::peer`]) in the same
//! run, on the same kube-apiserver, over the same objects and phases, alternating (ours,
//! peer, ours, peer, …) with a cleanup between runs; and the tables they write into
//! `docs/benchmarks.md` (medians of the runs, ours beside the peer and the ratio).
//!
//! Per phase a run records the time until the phase's goal holds, the contender's requests
//! (kube-apiserver's audit log, by verb and resource, 404 and 409 apart), its CPU time and
//! the kube-apiserver's; per run the contender's peak RSS. Where the peer cannot be built its
//! figures of the last run that measured it (kept in the section as a comment) are shown,
//! marked as not measured in this run.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use gardener_extension_node::api::{ExtensionObject, LastOperationType};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::peer::{Peer, PeerOptions, PeerProcess};
use crate::support::audit::{self, AuditLog, Mix};
use crate::support::gardener::check_ready;
use crate::support::operator::OperatorProcess;

/// Who acts in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The operator.
    Ours,
    /// The Go peer.
    Peer,
}

/// A running contender.
pub enum Contender {
    /// The operator.
    Ours(OperatorProcess),
    /// The Go peer.
    Peer(PeerProcess),
}

/// The operator's requests: its `User-Agent` names the subcommand.
pub fn from_operator(user_agent: &str) -> bool {
    user_agent.starts_with("gardener-extension-node/") && user_agent.ends_with("(operator)")
}

impl Contender {
    /// Which side it is.
    pub fn side(&self) -> Side {
        match self {
            Contender::Ours(_) => Side::Ours,
            Contender::Peer(_) => Side::Peer,
        }
    }

    /// Whether a request's `User-Agent` is this contender's.
    pub fn is_client(&self, user_agent: &str) -> bool {
        match self {
            Contender::Ours(_) => from_operator(user_agent),
            Contender::Peer(peer) => peer.peer().is_client(user_agent),
        }
    }

    fn pid(&self) -> u32 {
        match self {
            Contender::Ours(operator) => operator.pid(),
            Contender::Peer(peer) => peer.pid(),
        }
    }

    fn cpu_seconds(&self) -> f64 {
        crate::support::process::cpu_seconds(self.pid()).unwrap_or(0.0)
    }

    /// Waits until it reconciles: ours answers `/readyz`, the peer has started its workers.
    pub async fn wait_ready(&mut self) {
        match self {
            Contender::Ours(operator) => {
                let operator = &*operator;
                crate::support::wait_for("operator ready", Duration::from_secs(60), || async {
                    match operator.http_get("/readyz").await {
                        Some((200, _)) => Ok(()),
                        other => Err(format!("{other:?}")),
                    }
                })
                .await;
            }
            Contender::Peer(peer) => peer.wait_started(Duration::from_secs(120)).await,
        }
    }

    fn kill(&mut self) {
        match self {
            Contender::Ours(operator) => operator.kill(),
            Contender::Peer(peer) => peer.kill(),
        }
    }
}

/// What gardenlet does to a bench's objects, phase by phase; the same for both sides except
/// what tells the objects apart for them (e.g. the OSC type).
#[allow(async_fn_in_trait)] // used by the bench binaries' own single task
pub trait Workload {
    /// The phases: a short name for column heads and the long one for rows.
    fn phases(&self) -> &[(&'static str, &'static str)];
    /// Starts phase `phase` (what gardenlet does: create, annotate, delete) for `side`.
    async fn act(&self, phase: usize, side: Side);
    /// Waits until phase `phase`'s goal holds (every object ready, or gone).
    async fn settled(&self, phase: usize);
    /// Removes what a run leaves behind (secrets, ManagedResources), so every run starts from
    /// the same state.
    async fn clean(&self);
}

/// One phase of one run.
#[derive(Debug, Clone, Default)]
pub struct PhaseRun {
    /// From the first write of the phase until its goal holds.
    pub time: Duration,
    /// The contender's requests from the phase's start until it has been quiet.
    pub requests: Mix,
    /// The contender's CPU time over the same span.
    pub cpu: f64,
    /// kube-apiserver's CPU time over the same span (it also serves the bench's writes and
    /// its watch of the objects, alike for both sides).
    pub apiserver_cpu: f64,
}

/// One run of one side.
#[derive(Debug, Clone)]
pub struct Run {
    /// Who ran.
    pub side: Side,
    /// Its phases.
    pub phases: Vec<PhaseRun>,
    /// Its peak RSS (VmHWM) at the end of the run, KiB.
    pub peak_rss_kib: u64,
    /// Its RSS (VmRSS) after the last phase, KiB.
    pub rss_end_kib: u64,
}

/// Runs `runs` rounds of ours and then the peer (when `start` can start one: `with_peer`),
/// each from a freshly started process, on the audit log of the shared control plane.
/// Between runs the contender is killed and the workload cleaned.
pub async fn alternate<W: Workload>(
    workload: &W,
    runs: usize,
    quiet: Duration,
    periodic: &dyn Fn(&str) -> bool,
    with_peer: bool,
    mut start: impl FnMut(Side) -> Contender,
) -> (Vec<Run>, Vec<Run>) {
    let mut log = AuditLog::from_end(crate::support::audit_log_path());
    let mut ours = Vec::new();
    let mut peers = Vec::new();
    for round in 0..runs {
        let sides: &[Side] = if with_peer {
            &[Side::Ours, Side::Peer]
        } else {
            &[Side::Ours]
        };
        for side in sides {
            eprintln!("run {} of {runs}: {side:?}", round + 1);
            let mut contender = start(*side);
            let run = measure(workload, &mut contender, &mut log, quiet, periodic).await;
            contender.kill();
            workload.clean().await;
            // What the cleanup did is nobody's.
            let _ = log.take(|_| true);
            eprintln!(
                "  {side:?}: {} requests, {:.1?}",
                run.phases
                    .iter()
                    .map(|p| audit::total(&p.requests))
                    .sum::<usize>(),
                run.phases.iter().map(|p| p.time).sum::<Duration>(),
            );
            match side {
                Side::Ours => ours.push(run),
                Side::Peer => peers.push(run),
            }
        }
    }
    (ours, peers)
}

/// What [`compare`] found.
pub struct Comparison {
    /// Ours, medians of the runs.
    pub ours: Summary,
    /// The peer's column.
    pub peer: PeerFigures,
    /// The flags the peer was started with (described, see
    /// [`PeerProcess::described_flags`]); empty when it was not started.
    pub peer_flags: Vec<String>,
    /// The flags ours was started with (besides the kubeconfig and the HTTP address).
    pub ours_flags: Vec<String>,
}

/// What a bench compares: its section, the control plane, the peer and both sides' flags.
pub struct Sitting<'a> {
    /// The bench's section of `docs/benchmarks.md`.
    pub section: &'a str,
    /// The admin kubeconfig of the shared control plane.
    pub kubeconfig: &'a str,
    /// The Go peer.
    pub peer: Peer,
    /// Ours' flags besides the kubeconfig and the HTTP address.
    pub ours_flags: &'a [String],
    /// The peer's options.
    pub peer_options: &'a PeerOptions,
    /// Runs per side.
    pub runs: usize,
    /// How long a contender must have been silent before a phase's count is closed.
    pub quiet: Duration,
    /// The requests (audit keys) that come periodically whatever the phase (heartbeat,
    /// health checks): counted, but a contender sending only these is quiet.
    pub periodic: fn(&str) -> bool,
}

/// What a bench sets for a [`contest`]: its section, the peer, the flags ours gets for its
/// controller, and how it measures.
pub struct Contest<'a> {
    /// The bench's section of `docs/benchmarks.md`.
    pub section: &'a str,
    /// The Go peer.
    pub peer: Peer,
    /// Ours' own flags (`--controllers=…` and what the bench needs); [`contest`] adds the
    /// workers and the heartbeat namespace, which both sides get alike.
    pub ours_flags: &'a [&'a str],
    /// `--max-concurrent-reconciles` of both.
    pub workers: usize,
    /// Runs per side.
    pub runs: usize,
    /// See [`Sitting::quiet`].
    pub quiet: Duration,
    /// See [`Sitting::periodic`].
    pub periodic: fn(&str) -> bool,
}

/// The heartbeat namespace of `side`: each side renews its own Lease.
pub fn heartbeat_namespace(side: Side) -> String {
    format!("bench-heartbeat-{side:?}").to_lowercase()
}

/// Creates both heartbeat namespaces and runs [`compare`] with the settings both sides share.
pub async fn contest<W: Workload>(
    workload: &W,
    client: &Client,
    kubeconfig: &str,
    contest: &Contest<'_>,
) -> Comparison {
    for side in [Side::Ours, Side::Peer] {
        crate::support::create_namespace(client, &heartbeat_namespace(side)).await;
    }
    let mut ours_flags: Vec<String> = contest.ours_flags.iter().map(|f| f.to_string()).collect();
    ours_flags.push(format!("--max-concurrent-reconciles={}", contest.workers));
    ours_flags.push(format!(
        "--heartbeat-namespace={}",
        heartbeat_namespace(Side::Ours)
    ));
    let peer_options = PeerOptions {
        max_concurrent_reconciles: contest.workers,
        heartbeat_namespace: heartbeat_namespace(Side::Peer),
    };
    compare(
        workload,
        &Sitting {
            section: contest.section,
            kubeconfig,
            peer: contest.peer,
            ours_flags: &ours_flags,
            peer_options: &peer_options,
            runs: contest.runs,
            quiet: contest.quiet,
            periodic: contest.periodic,
        },
    )
    .await
}

/// Builds the peer and runs [`alternate`]: ours started with its flags (plus the kubeconfig
/// and an HTTP port), the peer with its options. When the peer cannot be built, only ours
/// runs and the peer's column comes from what the bench's section of `docs/benchmarks.md`
/// kept ([`PeerFigures::not_measured`]).
pub async fn compare<W: Workload>(workload: &W, sitting: &Sitting<'_>) -> Comparison {
    let peer = sitting.peer;
    let binary = peer.build();
    if let Err(why) = &binary {
        eprintln!("{} not measured in this run: {why}", peer.binary());
    }
    let mut peer_flags = Vec::new();
    let ours_flags: Vec<&str> = sitting.ours_flags.iter().map(String::as_str).collect();
    let (ours, peers) = alternate(
        workload,
        sitting.runs,
        sitting.quiet,
        &sitting.periodic,
        binary.is_ok(),
        |side| match side {
            Side::Ours => Contender::Ours(OperatorProcess::start(sitting.kubeconfig, &ours_flags)),
            Side::Peer => {
                let process = PeerProcess::start(
                    peer,
                    binary.as_ref().expect("started only when built"),
                    sitting.kubeconfig,
                    sitting.peer_options,
                );
                peer_flags = process.described_flags().to_vec();
                Contender::Peer(process)
            }
        },
    )
    .await;
    Comparison {
        ours: summarize(&ours, &sitting.periodic),
        peer: match binary {
            Ok(_) => PeerFigures::Measured(summarize(&peers, &sitting.periodic)),
            Err(why) => PeerFigures::not_measured(sitting.section, why),
        },
        peer_flags,
        ours_flags: sitting.ours_flags.to_vec(),
    }
}

/// The peer's flags as a bench's text quotes them: in backticks, or that it did not run.
pub fn described_flags(flags: &[String]) -> String {
    if flags.is_empty() {
        "(not started in this run)".to_string()
    } else {
        format!("`{}`", flags.join(" "))
    }
}

/// One run of a started contender: waits until it is ready and quiet, then the phases.
pub async fn measure<W: Workload>(
    workload: &W,
    contender: &mut Contender,
    log: &mut AuditLog,
    quiet: Duration,
    periodic: &dyn Fn(&str) -> bool,
) -> Run {
    contender.wait_ready().await;
    // Its start-up (lists, watches, heartbeat) is not part of any phase.
    log.take_coded_when_quiet(|ua| contender.is_client(ua), quiet, periodic)
        .await;
    let apiserver_cpu = || {
        crate::support::apiserver_pid()
            .and_then(crate::support::process::cpu_seconds)
            .unwrap_or(0.0)
    };
    let mut phases = Vec::new();
    for phase in 0..workload.phases().len() {
        let cpu = contender.cpu_seconds();
        let api = apiserver_cpu();
        let started = Instant::now();
        workload.act(phase, contender.side()).await;
        workload.settled(phase).await;
        let time = started.elapsed();
        let requests = log
            .take_coded_when_quiet(|ua| contender.is_client(ua), quiet, periodic)
            .await;
        phases.push(PhaseRun {
            time,
            requests,
            cpu: contender.cpu_seconds() - cpu,
            apiserver_cpu: apiserver_cpu() - api,
        });
    }
    let pid = contender.pid();
    Run {
        side: contender.side(),
        phases,
        peak_rss_kib: crate::support::process::peak_rss_kib(pid).unwrap_or(0),
        rss_end_kib: crate::support::process::rss_kib(pid).unwrap_or(0),
    }
}

/// The medians of one side's runs, as the tables show them and the section keeps them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    /// When measured (`YYYY-MM-DD`).
    pub date: String,
    /// Per phase, then the sum of all phases.
    pub phases: Vec<PhaseSummary>,
    /// Median peak RSS (VmHWM), MiB.
    pub peak_rss_mib: f64,
    /// Median RSS after the last phase (VmRSS), MiB.
    pub rss_end_mib: f64,
    /// Every run's request total (all phases).
    pub run_requests: Vec<usize>,
    /// Every run's peak RSS, MiB.
    pub run_peak_rss_mib: Vec<f64>,
}

/// Medians of one phase over the runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PhaseSummary {
    /// Seconds until the goal held.
    pub time_s: f64,
    /// Requests.
    pub requests: f64,
    /// Of them the periodic ones (see [`Sitting::periodic`]).
    #[serde(default)]
    pub periodic: f64,
    /// Requests answered 404.
    pub not_found: f64,
    /// Requests answered 409.
    pub conflict: f64,
    /// The contender's CPU seconds.
    pub cpu_s: f64,
    /// kube-apiserver's CPU seconds.
    pub apiserver_cpu_s: f64,
    /// Requests by key (see [`audit::Mix`]), each the median over the runs.
    pub mix: BTreeMap<String, f64>,
}

fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// `value` to 3 decimals (what the tables show and the section keeps).
fn round(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

fn summarize_phases(phases: &[&PhaseRun], periodic: &dyn Fn(&str) -> bool) -> PhaseSummary {
    let of = |f: &dyn Fn(&PhaseRun) -> f64| round(median(phases.iter().map(|p| f(p)).collect()));
    let keys: BTreeSet<&String> = phases.iter().flat_map(|p| p.requests.keys()).collect();
    PhaseSummary {
        time_s: of(&|p| p.time.as_secs_f64()),
        requests: of(&|p| audit::total(&p.requests) as f64),
        periodic: of(&|p| {
            p.requests
                .iter()
                .filter(|(key, _)| periodic(key))
                .map(|(_, count)| *count)
                .sum::<usize>() as f64
        }),
        not_found: of(&|p| audit::answered(&p.requests, 404) as f64),
        conflict: of(&|p| audit::answered(&p.requests, 409) as f64),
        cpu_s: of(&|p| p.cpu),
        apiserver_cpu_s: of(&|p| p.apiserver_cpu),
        mix: keys
            .into_iter()
            .map(|key| {
                let value = of(&|p| p.requests.get(key).copied().unwrap_or(0) as f64);
                (key.clone(), value)
            })
            .collect(),
    }
}

/// The medians of `runs` (one side's).
pub fn summarize(runs: &[Run], periodic: &dyn Fn(&str) -> bool) -> Summary {
    let count = runs.first().map(|r| r.phases.len()).unwrap_or(0);
    let mut phases: Vec<PhaseSummary> = (0..count)
        .map(|i| {
            summarize_phases(
                &runs.iter().map(|r| &r.phases[i]).collect::<Vec<_>>(),
                periodic,
            )
        })
        .collect();
    // All phases of a run as one.
    let whole: Vec<PhaseRun> = runs
        .iter()
        .map(|run| {
            let mut all = PhaseRun::default();
            for phase in &run.phases {
                all.time += phase.time;
                all.cpu += phase.cpu;
                all.apiserver_cpu += phase.apiserver_cpu;
                for (key, count) in &phase.requests {
                    *all.requests.entry(key.clone()).or_default() += count;
                }
            }
            all
        })
        .collect();
    phases.push(summarize_phases(
        &whole.iter().collect::<Vec<_>>(),
        periodic,
    ));
    let mib = |kib: u64| round(kib as f64 / 1024.0);
    Summary {
        date: chrono::Utc::now().format("%Y-%m-%d").to_string(),
        phases,
        peak_rss_mib: median(runs.iter().map(|r| mib(r.peak_rss_kib)).collect()),
        rss_end_mib: median(runs.iter().map(|r| mib(r.rss_end_kib)).collect()),
        run_requests: whole.iter().map(|w| audit::total(&w.requests)).collect(),
        run_peak_rss_mib: runs.iter().map(|r| mib(r.peak_rss_kib)).collect(),
    }
}

/// The peer's column.
#[derive(Debug, Clone)]
pub enum PeerFigures {
    /// Measured in this run.
    Measured(Summary),
    /// Not measured in this run (`why`); the figures of the last run that measured it.
    Earlier {
        /// Why not now.
        why: String,
        /// Its figures then.
        summary: Summary,
    },
    /// Not measured in this run (`why`), and no earlier figures are kept.
    Missing {
        /// Why not.
        why: String,
    },
}

impl PeerFigures {
    /// The peer's figures shown, measured now or earlier.
    pub fn summary(&self) -> Option<&Summary> {
        match self {
            PeerFigures::Measured(summary) | PeerFigures::Earlier { summary, .. } => Some(summary),
            PeerFigures::Missing { .. } => None,
        }
    }

    /// The peer's figures as a comment for the section, read back by [`Self::not_measured`]
    /// when a later run cannot build the peer.
    pub fn stored(&self) -> String {
        match self.summary() {
            Some(summary) => format!(
                "<!-- peer-figures {} -->\n",
                serde_json::to_string(summary).expect("summary serializes")
            ),
            None => String::new(),
        }
    }

    /// The peer was not measured (`why`): the figures section `section` of
    /// `docs/benchmarks.md` keeps from the last run that measured it, if any.
    pub fn not_measured(section: &str, why: String) -> Self {
        let kept = crate::support::benchmarks::read_section(section).and_then(|body| {
            let start = body.find("<!-- peer-figures ")? + "<!-- peer-figures ".len();
            let end = start + body[start..].find(" -->")?;
            serde_json::from_str::<Summary>(&body[start..end]).ok()
        });
        match kept {
            Some(summary) => PeerFigures::Earlier { why, summary },
            None => PeerFigures::Missing { why },
        }
    }

    /// A sentence on where the peer's figures come from.
    pub fn provenance(&self, peer: &str) -> String {
        match self {
            PeerFigures::Measured(_) => {
                format!("{peer} was measured in this run, alternating with ours.")
            }
            PeerFigures::Earlier { why, summary } => format!(
                "**{peer} was not measured in this run ({why}); its figures are those measured \
                 on {} and are marked \\*.**",
                summary.date
            ),
            PeerFigures::Missing { why } => format!(
                "**{peer} was not measured in this run ({why}), and no earlier figures are \
                 kept.**"
            ),
        }
    }
}

fn count(value: f64) -> String {
    if value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

fn ratio(ours: f64, peer: f64) -> String {
    if peer > 0.0 {
        format!("{:.2}×", ours / peer)
    } else {
        "—".to_string()
    }
}

/// The tables of a section: per phase (and all phases) time, requests, 404/409, CPU and the
/// kube-apiserver's CPU; peak and final RSS; then the requests by verb and resource. With
/// `steady_state` the row "requests answered 404 in steady state" for that phase.
pub fn render_tables(
    phases: &[(&str, &str)],
    peer: &str,
    ours: &Summary,
    figures: &PeerFigures,
    steady_state: Option<usize>,
) -> String {
    let theirs = figures.summary();
    let mark = if matches!(figures, PeerFigures::Earlier { .. }) {
        "\\*"
    } else {
        ""
    };
    let cell = |value: Option<String>| match value {
        Some(v) => format!("{v}{mark}"),
        None => "not measured".to_string(),
    };
    let mut out =
        format!("| phase | measure | ours | {peer} | ours / peer |\n|---|---|---:|---:|---:|\n");
    let mut row = |label: &str,
                   measure: &str,
                   get: &dyn Fn(&Summary) -> f64,
                   show: &dyn Fn(f64) -> String,
                   with_ratio: bool| {
        let mine = get(ours);
        let peer_value = theirs.map(get);
        out.push_str(&format!(
            "| {label} | {measure} | {} | {} | {} |\n",
            show(mine),
            cell(peer_value.map(show)),
            match peer_value {
                Some(p) if with_ratio => ratio(mine, p),
                _ => "—".to_string(),
            }
        ));
    };
    let seconds = |v: f64| format!("{v:.2} s");
    for i in 0..=phases.len() {
        let label = phases.get(i).map(|p| p.1).unwrap_or("all phases");
        let p = move |s: &Summary| s.phases[i].clone();
        row(label, "time", &|s| p(s).time_s, &seconds, true);
        row("", "requests", &|s| p(s).requests, &count, true);
        row(
            "",
            "— of them periodic (see above)",
            &|s| p(s).periodic,
            &count,
            false,
        );
        row(
            "",
            "requests without the periodic ones",
            &|s| p(s).requests - p(s).periodic,
            &count,
            true,
        );
        row("", "— answered 404", &|s| p(s).not_found, &count, false);
        row("", "— answered 409", &|s| p(s).conflict, &count, false);
        row("", "CPU", &|s| p(s).cpu_s, &seconds, true);
        row(
            "",
            "kube-apiserver CPU",
            &|s| p(s).apiserver_cpu_s,
            &seconds,
            true,
        );
    }
    let mebibytes = |v: f64| format!("{v:.1} MiB");
    row(
        "whole run",
        "peak RSS (VmHWM)",
        &|s| s.peak_rss_mib,
        &mebibytes,
        true,
    );
    row(
        "",
        "RSS after the last phase (VmRSS)",
        &|s| s.rss_end_mib,
        &mebibytes,
        true,
    );
    if let Some(i) = steady_state {
        row(
            phases[i].1,
            "requests answered 404 in steady state",
            &|s| s.phases[i].not_found,
            &count,
            false,
        );
    }

    // Requests by verb and resource, per phase.
    let mut keys: BTreeSet<&String> = BTreeSet::new();
    for summary in std::iter::once(ours).chain(theirs) {
        for phase in &summary.phases[..phases.len()] {
            keys.extend(phase.mix.keys());
        }
    }
    out.push_str(
        "\nRequests by verb and resource (medians; `→ 404`/`→ 409`: answered so):\n\n| request |",
    );
    let mut rule = String::from("|---|");
    for (short, _) in phases {
        out.push_str(&format!(
            " {short}: ours | {short}: peer | {short}: ours / peer |"
        ));
        rule.push_str("---:|---:|---:|");
    }
    out.push('\n');
    out.push_str(&rule);
    out.push('\n');
    let shown = |key: &String| {
        std::iter::once(ours).chain(theirs).any(|summary| {
            summary.phases[..phases.len()]
                .iter()
                .any(|phase| phase.mix.get(key).is_some_and(|v| *v > 0.0))
        })
    };
    for key in keys.into_iter().filter(|key| shown(key)) {
        out.push_str(&format!("| {key} |"));
        for i in 0..phases.len() {
            let get = |s: &Summary| s.phases[i].mix.get(key).copied().unwrap_or(0.0);
            out.push_str(&format!(
                " {} | {} | {} |",
                count(get(ours)),
                cell(theirs.map(|t| count(get(t)))),
                theirs
                    .map(|t| ratio(get(ours), get(t)))
                    .unwrap_or("—".into())
            ));
        }
        out.push('\n');
    }
    let per_run = |s: &Summary| {
        format!(
            "requests {}; peak RSS {} MiB",
            s.run_requests
                .iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join(" / "),
            s.run_peak_rss_mib
                .iter()
                .map(|r| format!("{r:.1}"))
                .collect::<Vec<_>>()
                .join(" / ")
        )
    };
    out.push_str(&format!("\nEach run, ours: {}.", per_run(ours)));
    if let Some(t) = theirs {
        out.push_str(&format!(" {peer}{mark}: {}.", per_run(t)));
    }
    out.push('\n');
    out
}

/// The phases every side-by-side bench plays, as gardenlet does them to an extension kind's
/// objects ([`gardenlet_acts`], [`gardenlet_phase_done`]): short names for column heads, long
/// ones for rows.
pub const GARDENLET_PHASES: [(&str, &str); 3] = [
    ("create", "create → all ready"),
    ("reconcile", "reconcile-annotate all → all ready"),
    ("delete", "delete all → all gone"),
];

/// Phase `phase` of [`GARDENLET_PHASES`] on every `K` of the seed: gardenlet creates every
/// object with the reconcile annotation (`create`, which only the bench knows how to do),
/// annotates every object with `reconcile` and a timestamp, or deletes every object.
pub async fn gardenlet_acts<K>(
    client: &Client,
    phase: usize,
    create: impl std::future::Future<Output = ()>,
) where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let all = Api::<K>::all(client.clone());
    match phase {
        0 => create.await,
        1 => annotate_all_reconcile(client, &all).await,
        _ => delete_every(client, &all).await,
    }
}

/// Waits until phase `phase` of [`GARDENLET_PHASES`] reached its goal: all `total` objects of
/// `K` ready in gardenlet's eyes (create, reconcile) or every one gone (delete).
pub async fn gardenlet_phase_done<K>(client: &Client, phase: usize, total: usize)
where
    K: Resource<DynamicType = ()>
        + ExtensionObject
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    let all = Api::<K>::all(client.clone());
    match phase {
        0 | 1 => wait_all_ready(&all, total).await,
        _ => wait_all_gone(&all).await,
    }
}

/// Whether an audit key (`verb resource…`) is a heartbeat's Lease request: periodic whatever
/// the phase, on both sides.
pub fn is_lease_request(key: &str) -> bool {
    key.split(' ').nth(1) == Some("leases")
}

/// gardenlet's readiness check (`CheckExtensionObject` of gardener's
/// `pkg/utils/kubernetes/health`): [`check_ready`] without its extra rule on the operation
/// type. gardenlet does not look at the type, and a Go peer that reconciles a new object a
/// second time (after a conflict, say) reports `Reconcile` where ours reports `Create`.
pub fn gardenlet_ready<K>(object: &K) -> Result<(), String>
where
    K: Resource + ExtensionObject,
{
    let operation = object
        .default_status()
        .and_then(|s| s.last_operation.as_ref())
        .map(|o| o.type_)
        .unwrap_or(LastOperationType::Reconcile);
    check_ready(object, operation)
}

/// Waits until all `total` objects of `api` pass gardenlet's readiness check
/// ([`gardenlet_ready`]).
pub async fn wait_all_ready<K>(api: &Api<K>, total: usize)
where
    K: Resource + ExtensionObject + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    wait_until(api, "all objects ready", |objects| {
        let ready = objects
            .iter()
            .filter(|o| gardenlet_ready(&***o).is_ok())
            .count();
        if ready == total {
            Ok(())
        } else {
            Err(format!(
                "{ready}/{total} ready; e.g. {:?}",
                objects
                    .iter()
                    .find_map(|o| gardenlet_ready(&**o).err().map(|e| (o.name_any(), e)))
            ))
        }
    })
    .await;
}

/// What gardenlet does to every extension object of a kind on a shoot reconcile: the
/// `reconcile` operation annotation with a timestamp, on every object `all` lists.
pub async fn annotate_all_reconcile<K>(client: &Client, all: &Api<K>)
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let timestamp = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let objects = all.list(&ListParams::default()).await.unwrap().items;
    futures::future::join_all(objects.iter().map(|object| {
        let api: Api<K> = Api::namespaced(client.clone(), &object.namespace().unwrap());
        let name = object.name_any();
        let patch = serde_json::json!({"metadata": {"annotations": {
            "gardener.cloud/operation": "reconcile",
            "gardener.cloud/timestamp": timestamp,
        }}});
        async move {
            api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .unwrap();
        }
    }))
    .await;
}

/// What gardenlet does on a shoot deletion: deletes every object `all` lists.
pub async fn delete_every<K>(client: &Client, all: &Api<K>)
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let objects = all.list(&ListParams::default()).await.unwrap().items;
    futures::future::join_all(objects.iter().map(|object| {
        let api: Api<K> = Api::namespaced(client.clone(), &object.namespace().unwrap());
        let name = object.name_any();
        async move {
            api.delete(&name, &DeleteParams::default()).await.unwrap();
        }
    }))
    .await;
}

/// Waits until `api` has no object left.
pub async fn wait_all_gone<K>(api: &Api<K>)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    wait_until(api, "all objects gone", |objects| {
        if objects.is_empty() {
            Ok(())
        } else {
            Err(format!("{} left", objects.len()))
        }
    })
    .await;
}

/// Waits until `done` holds for the objects of `api`, as a watch (one list, then events) shows
/// them: the check runs on every change, so the phase's end is seen when it happens, and the
/// API server spends on the bench's wait what the changes cost rather than a list per poll.
async fn wait_until<K>(
    api: &Api<K>,
    what: &str,
    done: impl Fn(&[std::sync::Arc<K>]) -> Result<(), String>,
) where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, reflector, watcher};
    const LIMIT: Duration = Duration::from_secs(900);
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api.clone(), watcher::Config::default()))
        .default_backoff();
    let mut stream = std::pin::pin!(stream);
    let deadline = tokio::time::Instant::now() + LIMIT;
    let mut last = String::from("no list yet");
    loop {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(Ok(
                watcher::Event::InitDone | watcher::Event::Apply(_) | watcher::Event::Delete(_),
            ))) => match done(&reader.state()) {
                Ok(()) => return,
                Err(now) => last = now,
            },
            Ok(Some(_)) => {}
            Ok(None) => panic!("the watch for {what} ended; last: {last}"),
            Err(_) => panic!("timed out after {LIMIT:?} waiting for {what}; last: {last}"),
        }
    }
}

/// Deletes, in each of `namespaces`, every object of `K` whose name `keep` does not accept,
/// finalizers removed first; returns once they are gone.
pub async fn delete_all_in<K>(client: &Client, namespaces: &[String], keep: impl Fn(&str) -> bool)
where
    K: Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let keep = &keep;
    // (namespace, name, has finalizers)
    let doomed: Vec<(String, String, bool)> =
        futures::future::join_all(namespaces.iter().map(|namespace| async move {
            let api: Api<K> = Api::namespaced(client.clone(), namespace);
            let list = api
                .list_metadata(&ListParams::default())
                .await
                .expect("list for the cleanup");
            list.items
                .into_iter()
                .filter(|o| !keep(&o.name_any()))
                .map(|o| (namespace.clone(), o.name_any(), !o.finalizers().is_empty()))
                .collect::<Vec<_>>()
        }))
        .await
        .into_iter()
        .flatten()
        .collect();
    futures::future::join_all(
        doomed
            .iter()
            .map(|(namespace, name, finalized)| async move {
                let api: Api<K> = Api::namespaced(client.clone(), namespace);
                if *finalized {
                    let _ = api
                        .patch(
                            name,
                            &PatchParams::default(),
                            &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
                        )
                        .await;
                }
                let _ = api.delete(name, &DeleteParams::default()).await;
            }),
    )
    .await;
    for namespace in namespaces {
        let api: Api<K> = Api::namespaced(client.clone(), namespace);
        crate::support::wait_for("cleanup", Duration::from_secs(60), || async {
            let left = api
                .list_metadata(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items
                .into_iter()
                .filter(|o| !keep(&o.name_any()))
                .count();
            if left == 0 {
                Ok(())
            } else {
                Err(format!("{left} left in {namespace}"))
            }
        })
        .await;
    }
}
